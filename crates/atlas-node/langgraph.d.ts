// Types of `atlas-memory/langgraph`.
import { BaseStore, Operation, OperationResults } from '@langchain/langgraph-checkpoint'
import { Memory, MemoryOptions } from './index.js'

export interface AtlasStoreOptions extends Exclude<MemoryOptions, string> {
  /** An open space to use instead of opening one. */
  memory?: Memory
  /** The scope's agent (default `langgraph`). */
  agent?: string
  /** The value fields whose text is searched (the whole value by default). */
  index?: { fields?: string[] }
}

/** LangGraph.js's store on an ATLAS space: namespace → scope user, key → session, a put over a
 * key → a new version. */
export declare class AtlasStore extends BaseStore {
  constructor(options?: AtlasStoreOptions)
  readonly memory: Memory
  batch<Op extends Operation[]>(operations: Op): Promise<OperationResults<Op>>
  stop(): Promise<void>
}
