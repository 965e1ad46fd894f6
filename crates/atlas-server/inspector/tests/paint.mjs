// The inspector's first-paint benchmark (`cargo xtask bench inspector`): every view opened
// afresh in headless Chromium against `atlas ui` on ATLAS_DB, five times each, timed from the
// start of the navigation to the view's first frame (data fetched and drawn). With
// ATLAS_PAINT_SEED=1 the demo fixtures are first imported and consolidated into the space.

import { join } from 'node:path';
import { writeFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
  // One cycle over the whole space (rules only), so that the demo's facts are among them.
  const config = join(mkdtempSync(join(tmpdir(), 'atlas-paint-')), 'atlas.toml');
  writeFileSync(config, '[consolidation]\nbatch = 1000000\n');
  const started = Date.now();
  atlas(BIN, DB, ['--config', config, 'consolidate', '--end-sessions']);
  console.error(`consolidated the space in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

const stats = JSON.parse(atlas(BIN, DB, ['--json', 'stats']));
const server = await serve(BIN, DB);
const call = async (method, path, body) => (await fetch(server.url + path, {
  method, headers: body ? { 'Content-Type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined,
})).json();

// A fact with a history when there is one: its timeline is the memory view's heaviest.
const facts = (await call('POST', '/v1/memories/list', { kind: ['fact'], limit: 200 })).memories;
const fact = facts.find((f) => f.valid_until === null && facts.some((g) => g.id !== f.id && g.body.subject === f.body.subject)) || facts[0];
const entity = (await call('POST', '/v1/memories/list', { kind: ['entity'], limit: 1 })).memories[0];
const named = fact ? { name: fact.body.subject, of: fact } : entity ? { name: entity.body.name, of: entity } : null;
const sessions = await call('POST', '/v1/sessions', { limit: 1 });
const session = sessions.sessions[0] || sessions.open[0];
const episode = (await call('POST', '/v1/memories/list', { kind: ['episode'], limit: 1 })).memories[0];
const words = episode.text.split(/\s+/).slice(0, 4).join(' ');
const scope = (s) => new URLSearchParams(Object.entries({ user: s.user || (s.scope && s.scope.user) || '', agent: s.agent || (s.scope && s.scope.agent) || '' }).filter(([, v]) => v)).toString();
// The baseline: the page itself, painted with no data to fetch (the search form, no query).
const views = [
  ['baseline: the page, no data', '/search', 'search'],
  ['search', '/search?q=' + encodeURIComponent(words)],
  ['memory', '/memory/' + (fact || episode).id],
  ...(named ? [['entity', '/entity/' + encodeURIComponent(named.name) + '?' + scope(named.of)]] : []),
  ['sessions', '/sessions'],
  ...(session ? [['session', '/session/' + encodeURIComponent(session.session) + '?' + scope(session)]] : []),
  ['forgetting', '/forgetting'],
  ['agents', '/agents'],
  ['health', '/health'],
];

if (SHOTS) mkdirSync(SHOTS, { recursive: true });
const chrome = await browser();
const results = {};
try {
  const page = await chrome.context.newPage();
  await open(page, server.url, '/health', 'health');
  for (const [view, path, shows] of views) {
    const times = [];
    for (let i = 0; i < RUNS; i++) times.push(await open(page, server.url, path, shows || view));
    times.sort((a, b) => a - b);
    results[view] = { path, median_ms: times[Math.floor(RUNS / 2)], max_ms: times[RUNS - 1] };
    if (SHOTS && !shows) await page.screenshot({ path: join(SHOTS, `paint-${stats.memories}-${view}.png`) });
  }
} finally {
  await chrome.close();
  await server.stop();
}
const baseline = Object.values(results)[0].median_ms;
console.log(`| view (${stats.memories} memories) | first paint, median of ${RUNS} (ms) | slowest (ms) | against the baseline |`);
console.log('|---|---|---|---|');
for (const [view, r] of Object.entries(results)) {
  console.log(`| ${view} | ${r.median_ms.toFixed(0)} | ${r.max_ms.toFixed(0)} | ${(r.median_ms / baseline).toFixed(2)}× |`);
}
if (SHOTS) {
  mkdirSync(SHOTS, { recursive: true });
  writeFileSync(join(SHOTS, `paint-bench-${stats.memories}.json`), JSON.stringify({ memories: stats.memories, views: results }, null, 2) + '\n');
}
