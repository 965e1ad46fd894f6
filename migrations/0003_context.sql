-- ATLAS schema 3: every episode carries the turn it answers (its temporal predecessor's line),
-- indexed as a third full-text column and embedded with it (docs/EVAL.md: contextual retrieval).
-- The line format `Speaker: text` is atlas_domain::policy::embedding::line; the backfill below
-- must build it the same way.
DROP TRIGGER memories_fts_insert;
DROP TRIGGER memories_fts_delete;
DROP TRIGGER memories_fts_update;
DROP TABLE memories_fts;

ALTER TABLE memories ADD COLUMN context TEXT;
UPDATE memories SET context = (
    SELECT CASE WHEN p.speaker IS NULL THEN p.text ELSE p.speaker || ': ' || p.text END
    FROM edges e JOIN memories p ON p.id = e.src
    WHERE e.dst = memories.id AND e.kind = 'temporal' AND e.src <> e.dst
    ORDER BY p.event_time DESC, p.id DESC LIMIT 1
) WHERE kind = 'episode';

CREATE VIRTUAL TABLE memories_fts USING fts5 (
    text,
    speaker,
    context,
    content = 'memories',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text, speaker, context) VALUES (new.id, new.text, new.speaker, new.context);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, speaker, context)
    VALUES ('delete', old.id, old.text, old.speaker, old.context);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text, speaker, context ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, speaker, context)
    VALUES ('delete', old.id, old.text, old.speaker, old.context);
    INSERT INTO memories_fts (rowid, text, speaker, context) VALUES (new.id, new.text, new.speaker, new.context);
END;
INSERT INTO memories_fts (memories_fts) VALUES ('rebuild');

-- Vectors made before this schema lack the context: embed those memories again. Until then
-- their old vectors keep serving.
INSERT OR IGNORE INTO vector_queue (id) SELECT id FROM memories WHERE context IS NOT NULL;

-- Every token instance of the index, read by the store's in-memory BM25 cache
-- (crates/atlas-store-sqlite/src/text_cache.rs).
CREATE VIRTUAL TABLE memories_fts_instances USING fts5vocab (memories_fts, 'instance');
