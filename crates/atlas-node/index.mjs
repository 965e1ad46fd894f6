// The package `atlas-memory` for ES modules: the CommonJS entry's exports, by name (one native
// module and one set of classes whichever way it is imported).
import atlas from './index.cjs'

export const {
  Memory, mem0Item, AtlasError, InvalidInput, NotFound, Forbidden, Conflict, Busy, StorageError,
  EmbeddingError, ConfigError, ClosedError, version,
} = atlas
export default atlas
