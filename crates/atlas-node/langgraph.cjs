'use strict'
// `atlas-memory/langgraph` for CommonJS: LangGraph.js's store on an ATLAS space, extending the
// `BaseStore` that `require('@langchain/langgraph-checkpoint')` gives.
const { storeClass } = require('./lib/langgraph.cjs')

module.exports = { AtlasStore: storeClass(require('@langchain/langgraph-checkpoint')) }
