'use strict'
// The Vercel AI SDK's way in: `atlasTools(memory, options)` gives `remember` and `recall` as
// `tool()` definitions with zod input schemas that a model can call in `generateText` or
// `streamText`, and `systemPrompt(memory, task, options)` packs ATLAS's `context` (core memory,
// the memories the task needs, recent history) into a system prompt. Needs `ai` and `zod`, passed
// in (`toolsWith`) by the entry that imported them (`ai.cjs` requires, `ai.mjs` imports), so that
// the tools are made by the program's own copies of both.

const { invalid } = require('./errors.cjs')

/**
 * The memory tools of one scope: `remember` stores what the model was told to keep (an episode
 * of the scope, no model call), `recall` finds what the scope remembers about a question (ATLAS's
 * hybrid recall; `k` hits, default 5). `scope` is `{ user, agent, session }`; the model never
 * chooses it, so one user's conversation cannot read or write another's.
 */
function toolsWith({ tool }, { z }) {
  return function atlasTools(memory, options = {}) {
    const scope = requiredScope(options.scope)
    const k = options.k ?? 5
    return {
      remember: tool({
        description: 'Store something worth remembering about the user or the task for later conversations.',
        inputSchema: z.object({
          text: z.string().min(1).describe('What to remember, as one self-contained statement.'),
        }),
        execute: async ({ text }) => ({ id: await memory.remember(text, { scope, speaker: 'assistant' }) }),
      }),
      recall: tool({
        description: 'Search long-term memory for what is known that answers a question.',
        inputSchema: z.object({
          query: z.string().min(1).describe('The question or topic to look up.'),
        }),
        execute: async ({ query }) => {
          const answer = await memory.recall(query, { k, scope })
          return { memories: answer.hits.map((hit) => ({ id: hit.id, text: hit.passage || hit.text, time: hit.time })) }
        },
      }),
    }
  }
}

/**
 * A system prompt for `task`: `base` (if given), then what ATLAS packs for it within `budget`
 * tokens (every door's default when not given) from the scope's memory.
 */
async function systemPrompt(memory, task, options = {}) {
  const packed = await memory.context(task, { scope: requiredScope(options.scope), session: options.session, budget: options.budget })
  return [options.base, packed.text].filter((part) => part && part.trim()).join('\n\n')
}

/** The scope the tools are bound to: at least one of user, agent, session, each a non-empty
 * string. An empty or half-filled scope (`{ user: req.user?.id }` with no user) would give the
 * model every user's memories, so it is refused. */
function requiredScope(scope) {
  const parts = scope && typeof scope === 'object' && !Array.isArray(scope) ? scope : {}
  for (const [part, value] of Object.entries(parts)) {
    if (value !== undefined && (typeof value !== 'string' || !value.trim())) {
      throw invalid(`scope.${part}`, 'a non-empty string')
    }
  }
  if (!['user', 'agent', 'session'].some((part) => typeof parts[part] === 'string')) {
    throw invalid('scope', 'the tools need the scope they serve ({ user }, { agent } or { session }): without one they would reach every user\'s memories')
  }
  return scope
}

module.exports = { toolsWith, systemPrompt }
