-- ATLAS schema 11: full text is indexed by ATLAS's own text pipeline (atlas_domain::policy::text:
-- words, Latin diacritics folded, Snowball English stems) and scored by its one BM25
-- (atlas_domain::policy::bm25), in the store's in-memory text cache, so SQLite, Qdrant and the
-- in-memory fake cut words and rank them the same. The FTS5 index, which stemmed with Porter
-- and so disagreed with the other stores, is gone with its triggers: nothing reads it, writes
-- no longer pay for it, and a forgotten memory's words have one place fewer to be erased from.
-- The text cache is built again from `memories` on its first search (its file's key names the
-- pipeline, so a file written for FTS5's tokens is not read).
DROP TRIGGER IF EXISTS memories_fts_insert;
DROP TRIGGER IF EXISTS memories_fts_delete;
DROP TRIGGER IF EXISTS memories_fts_update;
DROP TABLE IF EXISTS memories_fts_instances;
DROP TABLE IF EXISTS memories_fts;
