-- ATLAS schema 5: what the sleep cycle needs. Which episodes it has processed (or failed on,
-- with attempts and the last error, for retries with backoff), and a ledger of its cycles.
CREATE TABLE consolidation (
    id           INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    processed_at INTEGER,
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    last_attempt INTEGER
);
CREATE TABLE cycles (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    report TEXT    NOT NULL
);
-- Facts are found by subject, entities by kind and scope.
CREATE INDEX memories_fact_subject ON memories (json_extract(body, '$.subject')) WHERE kind = 'fact';
