-- ATLAS schema 7: a counter of committed writes, which the cache files beside the database
-- (the text and vector caches, written after a load) record, so that a file made before a
-- later write is recognised as stale and rebuilt, never trusted. The store's single writer adds
-- one in every write transaction.
CREATE TABLE cache_epoch (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    changes INTEGER NOT NULL
);
INSERT INTO cache_epoch (id, changes) VALUES (1, 0);
