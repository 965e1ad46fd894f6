-- ATLAS schema 4: receipts of idempotent writes and claims on queued vector work.
-- (The file's ownership mark, PRAGMA application_id, is set by every migration step.)

-- One row per idempotency key (an import's file hash, a `remember` key), written in the same
-- transaction as the write it acknowledges; `ids` are id runs ("1-5,9"), `recorded_at` in ms.
CREATE TABLE receipts (
    key         TEXT    PRIMARY KEY,
    ids         TEXT    NOT NULL,
    recorded_at INTEGER NOT NULL
) WITHOUT ROWID;

-- A process embedding queued memories claims them until `claimed_until` (ms), so that
-- concurrent processes never embed the same memories twice; an expired claim is taken over.
ALTER TABLE vector_queue ADD COLUMN claimed_by TEXT;
ALTER TABLE vector_queue ADD COLUMN claimed_until INTEGER;
