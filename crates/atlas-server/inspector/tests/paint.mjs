// The inspector's first-paint benchmark (`cargo xtask bench inspector`): every view opened
// afresh in headless Chromium against `atlas ui` on ATLAS_DB, five times each, timed from the
// start of the navigation to the view's first frame (data fetched and drawn). With
// ATLAS_PAINT_SEED=1 the demo fixtures are first imported and consolidated into the space.

import { join } from 'node:path';
import { writeFileSync, mkdirSync } from 'node:fs';
import { browser, atlas, serve, open } from './support.mjs';

const BIN = process.env.ATLAS_BIN;
const ROOT = process.env.ATLAS_ROOT;
const DB = process.env.ATLAS_DB;
const SHOTS = process.env.ATLAS_SHOTS;
const RUNS = 5;

if (process.env.ATLAS_PAINT_SEED === '1') {
  for (const file of ['fixtures/demo/conversation.jsonl', 'fixtures/demo/changes.jsonl']) atlas(BIN, DB, ['import', join(ROOT, file)]);
  atlas(BIN, DB, ['experience', 'store', join(ROOT, 'fixtures/agents/trajectories.jsonl')]);
  atlas(BIN, DB, ['strategy', 'write', join(ROOT, 'fixtures/agents/trajectories.jsonl')]);
  const started = Date.now();
  atlas(BIN, DB, ['consolidate', '--end-sessions']);
  console.error(`consolidated the space in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

const stats = JSON.parse(atlas(BIN, DB, ['--json', 'stats']));
const server = await serve(BIN, DB);
const call = async (method, path, body) => (await fetch(server.url + path, {
  method, headers: body ? { 'Content-Type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined,
})).json();

const fact = (await call('POST', '/v1/memories/list', { kind: ['fact'], limit: 1 })).memories[0];
const sessions = await call('POST', '/v1/sessions', { limit: 1 });
const session = sessions.sessions[0] || sessions.open[0];
const episode = (await call('POST', '/v1/memories/list', { kind: ['episode'], limit: 1 })).memories[0];
const words = episode.text.split(/\s+/).slice(0, 4).join(' ');
const scope = (s) => new URLSearchParams(Object.entries({ user: s.user || (s.scope && s.scope.user) || '', agent: s.agent || (s.scope && s.scope.agent) || '' }).filter(([, v]) => v)).toString();
const views = [
  ['search', '/search?q=' + encodeURIComponent(words)],
  ['memory', '/memory/' + (fact || episode).id],
  ...(fact ? [['entity', '/entity/' + encodeURIComponent(fact.body.subject) + '?' + scope(fact)]] : []),
  ['sessions', '/sessions'],
  ...(session ? [['session', '/session/' + encodeURIComponent(session.session) + '?' + scope(session)]] : []),
  ['forgetting', '/forgetting'],
  ['agents', '/agents'],
  ['health', '/health'],
];

const chrome = await browser();
const results = {};
try {
  const page = await chrome.context.newPage();
  await open(page, server.url, '/health', 'health');
  for (const [view, path] of views) {
    const times = [];
    for (let i = 0; i < RUNS; i++) times.push(await open(page, server.url, path, view));
    times.sort((a, b) => a - b);
    results[view] = { path, median_ms: times[Math.floor(RUNS / 2)], max_ms: times[RUNS - 1] };
  }
} finally {
  await chrome.close();
  await server.stop();
}
console.log(`| view (${stats.memories} memories) | first paint, median of ${RUNS} (ms) | slowest (ms) |`);
console.log('|---|---|---|');
for (const [view, r] of Object.entries(results)) console.log(`| ${view} | ${r.median_ms.toFixed(0)} | ${r.max_ms.toFixed(0)} |`);
if (SHOTS) {
  mkdirSync(SHOTS, { recursive: true });
  writeFileSync(join(SHOTS, `paint-bench-${stats.memories}.json`), JSON.stringify({ memories: stats.memories, views: results }, null, 2) + '\n');
}
