-- ATLAS schema 12: a memory whose text the embedder refuses (a content policy, a text past its
-- window) or whose vector is unusable (NaN, another dimension, no length) is set aside instead
-- of holding up the queue behind it: its row stays in `vector_queue`, claimed by 'set-aside'
-- until a long backoff passes (atlas_domain::ports::VECTOR_SET_ASIDE_MS), and
-- `vector_failures` says why (`atlas stats`). Only a failure of a memory still queued counts;
-- storing its vector deletes both rows; a re-embed (`rebind_model`) clears the failures and
-- their claims; a memory deleted for good takes its row with it.
CREATE TABLE IF NOT EXISTS vector_failures (
    id INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    reason TEXT NOT NULL
);
