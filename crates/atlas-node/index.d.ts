// Types of the package `atlas-memory` (checked by `tsc --noEmit` on docs/NODE.md's examples).

/** Who a memory belongs to; recall looks only inside the scope it is given. */
export interface Scope {
  user?: string
  agent?: string
  session?: string
}

/** A time: a Date, or RFC 3339 text. */
export type Time = Date | string

/** ATLAS's own options of the constructor; any other key is read as mem0's config. */
export interface AtlasOptions {
  /** The SQLite file (created when missing; `ATLAS_DB`, else `atlas.db`). */
  path?: string
  /** A Qdrant server's URL: the space lives there instead of in a file. */
  url?: string
  /** The space's name on that server. */
  space?: string
  /** A TOML configuration file (docs/CONFIG.md). */
  configFile?: string
  /** `onnx` (the default), `http` (an embeddings endpoint) or `none` (full text only); an
   * object is mem0's embedder section. */
  embedder?: 'onnx' | 'http' | 'none' | Mem0EmbedderConfig
  /** Runs the sleep cycle in the background (default true). */
  sleepCycle?: boolean
}

/** mem0's embedder section (`provider`: openai, ollama, huggingface with a URL, onnx). */
export interface Mem0EmbedderConfig {
  provider: string
  config?: Record<string, unknown>
}

/** mem0's config object: its `embedder` is mapped; its other sections are ATLAS's own machinery. */
export interface Mem0Config {
  embedder?: Mem0EmbedderConfig
  vectorStore?: unknown
  llm?: unknown
  historyDbPath?: string
  [section: string]: unknown
}

export type MemoryOptions = string | (AtlasOptions & Omit<Mem0Config, 'embedder'>)

/** A message as mem0 takes it. */
export interface Message {
  role: string
  content: string
  name?: string
}

/** mem0's entity ids. */
export interface Entity {
  userId?: string
  agentId?: string
  runId?: string
}

/** mem0's filters: entity ids, and conditions on metadata (`key: value`, `key: "*"`,
 * `key: { eq | ne | in | nin | gt | gte | lt | lte | contains | icontains: value }`, `AND`,
 * `OR`, `NOT`). */
export type Filters = Record<string, unknown>

export interface AddOptions extends Entity {
  metadata?: Record<string, unknown>
  filters?: Filters
  /** Consolidate in the background (default true); false keeps the messages as said. */
  infer?: boolean
}

export interface SearchOptions extends Entity {
  /** How many results (default 100, at most 1,000); `topK` is the same. */
  limit?: number
  topK?: number
  filters?: Filters
  /** Drops results scoring below it (ATLAS's fused score). */
  threshold?: number
  /** Each result's `explain`: per signal, its rank, raw score and share. */
  explain?: boolean
}

export interface GetAllOptions extends Entity {
  limit?: number
  topK?: number
  filters?: Filters
}

/** A memory in mem0's shape, with ATLAS's kind and event time beside it. */
export interface MemoryItem {
  id: string
  memory: string
  metadata?: Record<string, unknown>
  createdAt?: string
  updatedAt?: string
  score?: number
  userId?: string
  agentId?: string
  runId?: string
  /** mem0ai 3.x's spelling of the same ids. */
  user_id?: string
  agent_id?: string
  run_id?: string
  role?: string
  kind: string
  time: string
  explain?: Record<string, unknown>
}

export interface SearchResult {
  results: MemoryItem[]
}

export interface AddResult {
  results: Array<{ id: string; memory: string; event: 'ADD'; metadata: Record<string, unknown> & { event: 'ADD' }; role?: string }>
}

/** A row of mem0's history. */
export interface HistoryEntry {
  id: string
  memory_id: string
  previous_value: string | null
  new_value: string
  action: 'ADD' | 'UPDATE'
  created_at: string
  updated_at: string | null
  is_deleted: number
}

export interface RememberOptions {
  speaker?: string
  scope?: Scope
  session?: string
  time?: Time
  meta?: Record<string, unknown>
}

export interface RememberItem extends RememberOptions {
  text: string
}

export interface RecallOptions {
  /** How many hits (default 10). */
  k?: number
  scope?: Scope
  kind?: string | string[]
  since?: Time
  until?: Time
  /** What held then (bi-temporal). */
  asOf?: Time
  explain?: boolean
}

/** A memory record as every door answers it. */
export interface MemoryRecord {
  id: number
  kind: string
  text: string
  time: string
  recorded_at: string
  scope?: Scope
  session?: string
  speaker?: string
  meta?: Record<string, unknown>
  [field: string]: unknown
}

export interface Hit extends MemoryRecord {
  score: number
  passage?: string
  explain?: Record<string, unknown>
}

export interface RecallAnswer {
  hits: Hit[]
  [field: string]: unknown
}

export interface ContextAnswer {
  /** The prompt. */
  text: string
  [field: string]: unknown
}

export declare class Memory {
  constructor(config?: MemoryOptions)
  /** Opens a space and waits until it is ready. */
  static open(config?: MemoryOptions): Promise<Memory>
  static fromConfig(config: Mem0Config, path?: string): Memory
  ready(): Promise<this>

  add(messages: string | Message | Array<Message | string>, options: AddOptions): Promise<AddResult>
  search(query: string, options?: SearchOptions): Promise<SearchResult>
  get(memoryId: string | number): Promise<MemoryItem | null>
  getAll(options?: GetAllOptions): Promise<SearchResult>
  update(
    memoryId: string | number,
    data: string | { text?: string; data?: string; metadata?: Record<string, unknown> },
    options?: { metadata?: Record<string, unknown> },
  ): Promise<{ message: string; id: string; previousId: string }>
  delete(memoryId: string | number): Promise<{ message: string }>
  deleteAll(options: Entity): Promise<{ message: string; deleted: number }>
  history(memoryId: string | number): Promise<HistoryEntry[]>
  reset(): Promise<void>

  remember(text: string, options?: RememberOptions): Promise<number>
  rememberMany(items: RememberItem[]): Promise<number[]>
  recall(query: string, options?: RecallOptions): Promise<RecallAnswer>
  latest(options?: { scope?: Scope; kind?: string | string[]; limit?: number }): Promise<MemoryRecord[]>
  getMemory(id: number | string): Promise<MemoryRecord & Record<string, unknown>>
  explain(id: number | string): Promise<Record<string, unknown>>
  forget(id: number | string, options?: { hard?: boolean }): Promise<Record<string, unknown>>
  recover(id: number | string): Promise<{ recovered: number; how: string }>
  feedback(id: number | string, options: { useful: boolean }): Promise<Record<string, unknown>>
  consolidate(options?: { endSessions?: boolean }): Promise<Record<string, unknown>>
  context(task: string, options?: { budget?: number; scope?: Scope; session?: string }): Promise<ContextAnswer>
  export(path: string, options?: { vectors?: boolean }): Promise<number>
  import(path: string, options?: { again?: boolean }): Promise<Record<string, unknown>>
  stats(): Promise<Record<string, unknown>>
  flushVectors(): Promise<number>
  endSession(): Promise<void>
  learn(trajectory: Record<string, unknown>, options?: { learn?: boolean; scope?: Scope }): Promise<Record<string, unknown>>
  experiences(task: string, options?: { k?: number; scope?: Scope }): Promise<Array<Record<string, unknown>>>
  strategies(task: string, options?: { k?: number; scope?: Scope; explore?: boolean }): Promise<Array<Record<string, unknown>>>
  strategyOutcome(id: number | string, options: { success: boolean }): Promise<Record<string, unknown>>
  concepts(task: string, options?: { k?: number; scope?: Scope }): Promise<Array<Record<string, unknown>>>
  conceptOutcome(id: number | string, options: { success: boolean }): Promise<Record<string, unknown>>
  close(): Promise<void>
  label(): Promise<string>
}

export declare function mem0Item(record: MemoryRecord, score?: number): MemoryItem

/** An error of ATLAS: `code`, `field`, `location` and `index` say what and where. */
export declare class AtlasError extends Error {
  code: string
  field: string | null
  location: string | null
  index: number | null
}
export declare class InvalidInput extends AtlasError {}
export declare class NotFound extends AtlasError {}
export declare class Forbidden extends AtlasError {}
export declare class Conflict extends AtlasError {}
export declare class Busy extends AtlasError {}
export declare class StorageError extends AtlasError {}
export declare class EmbeddingError extends AtlasError {}
export declare class ConfigError extends AtlasError {}
export declare class ClosedError extends AtlasError {}

/** The native module's version. */
export declare const version: string
declare const atlas: {
  Memory: typeof Memory
  mem0Item: typeof mem0Item
  AtlasError: typeof AtlasError
  InvalidInput: typeof InvalidInput
  NotFound: typeof NotFound
  Forbidden: typeof Forbidden
  Conflict: typeof Conflict
  Busy: typeof Busy
  StorageError: typeof StorageError
  EmbeddingError: typeof EmbeddingError
  ConfigError: typeof ConfigError
  ClosedError: typeof ClosedError
  version: string
}
export default atlas
