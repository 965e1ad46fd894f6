-- ATLAS schema 10: an episode carries the turn before it as context only when that turn is at
-- most 100 words (atlas_domain::policy::embedding::CONTEXT_MAX_WORDS, docs/EVAL.md: a long
-- message before a memory is a memory of its own; carried along, it filled the embedder's window
-- and lengthened the memory for full-text ranking). Contexts stored before are cleared by the
-- same rule, words counted as SQL can: runs of blanks (spaces, tabs, line breaks) plus one.
-- Their memories are embedded again (their vectors held the long context); until then the old
-- vectors keep serving. The triggers of schema 3 and 8 re-index the changed rows.
CREATE TEMP TABLE long_context AS
SELECT id FROM (
    SELECT id, trim(replace(replace(replace(replace(
        replace(replace(replace(context, char(13), ' '), char(10), ' '), char(9), ' '),
        '  ', ' '), '  ', ' '), '  ', ' '), '  ', ' ')) AS blanks_collapsed
    FROM memories WHERE context IS NOT NULL
) WHERE length(blanks_collapsed) - length(replace(blanks_collapsed, ' ', '')) >= 100;
INSERT OR IGNORE INTO vector_queue (id) SELECT id FROM long_context;
UPDATE memories SET context = NULL WHERE id IN (SELECT id FROM long_context);
DROP TABLE long_context;
