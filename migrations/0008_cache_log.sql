-- ATLAS schema 8: what changed since a cache file was made. A process that finds the text or
-- vector cache file some writes behind the database replays those writes onto it (the rows
-- named here, read again from the tables) instead of rebuilding the cache from every row.
-- `cache_epochs` holds the random number of each recent write (schema 7), so that a file's
-- state is recognised as part of this database's history; `cache_log` the memories each write
-- changed: inserted, deleted or re-texted (these triggers, which mirror the full-text index's),
-- or given a vector (written by the store's code: the vector table is virtual). The writer
-- keeps the last 100,000 writes of both; a file older than that is rebuilt.
CREATE TABLE cache_epochs (epoch INTEGER PRIMARY KEY, nonce INTEGER NOT NULL);
INSERT INTO cache_epochs (epoch, nonce) SELECT changes, nonce FROM cache_epoch;
CREATE TABLE cache_log (epoch INTEGER NOT NULL, id INTEGER NOT NULL, PRIMARY KEY (epoch, id)) WITHOUT ROWID;
CREATE TRIGGER cache_log_insert AFTER INSERT ON memories BEGIN
    INSERT OR IGNORE INTO cache_log (epoch, id) SELECT changes + 1, new.id FROM cache_epoch;
END;
CREATE TRIGGER cache_log_delete AFTER DELETE ON memories BEGIN
    INSERT OR IGNORE INTO cache_log (epoch, id) SELECT changes + 1, old.id FROM cache_epoch;
END;
CREATE TRIGGER cache_log_update AFTER UPDATE OF text, speaker, context ON memories BEGIN
    INSERT OR IGNORE INTO cache_log (epoch, id) SELECT changes + 1, new.id FROM cache_epoch;
END;
