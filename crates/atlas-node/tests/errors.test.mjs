// Bad input: a clear error naming what was wrong and where, as an AtlasError subclass; nothing
// stored by a refused call.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { Memory, AtlasError, InvalidInput, NotFound, ConfigError, ClosedError } from 'atlas-memory'
import { space, folder } from './helpers.mjs'

async function count(memory) {
  return (await memory.latest({ limit: 1000 })).length
}

test('a refused write names its field and stores nothing, not even the batch items that were fine', async (t) => {
  const { memory } = await space(t)
  await memory.remember('kept')
  const refusals = [
    [() => memory.remember(''), 'text'],
    [() => memory.rememberMany([{ text: 'fine' }, { text: '' }]), 'memories[1].text'],
    [() => memory.add('x', {}), 'userId'],
    [() => memory.add([{ role: 'user' }], { userId: 'u' }), 'messages[0].content'],
    [() => memory.add('x', { userId: '  ' }), 'userId'],
    [() => memory.add('x', { userId: 'a', filters: { userId: 'b' } }), 'filters.userId'],
    [() => memory.search('x', { userId: 'u', limit: 0 }), 'limit'],
    [() => memory.search('x', { userId: 'u', filters: { n: { between: 1 } } }), 'filters.n.between'],
    [() => memory.remember('x', { scope: { tenant: 'a' } }), 'scope.tenant'],
    [() => memory.get('not-an-id'), 'memoryId'],
    [() => memory.update(1, 42), 'data'],
    [() => memory.deleteAll({}), 'userId'],
    [() => memory.remember('x', { time: new Date('not a date') }), 'time'],
    [() => memory.update(1, 'x', { metadata: 'str' }), 'metadata'],
    // Issue 69: the native call read a misspelt scope as an empty one and deleted every user's memories.
    [() => memory._space('forgetScope', { userId: 'ann' }), 'scope.userId'],
    [() => memory._space('forgetScope', { user: 7 }), 'scope.user'],
  ]
  for (const [call, field] of refusals) {
    await assert.rejects(call, (error) => {
      assert.ok(error instanceof InvalidInput, `${field}: ${error}`)
      assert.ok(error instanceof AtlasError)
      assert.equal(error.code, 'invalid_input')
      assert.equal(error.field, field, error.message)
      return true
    })
  }
  assert.equal(await count(memory), 1, 'nothing refused was stored')
})

test('a batch error says which item; a missing memory is NotFound; a closed space says so', async (t) => {
  const { memory } = await space(t)
  await assert.rejects(memory.rememberMany([{ text: 'a' }, { text: 'b', time: 'yesterday-ish' }]), (error) => {
    assert.ok(error instanceof InvalidInput)
    assert.match(`${error.field} ${error.message}`, /memories\[1\]\.time/)
    return true
  })
  await assert.rejects(memory.getMemory(987654), NotFound)
  assert.equal(await memory.get('987654'), null)
  await memory.close()
  await assert.rejects(memory.stats(), ClosedError)
})

test('a wrong configuration fails the open with ConfigError naming the key', async (t) => {
  const dir = folder(t)
  await assert.rejects(
    Memory.open({ path: join(dir, 'x.db'), embedder: { provider: 'ollama', config: { modle: 'x' } } }),
    (error) => {
      assert.ok(error instanceof ConfigError, String(error))
      assert.match(error.message, /config\.embedder\.config\.modle/)
      return true
    },
  )
  await assert.rejects(Memory.open({ path: join(dir, 'y.db'), embedder: 'telepathy' }), ConfigError)
  await assert.rejects(Memory.open({ path: join(dir, 'z.db'), vectorStor: {} }), /vector_stor/)
  await assert.rejects(Memory.open({ path: 42 }), InvalidInput, 'a value of the wrong type rejects like every error')
})

test('values of the wrong type are InvalidInput, not a crash', async (t) => {
  const { memory } = await space(t)
  await assert.rejects(memory.remember(42), (error) => error instanceof InvalidInput && error.field === 'text')
  await assert.rejects(memory.recall('x', { k: 'ten' }), InvalidInput)
  await assert.rejects(memory.recall('x', { k: 5000 }), InvalidInput)
  await assert.rejects(memory.feedback(1, {}), InvalidInput)
  assert.equal(await count(memory), 0)
})
