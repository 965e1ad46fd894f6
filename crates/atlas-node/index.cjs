'use strict'
// The package `atlas-memory`: ATLAS's memory engine in-process (CommonJS entry; `index.mjs`
// is the same for ES modules).

const native = require('./native.cjs')
const errors = require('./lib/errors.cjs')
const { Memory, mem0Item } = require('./lib/memory.cjs')

module.exports = {
  Memory,
  mem0Item,
  AtlasError: errors.AtlasError,
  InvalidInput: errors.InvalidInput,
  NotFound: errors.NotFound,
  Forbidden: errors.Forbidden,
  Conflict: errors.Conflict,
  Busy: errors.Busy,
  StorageError: errors.StorageError,
  EmbeddingError: errors.EmbeddingError,
  ConfigError: errors.ConfigError,
  ClosedError: errors.ClosedError,
  version: native.version(),
}
