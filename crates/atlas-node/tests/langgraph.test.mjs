// LangGraph.js's store interface (BaseStore of @langchain/langgraph-checkpoint, pinned) on ATLAS:
// the calls a graph makes, and a real graph compiled with the store reading and writing it.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { InvalidNamespaceError } from '@langchain/langgraph-checkpoint'
import { StateGraph, Annotation, START, END } from '@langchain/langgraph'
import { Memory } from 'atlas-memory'
import { AtlasStore } from 'atlas-memory/langgraph'
import { folder } from './helpers.mjs'

function store(t, options = {}) {
  const s = new AtlasStore({ path: join(folder(t), 'store.db'), sleepCycle: false, ...options })
  t.after(() => s.stop())
  return s
}

test('put, get, update, delete: one current value per key, created kept, updated moved', async (t) => {
  const s = store(t)
  await s.put(['users', 'ann'], 'prefs', { theme: 'dark', language: 'en' })
  const first = await s.get(['users', 'ann'], 'prefs')
  assert.deepEqual(first.value, { theme: 'dark', language: 'en' })
  assert.deepEqual(first.namespace, ['users', 'ann'])
  assert.equal(first.key, 'prefs')
  assert.ok(first.createdAt instanceof Date && first.updatedAt instanceof Date)
  await s.put(['users', 'ann'], 'prefs', { theme: 'light', language: 'en' })
  const second = await s.get(['users', 'ann'], 'prefs')
  assert.equal(second.value.theme, 'light')
  assert.equal(second.createdAt.getTime(), first.createdAt.getTime())
  assert.ok(second.updatedAt >= first.updatedAt)
  assert.equal(await s.get(['users', 'bob'], 'prefs'), null, 'another namespace holds nothing')
  await s.delete(['users', 'ann'], 'prefs')
  assert.equal(await s.get(['users', 'ann'], 'prefs'), null)
})

test('search by namespace prefix, filter and query; offsets and limits', async (t) => {
  const s = store(t)
  await s.put(['docs', 'rust'], 'a', { text: 'Ownership and borrowing in Rust', level: 2 })
  await s.put(['docs', 'rust'], 'b', { text: 'Async Rust with tokio', level: 3 })
  await s.put(['docs', 'python'], 'c', { text: 'Python generators explained', level: 1 })
  await s.put(['notes'], 'd', { text: 'Buy milk', level: 0 }, false)
  assert.equal((await s.search(['docs'])).length, 3)
  assert.equal((await s.search(['docs', 'rust'])).length, 2)
  assert.deepEqual((await s.search(['docs'], { filter: { level: { $gte: 2 } } })).map((i) => i.key).sort(), ['a', 'b'])
  assert.deepEqual((await s.search(['docs'], { filter: { level: 1 } })).map((i) => i.key), ['c'])
  const hits = await s.search(['docs'], { query: 'tokio async runtime', limit: 2 })
  assert.equal(hits[0].key, 'b')
  assert.equal(typeof hits[0].score, 'number')
  const milk = await s.search([], { query: 'Buy milk' })
  assert.ok(!milk.some((i) => i.key === 'd'), 'an item put with index false is not searched by text')
  assert.equal((await s.get(['notes'], 'd')).value.text, 'Buy milk', 'but it is stored')
  assert.equal((await s.search(['docs'], { limit: 1, offset: 1 })).length, 1)
})

test('listNamespaces with prefix, suffix, depth and paging', async (t) => {
  const s = store(t)
  await s.put(['a', 'b', 'c'], 'k', { v: 1 })
  await s.put(['a', 'b', 'd'], 'k', { v: 1 })
  await s.put(['x', 'y'], 'k', { v: 1 })
  assert.deepEqual(await s.listNamespaces(), [['a', 'b', 'c'], ['a', 'b', 'd'], ['x', 'y']])
  assert.deepEqual(await s.listNamespaces({ prefix: ['a'] }), [['a', 'b', 'c'], ['a', 'b', 'd']])
  assert.deepEqual(await s.listNamespaces({ suffix: ['d'] }), [['a', 'b', 'd']])
  assert.deepEqual(await s.listNamespaces({ maxDepth: 2 }), [['a', 'b'], ['x', 'y']])
  assert.deepEqual(await s.listNamespaces({ limit: 1, offset: 1 }), [['a', 'b', 'd']])
})

test('index fields choose the text searched, for the store and per put', async (t) => {
  const s = store(t, { index: { fields: ['title'] } })
  await s.put(['docs'], 'a', { title: 'Sourdough starter care', body: 'quantum chromodynamics' })
  await s.put(['docs'], 'b', { title: 'Gauge theories', body: 'bread' }, ['body'])
  const bread = await s.search(['docs'], { query: 'sourdough', limit: 1 })
  assert.equal(bread[0].key, 'a')
  const byBody = await s.search(['docs'], { query: 'bread', limit: 1 })
  assert.equal(byBody[0].key, 'b', 'a put with its own index fields is searched by them')
})

test('a store over a Memory it was given leaves it open when it stops', async (t) => {
  const memory = await Memory.open({ path: join(folder(t), 'shared.db'), sleepCycle: false })
  t.after(() => memory.close())
  const s = new AtlasStore({ memory })
  await s.put(['n'], 'k', { v: 1 })
  await s.stop()
  assert.equal((await memory.stats()).constructor, Object, 'the shared space still answers')
})

test("LangGraph's namespace rules, and a bad batch writes nothing", async (t) => {
  const s = store(t)
  await assert.rejects(s.put([], 'k', { v: 1 }), InvalidNamespaceError)
  await assert.rejects(s.put(['langgraph'], 'k', { v: 1 }), InvalidNamespaceError)
  await assert.rejects(s.batch([
    { namespace: ['ok'], key: 'k', value: { v: 1 } },
    { namespace: ['bad.label'], key: 'k', value: { v: 2 } },
  ]), InvalidNamespaceError)
  assert.equal(await s.get(['ok'], 'k'), null)
})

test('concurrent puts of one key leave one current value', async (t) => {
  const s = store(t)
  await Promise.all(Array.from({ length: 20 }, (_, i) => s.put(['race'], 'k', { i })))
  const found = await s.search(['race'])
  assert.equal(found.length, 1)
  assert.equal(found[0].value.i, 19, 'writes of one store run in order')
})

test('a compiled graph reads and writes memories through the store', async (t) => {
  const s = store(t)
  await s.put(['memories', 'ann'], 'home', { text: 'Ann lives in Lisbon' })
  const State = Annotation.Root({ question: Annotation(), answer: Annotation() })
  const graph = new StateGraph(State)
    .addNode('respond', async (state, config) => {
      const found = await config.store.search(['memories', 'ann'], { query: state.question, limit: 1 })
      await config.store.put(['memories', 'ann'], 'last-question', { text: state.question })
      return { answer: found[0]?.value.text ?? 'unknown' }
    })
    .addEdge(START, 'respond')
    .addEdge('respond', END)
    .compile({ store: s })
  const out = await graph.invoke({ question: 'Where does Ann live?' })
  assert.equal(out.answer, 'Ann lives in Lisbon')
  assert.equal((await s.get(['memories', 'ann'], 'last-question')).value.text, 'Where does Ann live?')
})
