'use strict'
// `atlas-memory/ai` for CommonJS: the Vercel AI SDK's memory tools and system prompt.
const { toolsWith, systemPrompt } = require('./lib/ai.cjs')

module.exports = { atlasTools: toolsWith(require('ai'), require('zod')), systemPrompt }
