// Types of `atlas-memory/ai`.
import { Tool } from 'ai'
import { Memory, Scope } from './index.js'

export interface AtlasToolsOptions {
  /** The scope the tools read and write; the model never chooses it. */
  scope?: Scope
  /** Hits `recall` returns (default 5). */
  k?: number
}

export declare function atlasTools(memory: Memory, options?: AtlasToolsOptions): {
  remember: Tool<{ text: string }, { id: number }>
  recall: Tool<{ query: string }, { memories: Array<{ id: number; text: string; time: string }> }>
}

export declare function systemPrompt(
  memory: Memory,
  task: string,
  options?: { scope?: Scope; session?: string; budget?: number; base?: string },
): Promise<string>
