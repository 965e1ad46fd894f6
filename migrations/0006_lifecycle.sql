-- ATLAS schema 6: what happens to a memory after it is written. `deleted_at` (ms) marks a soft
-- deletion (recall skips it; it stays restorable until archived or hard-forgotten);
-- `lifecycle` is JSON {"last_used"?, "uses"?, "review"?} (use and a fact's SM-2 schedule),
-- NULL while nothing has happened.
ALTER TABLE memories ADD COLUMN deleted_at INTEGER;
ALTER TABLE memories ADD COLUMN lifecycle TEXT;
CREATE INDEX memories_deleted ON memories (deleted_at) WHERE deleted_at IS NOT NULL;
-- A hard forget leaves nothing behind: FTS5 removes a deleted row's terms from its index at
-- once (instead of leaving delete markers until a merge), and the connections zero deleted
-- content (PRAGMA secure_delete, set when the store opens).
INSERT INTO memories_fts (memories_fts, rank) VALUES ('secure-delete', 1);
