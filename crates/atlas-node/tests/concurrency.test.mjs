// One space under many Promises and two processes; the event loop free while ATLAS works.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Memory } from 'atlas-memory'
import { space, folder } from './helpers.mjs'

test('1,000 concurrent Promises on one space: every write stored once, every read answered', async (t) => {
  const { memory } = await space(t, { embedder: 'none' })
  const writes = Array.from({ length: 1000 }, (_, i) => memory.remember(`note ${i} about topic ${i % 10}`, { scope: { user: 'u' } }))
  const ids = await Promise.all(writes)
  assert.equal(new Set(ids).size, 1000)
  const reads = await Promise.all(Array.from({ length: 200 }, (_, i) => memory.recall(`topic ${i % 10}`, { k: 5, scope: { user: 'u' } })))
  // Near-duplicate notes fold into one hit, so a read answers with at most 5.
  reads.forEach((r, i) => {
    assert.ok(r.hits.length >= 1 && r.hits.length <= 5, `read ${i}: ${r.hits.length} hits`)
    assert.ok(r.hits.every((h) => h.text.endsWith(`topic ${i % 10}`)), `read ${i} found its topic`)
  })
  assert.equal((await memory.latest({ limit: 1000 })).length, 1000)
})

function child(db, tag, n) {
  const script = `
    const { Memory } = require('atlas-memory')
    ;(async () => {
      const m = await Memory.open({ path: ${JSON.stringify(db)}, sleepCycle: false, embedder: 'none' })
      for (let i = 0; i < ${n}; i += 10) {
        await Promise.all(Array.from({ length: 10 }, (_, j) => m.remember('${tag} ' + (i + j), { scope: { user: '${tag}' } })))
      }
      await m.close()
    })().catch((e) => { console.error(e); process.exit(1) })`
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'inherit', 'inherit'] })
    proc.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${tag} exited with ${code}`))))
  })
}

test('two processes writing one file at once lose nothing', async (t) => {
  const db = join(folder(t), 'shared.db')
  await Promise.all([child(db, 'left', 300), child(db, 'right', 300)])
  const memory = await Memory.open({ path: db, sleepCycle: false, embedder: 'none' })
  t.after(() => memory.close())
  assert.equal((await memory.latest({ scope: { user: 'left' }, limit: 1000 })).length, 300)
  assert.equal((await memory.latest({ scope: { user: 'right' }, limit: 1000 })).length, 300)
})

test('a timer keeps ticking while 10,000 memories are imported', async (t) => {
  const { memory, dir } = await space(t)
  const file = join(dir, 'many.jsonl')
  const lines = Array.from({ length: 10000 }, (_, i) =>
    JSON.stringify({ text: `imported memory ${i}: a line long enough to be worth embedding, about subject ${i % 97}`, scope: { user: 'bulk' } }))
  writeFileSync(file, lines.join('\n') + '\n')
  const ticks = []
  const timer = setInterval(() => ticks.push(performance.now()), 10)
  const started = performance.now()
  const imported = await memory.import(file)
  const took = performance.now() - started
  clearInterval(timer)
  assert.equal(imported.imported, 10000)
  const gaps = ticks.slice(1).map((tick, i) => tick - ticks[i])
  const longest = Math.max(0, ...gaps, ticks.length ? ticks[0] - started : took)
  // A blocked loop shows as one gap as long as the import; a free one ticks every 10 ms.
  assert.ok(ticks.length >= 2, `the timer ticked ${ticks.length} times during a ${took.toFixed(0)} ms import`)
  assert.ok(longest < Math.max(250, took / 2), `longest pause ${longest.toFixed(0)} ms of a ${took.toFixed(0)} ms import`)
})
