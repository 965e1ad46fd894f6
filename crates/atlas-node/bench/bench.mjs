// The Node side of `cargo xtask bench node`: search and add latency from Node beside the same
// operations timed inside Rust in the same process (interleaved, one by one, so that both see
// the same caches and the same machine), and 8 concurrent searches against 1. Prints one JSON
// object. Usage: node bench.mjs DB QUERIES_FILE WORK_DIR
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Memory } from 'atlas-memory'

const [db, queriesFile, work] = process.argv.slice(2)
const queries = readFileSync(queriesFile, 'utf8').split('\n').filter((q) => q.trim())

const p50 = (samples) => {
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

async function timed(call) {
  const started = performance.now()
  await call()
  return performance.now() - started
}

/** Searches per second when `concurrent` Promises at a time share `total` searches. */
async function throughput(memory, concurrent, total) {
  let next = 0
  const worker = async () => {
    while (next < total) {
      const i = next++
      await memory.recall(queries[i % queries.length], { k: 10 })
    }
  }
  const started = performance.now()
  await Promise.all(Array.from({ length: concurrent }, worker))
  return total / ((performance.now() - started) / 1e3)
}

const out = {}
const memory = await Memory.open({ path: db, sleepCycle: false })
const space = await memory._opening
await memory.recall(queries[0], { k: 10 }) // the first query loads the search caches
const rust = []
const recall = []
const search = []
for (const query of queries) {
  rust.push(...(await space.opTimings('recall', [{ query, k: 10 }])))
  recall.push(await timed(() => memory.recall(query, { k: 10 })))
  search.push(await timed(() => memory.search(query, { limit: 10 })))
}
out.rust_recall_p50_ms = p50(rust)
out.recall_p50_ms = p50(recall)
out.search_p50_ms = p50(search)
const total = queries.length * 2
out.one_qps = await throughput(memory, 1, total)
out.eight_qps = await throughput(memory, 8, total)
await memory.close()

const adds = await Memory.open({ path: join(work, 'adds.db'), sleepCycle: false })
const addSpace = await adds._opening
await adds.add('warm up', { userId: 'bench' })
const rustAdd = []
const add = []
for (let i = 0; i < 300; i++) {
  const text = `${queries[i % queries.length]} (${i})`
  rustAdd.push(...(await addSpace.opTimings('remember_many', [{ memories: [{ text, scope: { user: 'bench' } }] }])))
  add.push(await timed(() => adds.add(text, { userId: 'bench' })))
}
out.rust_add_p50_ms = p50(rustAdd)
out.add_p50_ms = p50(add)
await adds.close()
console.log(JSON.stringify(out))
