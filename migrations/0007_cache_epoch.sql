-- ATLAS schema 7: what state the database is in, for the cache files beside it (the text and
-- vector caches, written after a load): a count of committed writes and a random number drawn
-- anew by every write transaction, both recorded in a file, so that a file made before a later
-- write is recognised as stale and rebuilt, never trusted. The random number tells apart two
-- states with the same count: a database replaced by another, or restored from a backup and
-- written again. The store's single writer updates both in every write transaction.
CREATE TABLE cache_epoch (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    changes INTEGER NOT NULL,
    nonce   INTEGER NOT NULL
);
INSERT INTO cache_epoch (id, changes, nonce) VALUES (1, 0, random());
