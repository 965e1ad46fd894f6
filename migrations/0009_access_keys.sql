-- ATLAS schema 9: the access keys of a served space (`atlas keys`). Only the SHA-256 of a
-- token is kept; `id` is its first 12 hex digits. A key is confined to a user and/or an agent
-- (both null only for an admin key) and has a role; revoking keeps the row for the record.
CREATE TABLE access_keys (
    id TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    user TEXT,
    agent TEXT,
    role TEXT NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
