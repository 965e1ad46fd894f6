-- ATLAS schema 1: memories and typed bi-temporal edges.
-- Times are milliseconds since the Unix epoch (UTC). `id` is the rowid that the full-text
-- index and the vector table link by; AUTOINCREMENT keeps ids from ever being reused.
CREATE TABLE memories (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    kind          TEXT    NOT NULL,
    text          TEXT    NOT NULL,
    speaker       TEXT,
    scope_user    TEXT,
    scope_agent   TEXT,
    scope_session TEXT,
    event_time    INTEGER NOT NULL,
    recorded_at   INTEGER NOT NULL,
    valid_from    INTEGER NOT NULL,
    valid_until   INTEGER,
    meta          TEXT    NOT NULL DEFAULT '{}',
    body          TEXT    NOT NULL
);
CREATE INDEX memories_session_time ON memories (scope_session, kind, event_time);
CREATE INDEX memories_kind_time ON memories (kind, event_time);
CREATE INDEX memories_user ON memories (scope_user) WHERE scope_user IS NOT NULL;
CREATE INDEX memories_agent ON memories (scope_agent) WHERE scope_agent IS NOT NULL;

CREATE TABLE edges (
    src         INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    dst         INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    kind        TEXT    NOT NULL,
    weight      REAL    NOT NULL DEFAULT 1.0,
    valid_from  INTEGER NOT NULL,
    valid_until INTEGER,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (src, dst, kind)
) WITHOUT ROWID;
CREATE INDEX edges_dst ON edges (dst);

-- Store-level facts such as which embedding model made the vectors.
CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
