'use strict'
// mem0's `filters`: entity ids become ATLAS's scope; every other key is a condition on a
// memory's metadata (or on one of its fields), with mem0's operators. The same rules as the
// Python package's `atlas._filters`.

const { invalid } = require('./errors.cjs')

/** mem0's entity ids (both spellings: the OSS TypeScript API's and the wire's) and the part
 * of ATLAS's scope each names. */
const ENTITY_KEYS = {
  userId: 'user', agentId: 'agent', runId: 'session',
  user_id: 'user', agent_id: 'agent', run_id: 'session',
}
/** mem0's wildcard: `{key: "*"}` matches any value the memory has for the key. */
const WILDCARD = '*'
const OPERATORS = new Set(['eq', 'ne', 'in', 'nin', 'gt', 'gte', 'lt', 'lte', 'contains', 'icontains'])

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v)

/** The scope that the entity ids (options and inside `filters`) name, and the rest of the
 * filters. The same id given twice with different values is an error. */
function split(filters, entities) {
  if (filters !== undefined && filters !== null && !isPlainObject(filters)) {
    throw invalid('filters', `expects an object of conditions, got ${Array.isArray(filters) ? 'an array' : typeof filters}`)
  }
  const scope = {}
  const named = {}
  for (const [key, value] of Object.entries(entities || {})) {
    if (value === undefined || value === null) continue
    if (typeof value !== 'string' || !value.trim()) throw invalid(key, 'an entity id is a non-empty string')
    scope[ENTITY_KEYS[key]] = value
    named[ENTITY_KEYS[key]] = key
  }
  const rest = {}
  for (const [key, value] of Object.entries(filters || {})) {
    if (!(key in ENTITY_KEYS)) {
      rest[key] = value
      continue
    }
    if (typeof value !== 'string' || !value.trim()) throw invalid(`filters.${key}`, 'an entity id is a non-empty string')
    if (value === WILDCARD) {
      // Any id, as long as there is one: a condition, not a scope.
      rest[ENTITY_KEYS[key] === 'session' ? 'runId' : `${ENTITY_KEYS[key]}Id`] = value
      continue
    }
    const part = ENTITY_KEYS[key]
    if (part in scope && scope[part] !== value) {
      throw invalid(`filters.${key}`, `${JSON.stringify(value)} differs from ${named[part]}=${JSON.stringify(scope[part])}`)
    }
    scope[part] = value
    named[part] = `filters.${key}`
  }
  check(rest)
  return { scope, conditions: rest }
}

/** Refuses a malformed condition before any memory is looked at, so that a query with no
 * candidates is refused like one with many. */
function check(conditions, path = 'filters') {
  for (const [key, condition] of Object.entries(conditions)) {
    if (key === 'AND' || key === 'OR') {
      if (!Array.isArray(condition)) throw invalid(`${path}.${key}`, 'expects a list of filters')
      condition.forEach((c, i) => {
        if (!isPlainObject(c)) throw invalid(`${path}.${key}[${i}]`, 'expects an object of conditions')
        check(c, `${path}.${key}[${i}]`)
      })
    } else if (key === 'NOT') {
      const list = Array.isArray(condition) ? condition : [condition]
      list.forEach((c) => {
        if (!isPlainObject(c)) throw invalid(`${path}.NOT`, 'expects an object of conditions')
        check(c, `${path}.NOT`)
      })
    } else if (isPlainObject(condition)) {
      for (const [op, operand] of Object.entries(condition)) {
        if (!OPERATORS.has(op)) {
          throw invalid(`${path}.${key}.${op}`, `unknown operator (expected one of ${[...OPERATORS].sort().join(', ')})`)
        }
        if ((op === 'in' || op === 'nin') && !Array.isArray(operand)) throw invalid(`${path}.${key}.${op}`, 'expects a list')
      }
    }
  }
}

const MISSING = Symbol('missing')

/** The field of a result that an entity key names, in either spelling. */
const ENTITY_FIELDS = { user_id: 'userId', agent_id: 'agentId', run_id: 'runId' }

function valueOf(item, key) {
  key = ENTITY_FIELDS[key] || key
  const metadata = item.metadata || {}
  if (Object.prototype.hasOwnProperty.call(metadata, key)) return metadata[key]
  return Object.prototype.hasOwnProperty.call(item, key) ? item[key] : MISSING
}

const equal = (a, b) => a === b || (typeof a === 'object' && typeof b === 'object' && JSON.stringify(a) === JSON.stringify(b))

function compare(value, operand, path, op) {
  const comparable = (typeof value === 'number' && typeof operand === 'number')
    || (typeof value === 'string' && typeof operand === 'string')
  if (!comparable) throw invalid(`${path}.${op}`, `cannot compare ${JSON.stringify(value)} with ${JSON.stringify(operand)}`)
  return value < operand ? -1 : value > operand ? 1 : 0
}

function within(value, operand, path, op) {
  if (!Array.isArray(operand)) throw invalid(`${path}.${op}`, 'expects a list')
  return operand.some((o) => equal(value, o))
}

function contains(value, operand, path) {
  if (typeof value === 'string') return value.includes(String(operand))
  if (Array.isArray(value)) return value.some((v) => equal(v, operand))
  throw invalid(`${path}.contains`, `cannot look inside ${JSON.stringify(value)}`)
}

function holds(value, condition, path) {
  if (condition === WILDCARD) return value !== MISSING && value !== null
  if (!isPlainObject(condition)) return value !== MISSING && equal(value, condition)
  for (const [op, operand] of Object.entries(condition)) {
    if (!OPERATORS.has(op)) {
      throw invalid(`${path}.${op}`, `unknown operator (expected one of ${[...OPERATORS].sort().join(', ')})`)
    }
    if (value === MISSING) {
      if (op === 'ne' || op === 'nin') continue
      return false
    }
    let ok
    switch (op) {
      case 'eq': ok = equal(value, operand); break
      case 'ne': ok = !equal(value, operand); break
      case 'in': ok = within(value, operand, path, op); break
      case 'nin': ok = !within(value, operand, path, op); break
      case 'gt': ok = compare(value, operand, path, op) > 0; break
      case 'gte': ok = compare(value, operand, path, op) >= 0; break
      case 'lt': ok = compare(value, operand, path, op) < 0; break
      case 'lte': ok = compare(value, operand, path, op) <= 0; break
      case 'contains': ok = contains(value, operand, path); break
      default: ok = String(value).toLowerCase().includes(String(operand).toLowerCase())
    }
    if (!ok) return false
  }
  return true
}

/** Whether a mem0-shaped item passes `filters`: `AND`/`OR`/`NOT`, `key: value`, `key: "*"`
 * (any value), and `key: {op: value}`; a key is looked up in the metadata first, then in the
 * item. */
function matches(item, filters, path = 'filters') {
  for (const [key, condition] of Object.entries(filters)) {
    if (key === 'AND' || key === 'OR') {
      if (!Array.isArray(condition)) throw invalid(`${path}.${key}`, 'expects a list of filters')
      const results = condition.map((c, i) => matches(item, c, `${path}.${key}[${i}]`))
      if (!(key === 'AND' ? results.every(Boolean) : results.some(Boolean))) return false
    } else if (key === 'NOT') {
      const conditions = Array.isArray(condition) ? condition : [condition]
      if (conditions.some((c) => matches(item, c, `${path}.NOT`))) return false
    } else if (!holds(valueOf(item, key), condition, `${path}.${key}`)) {
      return false
    }
  }
  return true
}

module.exports = { split, matches, WILDCARD, ENTITY_KEYS }
