// `atlas-memory/ai` for ES modules: the Vercel AI SDK's memory tools and system prompt.
import * as ai from 'ai'
import * as zod from 'zod'
import lib from './lib/ai.cjs'

export const atlasTools = lib.toolsWith(ai, zod)
export const { systemPrompt } = lib
