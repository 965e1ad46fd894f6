'use strict'
// `AtlasStore`: LangGraph.js's `BaseStore` on an ATLAS memory space, for
// `graph.compile({ store: new AtlasStore({ path: 'memory.db' }) })`. The same mapping as the
// Python package's store: each item is a memory of the agent `langgraph` (or the one given); its
// namespace is the scope's user (labels joined by "."), its key the scope's session, its value
// and LangGraph's bookkeeping the metadata, its text the indexed fields. A put of an existing key
// records a new version that supersedes the old one (`explain` and `history` keep them); a search
// with a query is ATLAS's hybrid recall (full text, vectors, recency) within the namespace.
// Needs `@langchain/langgraph-checkpoint` (a dependency of `@langchain/langgraph`), which is
// passed in (`storeClass`) by the entry that imported it: `langgraph.cjs` requires it,
// `langgraph.mjs` imports it, so that the store extends the very `BaseStore` (and raises the very
// `InvalidNamespaceError`) that the program's own LangGraph sees, ES module or CommonJS.

const { Memory } = require('./memory.cjs')
const { fromNative } = require('./errors.cjs')

/** Where the item's LangGraph record lives in a memory's metadata. */
const FIELD = 'langgraph'
/** Most versions of one key read when it is deleted (each is forgotten for good). */
const MAX_VERSIONS = 1000
/** Most items one listing reads (listNamespaces, a prefix or filter-only search). */
const MAX_LISTED = 100000
/** Most hits one recall returns (every door's limit). */
const MAX_K = 1000

const kindOf = (op) => {
  if ('namespacePrefix' in op) return 'search'
  if ('matchConditions' in op || ('limit' in op && 'offset' in op && !('namespace' in op))) return 'list'
  if ('value' in op) return 'put'
  if ('key' in op) return 'get'
  return null
}

/** The store class over `checkpoint`, the module `@langchain/langgraph-checkpoint`. */
function storeClass(checkpoint) {
  const { BaseStore, InvalidNamespaceError, validateNamespace, getTextAtPath } = checkpoint

  class AtlasStore extends BaseStore {
    /**
     * A LangGraph store in an ATLAS space: `new AtlasStore({ path })` (the options of `Memory`),
     * or over an open `Memory` with `{ memory }`. `index: { fields: [...] }` names the value fields
     * whose text is searched (the whole value by default); `agent` names the scope's agent.
     */
    constructor(options = {}) {
      super()
      const { memory, agent = 'langgraph', index, ...rest } = options
      this.memory = memory || new Memory(rest)
      this.agent = agent
      this.indexFields = (index && index.fields) || ['$']
      // A put reads the key's current version, then records the next one: two at once would both
      // see none and leave two live versions. Writes of one store go one at a time.
      this._writes = Promise.resolve()
    }

    async _space() {
      return this.memory._opening
    }

    async _native(method, ...args) {
      const space = await this._space()
      try {
        return await space[method](...args)
      } catch (error) {
        throw fromNative(error)
      }
    }

    _serial(work) {
      const run = this._writes.then(work, work)
      this._writes = run.catch(() => {})
      return run
    }

    // --- the BaseStore protocol ------------------------------------------------------------

    async batch(operations) {
      // Every op is checked before the first runs: a bad one writes nothing, and a label with a
      // period cannot address another namespace ("foo.bar" is not ["foo", "bar"]).
      for (const op of operations) {
        const kind = kindOf(op)
        if (kind === null) throw new TypeError(`unknown store operation ${JSON.stringify(Object.keys(op))}`)
        if (kind === 'put' || kind === 'get') {
          checkLabels(op.namespace, InvalidNamespaceError)
          if (kind === 'put' && !op.namespace.length) throw new InvalidNamespaceError('Namespace cannot be empty.')
        }
        if (kind === 'search' && op.namespacePrefix.length) checkLabels(op.namespacePrefix, InvalidNamespaceError)
      }
      const results = []
      for (const op of operations) {
        switch (kindOf(op)) {
          case 'get': results.push(await this._get(op)); break
          case 'put': await this._serial(() => this._put(op)); results.push(undefined); break
          case 'search': results.push(await this._search(op)); break
          default: results.push(await this._listNamespaces(op))
        }
      }
      return results
    }

    async put(namespace, key, value, index) {
      validateNamespace(namespace)
      return super.put(namespace, key, value, index)
    }

    // --- operations ------------------------------------------------------------------------

    _scope(namespace, key) {
      const scope = { agent: this.agent, user: namespace.join('.') }
      if (key !== undefined) scope.session = key
      return scope
    }

    async _current(namespace, key) {
      const records = await this._native('latest', { ...this._scope(namespace, key), kind: ['episode'], limit: 1 })
      return records.find(holds) || null
    }

    async _get(op) {
      const record = await this._current(op.namespace, op.key)
      return record ? item(record) : null
    }

    async _put(op) {
      if (op.value === null) return this._delete(op.namespace, op.key)
      const current = await this._current(op.namespace, op.key)
      const now = new Date().toISOString()
      const record = {
        namespace: [...op.namespace],
        key: op.key,
        value: op.value,
        created_at: current ? current.meta[FIELD].created_at : now,
        indexed: op.index !== false,
      }
      const fields = op.index === undefined || op.index === null || op.index === false ? this.indexFields : op.index
      const text = textOf(op.value, fields, getTextAtPath) || op.key
      const meta = { [FIELD]: record }
      if (current === null) {
        await this._native('call', 'remember', { text, speaker: 'langgraph', scope: this._scope(op.namespace), session: op.key, meta })
      } else {
        await this._native('revise', current.id, text, meta)
      }
    }

    async _delete(namespace, key) {
      const records = await this._native('latest', { ...this._scope(namespace, key), limit: MAX_VERSIONS })
      for (const record of records) await this._native('call', 'forget', { id: record.id, hard: true })
    }

    async _search(op) {
      const prefix = op.namespacePrefix
      const offset = op.offset ?? 0
      const wanted = offset + (op.limit ?? 10)
      const found = new Map()
      let ranked
      if (op.query) {
        // The namespace itself is searched inside its scope; deeper ones among the agent's.
        const scopes = prefix.length ? [this._scope(prefix), { agent: this.agent }] : [{ agent: this.agent }]
        for (const scope of scopes) {
          const k = Math.min(MAX_K, Math.max(wanted * (op.filter ? 5 : 2), 20))
          const answer = await this._native('call', 'recall', { query: op.query, k, scope, kind: ['episode'] })
          for (const hit of answer.hits) consider(hit, prefix, op.filter, hit.score, found, true)
        }
        ranked = [...found.values()].sort((a, b) => (b[1] ?? 0) - (a[1] ?? 0))
      } else {
        const records = await this._native('latest', { agent: this.agent, kind: ['episode'], limit: MAX_LISTED })
        for (const record of records) {
          consider(record, prefix, op.filter, undefined, found, false)
          if (found.size >= wanted) break
        }
        ranked = [...found.values()]
      }
      return ranked.slice(offset, wanted).map(([record, score]) => ({ ...item(record), score }))
    }

    async _listNamespaces(op) {
      const namespaces = new Map()
      const records = await this._native('latest', { agent: this.agent, kind: ['episode'], limit: MAX_LISTED })
      for (const record of records) {
        const lg = (record.meta || {})[FIELD]
        if (!lg || !holds(record)) continue
        if ((op.matchConditions || []).every((c) => doesMatch(c, lg.namespace))) {
          const namespace = op.maxDepth !== undefined ? lg.namespace.slice(0, op.maxDepth) : lg.namespace
          namespaces.set(JSON.stringify(namespace), namespace)
        }
      }
      const sorted = [...namespaces.values()].sort((a, b) => a.join('\u0000').localeCompare(b.join('\u0000')))
      const from = op.offset ?? 0
      return sorted.slice(from, from + (op.limit ?? sorted.length))
    }

    /** Closes the space when the store opened it. */
    async stop() {
      if (this._ownsMemory) await this.memory.close()
    }
  }

  return AtlasStore
}

/** A label holding a period would address another namespace once joined. */
function checkLabels(namespace, InvalidNamespaceError) {
  for (const label of namespace) {
    if (typeof label !== 'string' || label.includes('.')) {
      throw new InvalidNamespaceError(`Namespace labels cannot contain periods ('.'): ${JSON.stringify(namespace)}`)
    }
  }
}

/** Whether this version is current (a later put did not supersede it). */
function holds(record) {
  return record.valid_until == null || new Date(record.valid_until) > new Date()
}

function textOf(value, fields, getTextAtPath) {
  const parts = []
  for (const path of fields) {
    if (path === '$') parts.push(JSON.stringify(value))
    else parts.push(...getTextAtPath(value, path).filter(Boolean).map(String))
  }
  return parts.filter((p) => p.trim()).join('\n')
}

function item(record) {
  const lg = record.meta[FIELD]
  return {
    namespace: lg.namespace,
    key: lg.key,
    value: lg.value,
    createdAt: new Date(lg.created_at),
    updatedAt: new Date(record.recorded_at),
  }
}

function consider(record, prefix, filter, score, found, needIndexed) {
  const lg = (record.meta || {})[FIELD]
  if (!lg || !holds(record)) return
  const namespace = lg.namespace
  if (prefix.some((label, i) => namespace[i] !== label) || (needIndexed && lg.indexed === false)) return
  if (filter && !Object.entries(filter).every(([k, v]) => compare(field(lg.value, k), v))) return
  const slot = JSON.stringify([namespace, lg.key])
  if (!found.has(slot) || (score ?? 0) > (found.get(slot)[1] ?? 0)) found.set(slot, [record, score])
}

function doesMatch(condition, namespace) {
  const { matchType, path } = condition
  if (path.length > namespace.length) return false
  if (matchType === 'prefix') return path.every((p, i) => p === '*' || namespace[i] === p)
  if (matchType === 'suffix') return path.every((p, i) => p === '*' || namespace[namespace.length - path.length + i] === p)
  throw new Error(`Unsupported match type: ${matchType}`)
}

/** The value's field `key`, or, when it has none of that name, the nested field its dotted
 * path names. */
function field(value, key) {
  if (key in value || !key.includes('.')) return value[key]
  let found = value
  for (const part of key.split('.')) {
    if (found === null || typeof found !== 'object' || !(part in found)) return undefined
    found = found[part]
  }
  return found
}

const OPERATORS = new Set(['$eq', '$ne', '$gt', '$gte', '$lt', '$lte', '$in', '$nin'])

/** LangGraph's filter on a value field: equality, nested objects, and its `$` operators. */
function compare(value, condition) {
  if (condition !== null && typeof condition === 'object' && !Array.isArray(condition)) {
    const keys = Object.keys(condition)
    if (keys.length && keys.every((k) => OPERATORS.has(k))) return keys.every((op) => operator(value, op, condition[op]))
    return value !== null && typeof value === 'object' && keys.every((k) => compare(value[k], condition[k]))
  }
  return value === condition
}

function operator(value, op, operand) {
  switch (op) {
    case '$eq': return value === operand
    case '$ne': return value !== operand
    case '$gt': return Number(value) > Number(operand)
    case '$gte': return Number(value) >= Number(operand)
    case '$lt': return Number(value) < Number(operand)
    case '$lte': return Number(value) <= Number(operand)
    case '$in': return Array.isArray(operand) && operand.includes(value)
    default: return !Array.isArray(operand) || !operand.includes(value)
  }
}

module.exports = { storeClass }
