-- ATLAS schema 11: an episode whose speaker is a conversation role (user, assistant, system,
-- developer, tool, function, human, ai: atlas_domain::policy::embedding::ROLES) is embedded
-- without that word, and so is a context that starts with one (docs/EVAL.md: a role word added
-- one shared direction to half the space's vectors; BEAM dev dense R@10 0.571 -> 0.605). Those
-- memories are embedded again; until then the old vectors keep serving. Nothing else changes.
INSERT OR IGNORE INTO vector_queue (id)
SELECT id FROM memories
WHERE lower(trim(coalesce(speaker, ''))) IN ('user', 'assistant', 'system', 'developer', 'tool', 'function', 'human', 'ai')
   OR (context IS NOT NULL AND instr(context, ': ') > 1
       AND lower(substr(context, 1, instr(context, ': ') - 1))
           IN ('user', 'assistant', 'system', 'developer', 'tool', 'function', 'human', 'ai'));
