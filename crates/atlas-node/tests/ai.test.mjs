// The Vercel AI SDK (ai, pinned): the memory tools called by a scripted model through a
// generateText loop, and the system prompt packed from context.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { generateText, isStepCount } from 'ai'
import { MockLanguageModelV4 } from 'ai/test'
import { InvalidInput } from 'atlas-memory'
import { atlasTools, systemPrompt } from 'atlas-memory/ai'
import { space } from './helpers.mjs'

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
}

function toolCall(id, toolName, input) {
  return {
    content: [{ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(input) }],
    finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
    usage,
    warnings: [],
  }
}

test('a model stores with remember and finds with recall, inside the scope it was given', async (t) => {
  const { memory } = await space(t)
  await memory.remember('Bob lives in Oslo', { scope: { user: 'bob' } })
  const tools = atlasTools(memory, { scope: { user: 'ann' }, k: 3 })
  const script = [
    toolCall('c1', 'remember', { text: 'Ann is allergic to peanuts' }),
    toolCall('c2', 'recall', { query: 'What is Ann allergic to?' }),
    { content: [{ type: 'text', text: 'Noted: no peanuts.' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] },
  ]
  const model = new MockLanguageModelV4({ doGenerate: async () => script.shift() })
  const result = await generateText({ model, tools, prompt: 'Remember my allergy, then check it.', stopWhen: isStepCount(5) })
  assert.equal(result.text, 'Noted: no peanuts.')
  const calls = result.steps.flatMap((step) => step.toolResults)
  assert.deepEqual(calls.map((c) => c.toolName), ['remember', 'recall'])
  const recalled = calls[1].output.memories.map((m) => m.text)
  assert.ok(recalled.includes('Ann is allergic to peanuts'), JSON.stringify(recalled))
  assert.ok(!recalled.some((text) => text.includes('Oslo')), "another user's memory is out of the tools' reach")
  assert.equal((await memory.latest({ scope: { user: 'ann' } }))[0].text, 'Ann is allergic to peanuts')
})

test("the tools' input schemas refuse what the model gets wrong", async (t) => {
  const { memory } = await space(t)
  const tools = atlasTools(memory, { scope: { user: 'ann' } })
  const bad = toolCall('c1', 'remember', { text: '' })
  const done = { content: [{ type: 'text', text: 'ok' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }
  const script = [bad, done]
  const model = new MockLanguageModelV4({ doGenerate: async () => script.shift() })
  const result = await generateText({ model, tools, prompt: 'x', stopWhen: isStepCount(3) })
  assert.equal(result.text, 'ok')
  assert.equal((await memory.latest({ scope: { user: 'ann' } })).length, 0, 'nothing stored for an invalid call')
})

test('systemPrompt packs what the task needs after the base prompt', async (t) => {
  const { memory } = await space(t)
  await memory.remember('Ann prefers window seats', { scope: { user: 'ann' } })
  const prompt = await systemPrompt(memory, 'Book a flight for Ann', { scope: { user: 'ann' }, base: 'You are a travel agent.' })
  assert.ok(prompt.startsWith('You are a travel agent.'))
  assert.match(prompt, /window seats/)
})

test('tools and prompts without a scope are refused: they would reach every user', async (t) => {
  const { memory } = await space(t)
  for (const options of [undefined, {}, { scope: {} }, { scope: { user: undefined } }, { scope: { user: '' } }]) {
    assert.throws(() => atlasTools(memory, options), (error) => error instanceof InvalidInput && String(error.field).startsWith('scope'))
  }
  await assert.rejects(systemPrompt(memory, 'x', { scope: { user: undefined } }), InvalidInput)
})
