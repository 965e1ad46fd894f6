'use strict'
// `Memory`: one memory space, in-process. mem0's TypeScript OSS API (`add`, `search`, `get`,
// `getAll`, `update`, `delete`, `deleteAll`, `history`, `reset`) in mem0ai's shapes, and
// ATLAS's own (`remember`, `recall`, `context`, `consolidate`, `forget`/`recover`,
// `export`/`import`, the agent memories). Every call is a Promise; the work runs on ATLAS's
// threads, never on the event loop's. Arguments are checked by the native module, as every
// door checks them; what is checked here is only what mem0's shapes add.

const native = require('../native.cjs')
const { fromNative, invalid, NotFound } = require('./errors.cjs')
const filters = require('./filters.cjs')

/** What mem0's `getAll` lists: what was said and what was learned from it. */
const LISTED_KINDS = ['episode', 'fact', 'core', 'summary']
/** Most hits one recall returns (every door's limit). */
const MAX_K = 1000
/** mem0ai's default number of results of `search` and `getAll`. */
const MEM0_LIMIT = 100

/** A native call whose rejection becomes the AtlasError it stands for. */
async function guarded(promise) {
  try {
    return await promise
  } catch (error) {
    throw fromNative(error)
  }
}

/** mem0's ids are strings, ATLAS's integers: both are taken. */
function toId(value, field = 'memoryId') {
  const n = typeof value === 'string' && /^[0-9]+$/.test(value.trim()) ? Number(value) : value
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1) {
    throw invalid(field, `${JSON.stringify(value)} is not a memory id (a positive integer, or its string)`)
  }
  return n
}

function limitOf(options, field) {
  const k = options.limit ?? options.topK ?? MEM0_LIMIT
  if (!Number.isInteger(k) || k < 1 || k > MAX_K) throw invalid(field, `a whole number from 1 to ${MAX_K}, got ${JSON.stringify(k)}`)
  return k
}

/** A time as ATLAS reads it: RFC 3339 (a Date is written so). */
function rfc3339(value, field = 'time') {
  if (value === undefined || value === null) return undefined
  if (!(value instanceof Date)) return value
  if (Number.isNaN(value.getTime())) throw invalid(field, 'an invalid Date')
  return value.toISOString()
}

/** A scope as the native layer takes it, or undefined when empty. */
function scopeOf(scope, field = 'scope') {
  if (scope === undefined || scope === null) return undefined
  if (typeof scope !== 'object' || Array.isArray(scope)) throw invalid(field, 'expects {user, agent, session}')
  const unknown = Object.keys(scope).filter((k) => !['user', 'agent', 'session'].includes(k))
  if (unknown.length) throw invalid(`${field}.${unknown[0]}`, 'unknown part (expected user, agent or session)')
  const parts = Object.fromEntries(Object.entries(scope).filter(([, v]) => v !== undefined && v !== null))
  return Object.keys(parts).length ? parts : undefined
}

function kindsOf(kind) {
  if (kind === undefined || kind === null) return []
  return Array.isArray(kind) ? kind : [kind]
}

function messagesOf(messages) {
  if (typeof messages === 'string') return [{ role: 'user', content: messages }]
  if (Array.isArray(messages)) return messages.map((m) => (typeof m === 'string' ? { role: 'user', content: m } : m))
  if (messages && typeof messages === 'object') return [messages]
  throw invalid('messages', 'expected a string, a message {role, content} or an array of them')
}

/** An ATLAS record in mem0's shape, with ATLAS's kind and event time beside it. */
function mem0Item(record, score) {
  const scope = record.scope || {}
  const meta = record.meta && Object.keys(record.meta).length ? { ...record.meta } : undefined
  const item = { id: String(record.id), memory: record.text, metadata: meta, createdAt: record.recorded_at, updatedAt: undefined }
  if (score !== undefined) item.score = score
  // mem0ai 2.x's spelling, and 3.x's beside it.
  if (scope.user != null) item.userId = item.user_id = scope.user
  if (scope.agent != null) item.agentId = item.agent_id = scope.agent
  if (record.session != null) item.runId = item.run_id = record.session
  if (record.speaker != null) item.role = record.speaker
  item.kind = record.kind
  item.time = record.time
  return item
}

/** Options of the constructor that are ATLAS's; anything else is mem0's config. */
const ATLAS_OPTIONS = new Set(['path', 'db', 'url', 'space', 'configFile', 'sleepCycle'])

function openArgs(config) {
  if (config === undefined || config === null) return {}
  if (typeof config === 'string') return { db: config }
  if (typeof config !== 'object' || Array.isArray(config)) throw invalid('config', 'expects a path or an options object')
  const args = {}
  const mem0 = {}
  for (const [key, value] of Object.entries(config)) {
    if (value === undefined) continue
    if (key === 'embedder' && typeof value === 'string') args.embedder = value
    else if (key === 'path' || key === 'db') args.db = value
    else if (ATLAS_OPTIONS.has(key)) args[key] = value
    else mem0[key] = value
  }
  if (Object.keys(mem0).length) args.mem0 = mem0
  return args
}

class Memory {
  /**
   * A memory space: `new Memory()` (the file `ATLAS_DB`, else `atlas.db`), `new Memory('agent.db')`,
   * `new Memory({ path, url, space, configFile, embedder: 'onnx' | 'http' | 'none', sleepCycle })`,
   * or mem0's config (`{ embedder: { provider: 'ollama', config: { model, url } } }`, its other
   * sections accepted and left out). The space opens in the background; the first call waits for it.
   */
  constructor(config) {
    // A value Node-API refuses (a number for a path) throws at the call: raised as a rejection
    // of its own class like every other error.
    this._opening = guarded(Promise.resolve().then(() => native.open(openArgs(config))))
    // A failed open rejects every call; it is not an unhandled rejection by itself.
    this._opening.catch(() => {})
  }

  /** Opens a space and waits until it is ready (errors of the configuration surface here). */
  static async open(config) {
    const memory = new Memory(config)
    await memory.ready()
    return memory
  }

  /** mem0's constructor from its config object. */
  static fromConfig(config, path) {
    return new Memory(path === undefined ? config : { ...config, path })
  }

  /** Resolves once the space is open. */
  async ready() {
    await this._opening
    return this
  }

  async _call(name, args) {
    const space = await this._opening
    return guarded(space.call(name, args))
  }

  async _space(method, ...args) {
    const space = await this._opening
    return guarded(space[method](...args))
  }

  // --- mem0's API ------------------------------------------------------------------------

  /** Stores the messages as episodes of the entity's scope, in one write. With `infer` (the
   * default) the sleep cycle consolidates them into facts, entities and summaries in the
   * background; no model is called here. */
  async add(messages, options = {}) {
    const { scope } = filters.split(options.filters, { userId: options.userId, agentId: options.agentId, runId: options.runId })
    if (!Object.keys(scope).length) throw invalid('userId', 'one of userId, agentId or runId is required')
    if (options.metadata != null && (typeof options.metadata !== 'object' || Array.isArray(options.metadata))) {
      throw invalid('metadata', 'expects an object')
    }
    const items = messagesOf(messages).map((message, i) => {
      if (!message || typeof message.content !== 'string') throw invalid(`messages[${i}].content`, 'every message needs a string content')
      const meta = { ...(options.metadata || {}) }
      if (options.infer === false && !('infer' in meta)) meta.infer = false
      const item = { text: message.content, scope, meta }
      const speaker = message.name ?? message.role
      if (speaker != null) item.speaker = String(speaker)
      return item
    })
    if (!items.length) return { results: [] }
    const { ids } = await this._call('remember_many', { memories: items })
    return {
      results: ids.map((id, i) => ({
        id: String(id),
        memory: items[i].text,
        event: 'ADD',
        // mem0ai's OSS Memory says the event in the metadata too.
        metadata: { ...items[i].meta, event: 'ADD' },
        ...(items[i].speaker !== undefined ? { role: items[i].speaker } : {}),
      })),
    }
  }

  /** The memories that answer `query`, best first: `{ results: [{ id, memory, score, metadata,
   * createdAt, userId, ... }] }`. Entity ids narrow the scope; other `filters` are conditions on
   * metadata; `threshold` drops hits scoring below it (ATLAS's fused score, not a cosine);
   * `explain: true` gives each result each signal's rank, raw score and share. */
  async search(query, options = {}) {
    const k = limitOf(options, options.topK !== undefined ? 'topK' : 'limit')
    const { scope, conditions } = filters.split(options.filters, { userId: options.userId, agentId: options.agentId, runId: options.runId })
    const filtered = Object.keys(conditions).length > 0
    // Conditions on metadata are checked after the recall: ask for more to keep k.
    const fetch = filtered ? Math.min(MAX_K, Math.max(k * 5, 50)) : k
    const answer = await this._call('recall', {
      query, k: fetch, scope: Object.keys(scope).length ? scope : null, explain: Boolean(options.explain),
    })
    const results = []
    for (const hit of answer.hits) {
      const item = mem0Item(hit, hit.score)
      if (options.explain) item.explain = hit.explain || {}
      if (options.threshold != null && hit.score < options.threshold) continue
      if (filtered && !filters.matches(item, conditions)) continue
      results.push(item)
      if (results.length === k) break
    }
    return { results }
  }

  /** The memory in mem0's shape, or null if there is none (or it was deleted). */
  async get(memoryId) {
    let record
    try {
      record = await this._call('get', { id: toId(memoryId) })
    } catch (error) {
      if (error instanceof NotFound) return null
      throw error
    }
    if (record.lifecycle && record.lifecycle.deleted_at != null) return null
    return mem0Item(record)
  }

  /** The scope's memories, newest first: `{ results: [...] }`. */
  async getAll(options = {}) {
    const k = limitOf(options, options.topK !== undefined ? 'topK' : 'limit')
    const { scope, conditions } = filters.split(options.filters, { userId: options.userId, agentId: options.agentId, runId: options.runId })
    const filtered = Object.keys(conditions).length > 0
    // A version `update` (or the sleep cycle) replaced is history, not one of the memories.
    const records = await this._space('latest', { ...scope, kind: LISTED_KINDS, limit: filtered ? Math.max(k * 5, 500) : k, current: true })
    let results = records.map((r) => mem0Item(r))
    if (filtered) results = results.filter((r) => filters.matches(r, conditions))
    return { results: results.slice(0, k) }
  }

  /** Records the new text as the memory's next version: it supersedes the old one, which
   * `history` keeps. The new version has its own id, returned as `id`. */
  async update(memoryId, data, options = {}) {
    // mem0ai 3.x passes `{ text, metadata }` (or `data`); 2.x the text itself.
    const given = data !== null && typeof data === 'object' ? data : { text: data, metadata: options.metadata }
    const text = given.text ?? given.data
    if (typeof text !== 'string') throw invalid('data', 'the new text of the memory is required')
    const metadata = given.metadata
    if (metadata != null && (typeof metadata !== 'object' || Array.isArray(metadata))) throw invalid('metadata', 'expects an object')
    const old = toId(memoryId)
    const revised = await this._space('revise', old, text, metadata ?? null)
    return { message: 'Memory updated successfully!', id: String(revised.id), previousId: String(old) }
  }

  /** Deletes the memory for good (`forget` is the recoverable way). */
  async delete(memoryId) {
    await this._call('forget', { id: toId(memoryId), hard: true })
    return { message: 'Memory deleted successfully!' }
  }

  /** Deletes every memory of the entity's scope for good. */
  async deleteAll(options = {}) {
    const { scope } = filters.split(undefined, { userId: options.userId, agentId: options.agentId, runId: options.runId })
    if (!Object.keys(scope).length) {
      throw invalid('userId', 'at least one of userId, agentId or runId is required; reset() deletes every memory')
    }
    const deleted = await this._space('forgetScope', scope)
    return { message: 'Memories deleted successfully!', deleted }
  }

  /** The memory's versions, oldest first, as mem0's history rows: the first `ADD`, then one
   * `UPDATE` per revision (by `update`, or by the sleep cycle for a fact). */
  async history(memoryId) {
    const explained = await this._call('explain', { id: toId(memoryId) })
    const chain = [...explained.replaced].reverse().concat([explained.memory])
    const seen = new Set(chain.map((r) => r.id))
    let newer = explained.replaced_by
    while (newer.length && !seen.has(newer[0].id)) {
      chain.push(newer[0])
      seen.add(newer[0].id)
      newer = (await this._call('explain', { id: newer[0].id })).replaced_by
    }
    return chain.map((record, i) => ({
      id: String(record.id),
      memory_id: String(record.id),
      previous_value: i ? chain[i - 1].text : null,
      new_value: record.text,
      action: i ? 'UPDATE' : 'ADD',
      created_at: record.recorded_at,
      updated_at: null,
      is_deleted: 0,
    }))
  }

  /** Deletes every memory of the space for good. */
  async reset() {
    await this._space('forgetScope', {})
  }

  // --- ATLAS's own API -------------------------------------------------------------------

  /** Stores one episode on the hot path (no model waits) and returns its id. */
  async remember(text, options = {}) {
    const args = {
      text, speaker: options.speaker, scope: scopeOf(options.scope), session: options.session,
      time: rfc3339(options.time), meta: options.meta || {},
    }
    return (await this._call('remember', args)).id
  }

  /** Stores many episodes in one write, all or none; each item takes `remember`'s options
   * beside its `text`. */
  async rememberMany(items) {
    if (!Array.isArray(items)) throw invalid('items', 'expects an array of {text, ...}')
    const memories = items.map((item, i) => {
      const memory = { ...item }
      if ('scope' in memory) memory.scope = scopeOf(memory.scope, `items[${i}].scope`)
      if ('time' in memory) memory.time = rfc3339(memory.time, `items[${i}].time`)
      return memory
    })
    return (await this._call('remember_many', { memories })).ids
  }

  /** The memories that answer `query`, best first, by full text, vectors, graph and time fused:
   * `{ hits: [{ id, text, score, kind, explain, passage, ... }], signals, ... }`. `asOf` recalls
   * what held then; `explain` adds each signal's share. */
  async recall(query, options = {}) {
    return this._call('recall', {
      query, k: options.k ?? 10, scope: scopeOf(options.scope), kind: kindsOf(options.kind),
      since: rfc3339(options.since, 'since'), until: rfc3339(options.until, 'until'), as_of: rfc3339(options.asOf, 'asOf'),
      explain: Boolean(options.explain),
    })
  }

  /** The scope's newest memories, newest first, as records. */
  async latest(options = {}) {
    return this._space('latest', { ...(scopeOf(options.scope) || {}), kind: kindsOf(options.kind), limit: options.limit ?? 100 })
  }

  /** A memory's record with its edges and lifecycle; rejects with NotFound if there is none. */
  async getMemory(id) {
    return this._call('get', { id: toId(id, 'id') })
  }

  /** Where a memory came from and what became of it. */
  async explain(id) {
    return this._call('explain', { id: toId(id, 'id') })
  }

  /** Forgets a memory: softly by default (`recover` undoes it), for good with `hard`. */
  async forget(id, options = {}) {
    return this._call('forget', { id: toId(id, 'id'), hard: Boolean(options.hard) })
  }

  /** Brings back a memory forgotten softly, decayed or archived. */
  async recover(id) {
    return this._space('recover', toId(id, 'id'))
  }

  /** Says whether a recalled memory helped: resets its decay (a fact's SM-2 review). */
  async feedback(id, options) {
    if (!options || typeof options.useful !== 'boolean') throw invalid('useful', 'expects true or false')
    return this._space('feedback', toId(id, 'id'), options.useful)
  }

  /** Runs one sleep cycle now: episodes become facts with history, entities, summaries. */
  async consolidate(options = {}) {
    return this._call('consolidate', { end_sessions: Boolean(options.endSessions) })
  }

  /** The memories a task needs packed into a prompt budget (tokens): `text` is the prompt. */
  async context(task, options = {}) {
    const args = { task, scope: scopeOf(options.scope), session: options.session }
    if (options.budget !== undefined) args.budget = options.budget
    return this._call('context', args)
  }

  /** Writes a full export (ids, edges, context) that `import` restores exactly; how many memories. */
  async export(path, options = {}) {
    return this._space('exportFile', path, Boolean(options.vectors))
  }

  /** Imports a JSON Lines file of memories, or restores a full export: all or nothing. */
  async import(path, options = {}) {
    return this._space('importFile', path, Boolean(options.again))
  }

  /** Counts and sizes of the space. */
  async stats() {
    return this._call('stats', {})
  }

  /** Embeds now every memory still waiting for its vector; how many. */
  async flushVectors() {
    return this._space('flushVectors')
  }

  /** Tells the sleep cycle the conversation paused (sessions may be summarised). */
  async endSession() {
    return this._space('endSession')
  }

  /** Stores a task's trajectory in the Experience memory; with `learn` (the default), updates
   * the Strategy bank. */
  async learn(trajectory, options = {}) {
    return this._call('learn', { trajectory, learn: options.learn ?? true, scope: scopeOf(options.scope) })
  }

  /** Past tasks like this one, what worked first. */
  async experiences(task, options = {}) {
    return (await this._call('search_experiences', { task, k: options.k ?? 5, scope: scopeOf(options.scope) })).hits
  }

  /** Strategies for situations like this one, with their success rates. */
  async strategies(task, options = {}) {
    const args = { task, k: options.k ?? 5, scope: scopeOf(options.scope), explore: Boolean(options.explore) }
    return (await this._call('read_strategies', args)).hits
  }

  /** Records whether a strategy worked. */
  async strategyOutcome(id, options) {
    return this._call('strategy_outcome', { id: toId(id, 'id'), success: options && options.success })
  }

  /** Reusable code patterns for the task. */
  async concepts(task, options = {}) {
    return (await this._call('search_concepts', { task, k: options.k ?? 5, scope: scopeOf(options.scope) })).concepts
  }

  /** Records a use of a concept and whether it worked. */
  async conceptOutcome(id, options) {
    return this._call('concept_outcome', { id: toId(id, 'id'), success: options && options.success })
  }

  /** Closes the space: later calls reject with ClosedError. Memories still waiting for their
   * vector are embedded at the next open. */
  async close() {
    let space
    try {
      space = await this._opening
    } catch {
      return
    }
    await guarded(space.close())
  }

  /** The file, or the named space and its server. */
  async label() {
    return (await this._opening).label
  }
}

module.exports = { Memory, mem0Item, guarded }
