// `atlas-memory/langgraph` for ES modules: LangGraph.js's store on an ATLAS space, extending the
// `BaseStore` that `import '@langchain/langgraph-checkpoint'` gives.
import * as checkpoint from '@langchain/langgraph-checkpoint'
import lib from './lib/langgraph.cjs'

export const AtlasStore = lib.storeClass(checkpoint)
