-- ATLAS schema 2: the full-text index and the queue of memories awaiting a vector.
-- FTS5 with external content: the text lives once, in `memories`; triggers keep the index in
-- step. The vector table itself (`memory_vectors`, vec0) is created when an embedder first binds,
-- because its dimension comes from the model.
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    text,
    speaker,
    content = 'memories',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text, speaker) VALUES (new.id, new.text, new.speaker);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, speaker) VALUES ('delete', old.id, old.text, old.speaker);
END;
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text, speaker ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, speaker) VALUES ('delete', old.id, old.text, old.speaker);
    INSERT INTO memories_fts (rowid, text, speaker) VALUES (new.id, new.text, new.speaker);
END;
-- Index what schema 1 already held.
INSERT INTO memories_fts (memories_fts) VALUES ('rebuild');

-- Durable, so that a crash between `remember` and embedding never loses the work to do.
CREATE TABLE vector_queue (
    id INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE
);
CREATE TRIGGER memories_vector_queue AFTER INSERT ON memories BEGIN
    INSERT INTO vector_queue (id) VALUES (new.id);
END;
INSERT INTO vector_queue (id) SELECT id FROM memories;
