'use strict'
// ATLAS's errors as JavaScript classes: every rejection of the native module carries the error
// body every door answers with (`{code, message, field, location, index}`), raised here as the
// `AtlasError` subclass of its code, so that `instanceof InvalidInput` and `err.field` work the
// way they do in Python.

class AtlasError extends Error {
  constructor(message, { code = 'internal', field = null, location = null, index = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause })
    this.name = new.target.name
    /** What went wrong, as the HTTP API's `error.code` says it. */
    this.code = code
    /** The argument at fault (`memories[3].text`), when one is. */
    this.field = field
    /** Where in the input (a file and line, a JSON path), when known. */
    this.location = location
    /** The item of a batch at fault, when one is. */
    this.index = index
  }
}

/** Input ATLAS refuses; `field` names it. Nothing was stored. */
class InvalidInput extends AtlasError {}
/** No memory has this id (or it was forgotten for good). */
class NotFound extends AtlasError {}
/** The caller may not do this. */
class Forbidden extends AtlasError {}
/** An idempotency key used before for another payload. */
class Conflict extends AtlasError {}
/** The store is busy (another writer); try again. */
class Busy extends AtlasError {}
/** The store failed, or the file is not an ATLAS space, or is too new. */
class StorageError extends AtlasError {}
/** The embedding model could not be loaded or run. */
class EmbeddingError extends AtlasError {}
/** The configuration is wrong. */
class ConfigError extends AtlasError {}
/** The space was closed. */
class ClosedError extends AtlasError {}

const BY_CODE = {
  invalid_input: InvalidInput,
  not_found: NotFound,
  forbidden: Forbidden,
  conflict: Conflict,
  busy: Busy,
  storage: StorageError,
  not_atlas: StorageError,
  schema_too_new: StorageError,
  embedding: EmbeddingError,
  model_mismatch: EmbeddingError,
  config: ConfigError,
  closed: ClosedError,
}

/** The error of a body `{code, message, field, location, index}`. */
function fromBody(body, cause) {
  const Class = BY_CODE[body.code] || AtlasError
  return new Class(body.message || 'unknown error', {
    code: body.code || 'internal',
    field: body.field ?? null,
    location: body.location ?? null,
    index: body.index ?? null,
    cause,
  })
}

/** A native rejection as the AtlasError it stands for; a JavaScript value of the wrong type
 * (which Node-API refuses before ATLAS sees it) as InvalidInput. */
function fromNative(error) {
  if (error instanceof AtlasError) return error
  const text = error && typeof error.message === 'string' ? error.message : String(error)
  if (text.startsWith('{')) {
    try {
      const body = JSON.parse(text)
      if (body && typeof body.code === 'string') return fromBody(body, undefined)
    } catch {
      // Not a body: fall through.
    }
  }
  if (error && (error.code === 'InvalidArg' || error.code === 'NumberExpected' || error.code === 'StringExpected'
    || error.code === 'ObjectExpected' || error.code === 'BooleanExpected' || error.code === 'ArrayExpected')) {
    return new InvalidInput(text, { code: 'invalid_input', cause: error })
  }
  return new AtlasError(text, { code: 'internal', cause: error })
}

/** `field: message` as InvalidInput naming `field`. */
function invalid(field, message) {
  return new InvalidInput(`${field}: ${message}`, { code: 'invalid_input', field })
}

module.exports = {
  AtlasError, InvalidInput, NotFound, Forbidden, Conflict, Busy, StorageError, EmbeddingError, ConfigError,
  ClosedError, fromNative, invalid,
}
