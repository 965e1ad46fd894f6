// mem0's TypeScript API and ATLAS's own, through the package as installed from its tarball.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { Memory, AtlasError } from 'atlas-memory'
import { space } from './helpers.mjs'

test('add, search, get, getAll, update, history, delete, deleteAll and reset answer in mem0 shapes', async (t) => {
  const { memory } = await space(t)
  const added = await memory.add(
    [
      { role: 'user', content: 'I moved to Vienna last spring' },
      { role: 'assistant', content: 'Vienna is lovely in May' },
    ],
    { userId: 'frank', metadata: { topic: 'home' } },
  )
  assert.equal(added.results.length, 2)
  assert.deepEqual(added.results.map((r) => r.event), ['ADD', 'ADD'])
  assert.deepEqual(added.results[0].metadata, { topic: 'home', event: 'ADD' }, "mem0ai's OSS Memory says the event in the metadata")
  assert.equal(typeof added.results[0].id, 'string')
  await memory.add('My dog is called Rex', { userId: 'frank', metadata: { topic: 'pets' } })
  await memory.add('I live in Lisbon', { userId: 'ana' })

  const found = await memory.search('Where does Frank live?', { userId: 'frank', limit: 3 })
  assert.ok(found.results.length >= 1 && found.results.length <= 3)
  assert.match(found.results[0].memory, /Vienna/)
  for (const item of found.results) {
    assert.equal(item.userId, 'frank', 'a search stays inside the entity it names')
    assert.equal(typeof item.score, 'number')
    assert.ok(item.createdAt)
  }
  const pets = await memory.search('animals', { userId: 'frank', filters: { topic: 'pets' } })
  assert.deepEqual(pets.results.map((r) => r.memory), ['My dog is called Rex'])
  const explained = await memory.search('Vienna', { userId: 'frank', limit: 1, explain: true })
  assert.ok(explained.results[0].explain && Object.keys(explained.results[0].explain).length > 0)
  const none = await memory.search('Vienna', { userId: 'frank', threshold: 1e9 })
  assert.deepEqual(none.results, [])

  const dog = (await memory.getAll({ userId: 'frank', filters: { topic: { eq: 'pets' } } })).results[0]
  assert.equal(dog.memory, 'My dog is called Rex')
  assert.deepEqual(dog.metadata, { topic: 'pets' })
  assert.equal((await memory.get(dog.id)).memory, 'My dog is called Rex')
  assert.equal((await memory.getAll({ userId: 'frank' })).results.length, 3)
  assert.equal((await memory.getAll({ userId: 'frank', limit: 1 })).results.length, 1)

  const updated = await memory.update(dog.id, 'My dog is called Max')
  assert.equal(updated.message, 'Memory updated successfully!')
  const listed = (await memory.getAll({ userId: 'frank' })).results.map((r) => r.memory)
  assert.ok(listed.includes('My dog is called Max') && !listed.includes('My dog is called Rex'), `a replaced version is history, not listed: ${listed}`)
  const either = await memory.getAll({ filters: { OR: [{ user_id: 'frank' }, { user_id: 'nobody' }] } })
  assert.equal(either.results.length, 3, 'entity keys nested in OR match in either spelling')
  const history = await memory.history(dog.id)
  assert.deepEqual(history.map((h) => [h.action, h.previous_value, h.new_value]), [
    ['ADD', null, 'My dog is called Rex'],
    ['UPDATE', 'My dog is called Rex', 'My dog is called Max'],
  ])
  const after = await memory.search('What is the dog called?', { userId: 'frank', limit: 5 })
  assert.ok(after.results.some((r) => r.memory === 'My dog is called Max'))
  assert.ok(!after.results.some((r) => r.memory === 'My dog is called Rex'), 'a replaced version is not current')

  const again = await memory.update(updated.id, { text: 'My dog is called Max Jr.', metadata: { topic: 'pets' } })
  assert.equal((await memory.get(again.id)).memory, 'My dog is called Max Jr.', "mem0ai 3.x's update({ text, metadata })")
  assert.deepEqual(await memory.delete(again.id), { message: 'Memory deleted successfully!' })
  assert.equal(await memory.get(again.id), null)
  const deleted = await memory.deleteAll({ userId: 'frank' })
  assert.equal(deleted.message, 'Memories deleted successfully!')
  assert.deepEqual((await memory.getAll({ userId: 'frank' })).results, [])
  assert.equal((await memory.getAll({ userId: 'ana' })).results.length, 1, 'deleteAll stays inside its entity')
  await memory.reset()
  assert.deepEqual((await memory.getAll({ userId: 'ana' })).results, [])
})

test("ATLAS's own calls: remember, recall as of a time, context, forget and recover, export and import", async (t) => {
  const { memory, dir } = await space(t)
  const first = await memory.remember('Frank lives in Berlin', { scope: { user: 'frank' }, time: new Date('2024-01-01T00:00:00Z') })
  const ids = await memory.rememberMany([
    { text: 'Frank moved to Vienna', scope: { user: 'frank' }, time: '2025-06-01T00:00:00Z' },
    { text: 'Always answer in German when I ask about travel', scope: { user: 'frank' }, speaker: 'user' },
  ])
  assert.equal(ids.length, 2)
  const recall = await memory.recall('Where does Frank live?', { k: 2, scope: { user: 'frank' }, explain: true })
  assert.ok(recall.hits.length >= 1)
  assert.ok(recall.hits.every((h) => typeof h.score === 'number' && h.explain))
  const then = await memory.recall('Frank', { scope: { user: 'frank' }, asOf: '2024-06-01T00:00:00Z' })
  assert.deepEqual(then.hits.map((h) => h.text), ['Frank lives in Berlin'], 'as of 2024 only the first was said')
  const context = await memory.context('plan a trip for Frank', { scope: { user: 'frank' }, budget: 500 })
  assert.equal(typeof context.text, 'string')
  assert.match(context.text, /German/)

  await memory.forget(first)
  assert.ok(!(await memory.recall('Berlin', { scope: { user: 'frank' } })).hits.some((h) => h.id === first))
  const recovered = await memory.recover(first)
  assert.equal(recovered.recovered, first)

  const file = join(dir, 'export.jsonl')
  assert.equal(await memory.export(file), 3)
  const copy = await Memory.open({ path: join(dir, 'copy.db'), sleepCycle: false })
  t.after(() => copy.close())
  const imported = await copy.import(file)
  assert.equal(imported.restored, true)
  assert.equal(imported.imported, 3)
  assert.equal((await copy.import(file)).replayed, true, 'one content is imported once')
  assert.equal((await copy.getMemory(first)).text, 'Frank lives in Berlin', 'a full export restores ids')
  const stats = await copy.stats()
  assert.equal(typeof stats, 'object')
  await copy.consolidate()
})

test('the agent memories: a trajectory learned, its experience and strategies found', async (t) => {
  const { memory } = await space(t)
  const learned = await memory.learn({
    id: 't1', task: 'fill the enclosed region of a grid', steps: ['find the border', 'flood fill inside'],
    output: 'done', success: true,
  })
  assert.ok(learned.experience)
  const experiences = await memory.experiences('fill a region', { k: 1 })
  assert.equal(experiences[0].task, 'fill the enclosed region of a grid')
  assert.ok(Array.isArray(await memory.strategies('fill a region')))
  assert.ok(Array.isArray(await memory.concepts('fill a region')))
})

test('CommonJS and ES modules import one package', () => {
  const out = execFileSync(process.execPath, ['-e', "const a = require('atlas-memory'); console.log(typeof a.Memory, a.version, new a.InvalidInput('x') instanceof a.AtlasError)"])
  const [kind, version, subclass] = out.toString().trim().split(' ')
  assert.equal(kind, typeof Memory)
  assert.match(version, /^\d+\.\d+\.\d+$/)
  assert.equal(subclass, 'true')
  assert.ok(new (class extends AtlasError {})('x') instanceof Error)
})
