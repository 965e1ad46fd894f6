// The inspector in a real browser (headless Chromium) against a live `atlas ui` on a fixture
// space: the demo conversation and its changes of mind consolidated, the agent memories of
// fixtures/agents, a stored XSS payload, and a tenant's read key. Screenshots of every view go
// to ATLAS_SHOTS, with each view's first paint (paint.json).
//
// Run by `cargo xtask inspector-tests`, which passes ATLAS_BIN (the atlas binary), ATLAS_ROOT
// (the repository) and ATLAS_SHOTS.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { mkdtempSync, writeFileSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { browser, atlas, serve, open, useKey } from './support.mjs';

const BIN = process.env.ATLAS_BIN;
const ROOT = process.env.ATLAS_ROOT;
const SHOTS = process.env.ATLAS_SHOTS || join(tmpdir(), 'atlas-inspector-shots');
const TOKEN = 'inspector-test-token-' + process.pid;
const XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> Ann\'s "note" & more';

let dir, db, server, chrome, tenantKey;
const paints = {};

before(async () => {
  assert.ok(BIN && ROOT, 'ATLAS_BIN and ATLAS_ROOT name the atlas binary and the repository');
  mkdirSync(SHOTS, { recursive: true });
  dir = mkdtempSync(join(tmpdir(), 'atlas-inspector-'));
  db = join(dir, 'inspector.db');
  const run = (...args) => atlas(BIN, db, args);
  run('import', join(ROOT, 'fixtures/demo/conversation.jsonl'));
  run('import', join(ROOT, 'fixtures/demo/changes.jsonl'));
  const xss = join(dir, 'xss.jsonl');
  writeFileSync(xss, JSON.stringify({ session: 'ops/s4', speaker: 'Ann', text: XSS, time: '2024-05-08T09:00:00Z', scope: { user: 'ann' } }) + '\n');
  run('import', xss);
  run('experience', 'store', join(ROOT, 'fixtures/agents/trajectories.jsonl'));
  run('strategy', 'write', join(ROOT, 'fixtures/agents/trajectories.jsonl'));
  run('concept', 'compress', join(ROOT, 'fixtures/agents/trajectories.jsonl'));
  run('consolidate', '--end-sessions');
  tenantKey = JSON.parse(run('--json', 'keys', 'add', '--user', 'ann', '--role', 'read')).token;
  server = await serve(BIN, db, TOKEN);
  chrome = await browser();
});

after(async () => {
  if (chrome) await chrome.close();
  if (server) await server.stop();
  writeFileSync(join(SHOTS, 'paint.json'), JSON.stringify(paints, null, 2) + '\n');
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function api(method, path, body, key = TOKEN) {
  const response = await fetch(server.url + path, {
    method,
    headers: { Authorization: 'Bearer ' + key, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: response.status, body: await response.json() };
}

async function page(key = TOKEN) {
  const p = await chrome.context.newPage();
  p.on('pageerror', (e) => { throw e; });
  await open(p, server.url, '/search', 'search');
  if (key) await useKey(p, key);
  return p;
}

async function shoot(p, name, view, path) {
  paints[name] = await open(p, server.url, path, view);
  await p.screenshot({ path: join(SHOTS, name + '.png') });
}

async function currentFact() {
  const { body } = await api('POST', '/v1/recall', { query: 'what does the checkout service run on', kind: ['fact'], k: 1, scope: { user: 'ann' } });
  assert.ok(body.hits.length, 'the fixture holds a current fact about checkout');
  return body.hits[0];
}

test('the page is served with a policy that forbids inline script, and the API still needs the key', async () => {
  const response = await fetch(server.url + '/memory/1');
  assert.equal(response.status, 200);
  const csp = response.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline/);
  assert.equal((await fetch(server.url + '/v1/stats')).status, 401);
  // fetch() may not set Host; a rebinding page's request carries the attacker's name.
  const status = await new Promise((resolve, reject) => {
    const request = http.get(server.url + '/', { headers: { Host: 'evil.example' } }, (r) => { r.resume(); resolve(r.statusCode); });
    request.on('error', reject);
  });
  assert.equal(status, 403, 'a page is refused under a foreign Host (DNS rebinding)');
});

test('without a key the page says so and shows nothing', async () => {
  const p = await chrome.context.newPage();
  await p.goto(server.url + '/search?q=checkout');
  await p.waitForSelector('body[data-ready="search"]');
  assert.ok(await p.isVisible('#needs-key'), 'asks for a key');
  assert.equal(await p.locator('.hit').count(), 0);
  await p.screenshot({ path: join(SHOTS, 'refused.png') });
  assert.equal(await p.evaluate(() => sessionStorage.getItem('atlas.key')), null);
  assert.ok(!p.url().includes(TOKEN));
  await p.close();
});

test('search shows each signal\'s contribution and the explanation', async () => {
  const p = await page();
  await shoot(p, 'search', 'search', '/search?q=' + encodeURIComponent('half marathon training plan') + '&user=priya');
  const hits = p.locator('.hit');
  assert.ok(await hits.count() > 0, 'hits');
  assert.ok(await p.locator('.hit .bar span').count() > 0, 'contributions drawn');
  assert.ok(await p.locator('.hit table.signals tr').count() > 1, 'per-signal ranks and scores');
  assert.ok(!p.url().includes(TOKEN), 'the key never goes in a URL');
  // The form round-trips through the address: back returns to the previous query.
  await p.fill('input[name=q]', 'Lisbon');
  await p.click('#search-form button[type=submit]');
  await p.waitForURL(/q=Lisbon/);
  await p.waitForSelector('body[data-ready="search"]');
  await p.goBack();
  await p.waitForURL(/half\+marathon|half%20marathon/);
  await p.close();
});

test('a fact\'s timeline shows every version, and the entity\'s as-of slider moves through them', async () => {
  const fact = await currentFact();
  const p = await page();
  await shoot(p, 'memory', 'memory', '/memory/' + fact.id);
  assert.ok(await p.locator('svg.timeline rect.interval').count() >= 3, 'Python 3.11 → Rust → Python');
  const versions = await p.locator('#versions tr').allTextContents();
  assert.ok(versions.some((v) => v.includes('Rust')), versions.join('\n'));
  const subject = fact.body.subject;
  await shoot(p, 'entity', 'entity', '/entity/' + encodeURIComponent(subject) + '?user=ann');
  const held = () => p.locator('.predicate .held').first().textContent();
  assert.match(await held(), /Python/);
  await p.locator('#as-of').evaluate((el, t) => { el.value = String(t); el.dispatchEvent(new Event('input')); }, Date.parse('2024-04-20T00:00:00Z'));
  assert.match(await held(), /Rust/);
  assert.match(p.url(), /as_of=2024-04-20/);
  await p.screenshot({ path: join(SHOTS, 'entity-as-of.png') });
  await p.reload();
  await p.waitForSelector('body[data-ready="entity"]');
  assert.match(await held(), /Rust/, 'the address keeps the date');
  await p.close();
});

test('forget asks first, then recover brings the memory back from the forgetting view', async () => {
  const fact = await currentFact();
  const p = await page();
  await open(p, server.url, '/memory/' + fact.id, 'memory');
  p.once('dialog', (d) => d.dismiss());
  await p.click('button[data-action="Forget"]');
  assert.equal((await api('GET', '/v1/memories/' + fact.id)).body.lifecycle?.deleted_at, undefined, 'dismissed: nothing done');
  p.once('dialog', (d) => d.accept());
  await p.click('button[data-action="Forget"]');
  await p.waitForSelector('.badge.forgotten');
  assert.ok((await api('GET', '/v1/memories/' + fact.id)).body.lifecycle.deleted_at, 'soft-deleted');
  await shoot(p, 'forgetting', 'forgetting', '/forgetting');
  const row = p.locator(`#forgotten tr[data-id="${fact.id}"]`);
  assert.equal(await row.count(), 1);
  p.once('dialog', (d) => d.accept());
  await row.locator('button[data-action="Recover"]').click();
  await p.waitForSelector(`#forgotten tr[data-id="${fact.id}"]`, { state: 'detached' });
  const after = (await api('GET', '/v1/memories/' + fact.id)).body;
  assert.equal(after.lifecycle?.deleted_at, undefined, 'live again');
  await p.close();
});

test('a stored XSS payload shows as characters and never runs', async () => {
  const { body } = await api('POST', '/v1/recall', { query: 'note more', scope: { user: 'ann' }, k: 5 });
  const stored = body.hits.find((h) => h.text === XSS);
  assert.ok(stored, 'the payload is stored');
  const p = await page();
  await open(p, server.url, '/memory/' + stored.id, 'memory');
  assert.equal(await p.locator('#memory-text').textContent(), XSS);
  await open(p, server.url, '/search?q=note+more&user=ann', 'search');
  assert.ok((await p.locator('#view').textContent()).includes('<script>'), 'shown as text');
  await open(p, server.url, '/session/ops%2Fs4?user=ann', 'session');
  await p.waitForTimeout(300);
  assert.equal(await p.evaluate(() => window.__pwned), undefined, 'no script ran');
  assert.equal(await p.locator('#view img, #view script').count(), 0, 'no element was made of it');
  await p.close();
});

test('sessions, agent memories and health render, each at its own address', async () => {
  const p = await page();
  await shoot(p, 'sessions', 'sessions', '/sessions');
  const listed = await p.locator('#sessions tr, #open-sessions tr').allTextContents();
  assert.ok(listed.some((t) => t.includes('ops/s1')), listed.join('\n'));
  await shoot(p, 'session', 'session', '/session/' + encodeURIComponent('ops/s1') + '?user=ann');
  assert.ok(await p.locator('#turns .turn').count() >= 3);
  assert.ok(await p.locator('#turns .turn.found').count() >= 1, 'where consolidation found facts');
  await shoot(p, 'agents', 'agents', '/agents');
  assert.ok(await p.locator('#strategies svg.beta').count() >= 1, 'Beta posteriors drawn');
  assert.ok(await p.locator('#experiences a').count() >= 1);
  await shoot(p, 'health', 'health', '/health');
  assert.ok(await p.locator('#cycles tr').count() >= 2, 'the last cycles');
  await p.goBack();
  await p.waitForSelector('body[data-ready="agents"]');
  await p.close();
});

test('a tenant\'s key sees only its tenant', async () => {
  const p = await page(tenantKey);
  await open(p, server.url, '/sessions', 'sessions');
  const text = await p.locator('#view').textContent();
  assert.ok(text.includes('ops/s1'), 'its own sessions');
  assert.ok(!text.includes('demo/session_1'), 'not another user\'s');
  await open(p, server.url, '/search?q=' + encodeURIComponent('half marathon Lisbon'), 'search');
  const found = await p.locator('#view').textContent();
  assert.ok(await p.locator('.hit').count() > 0, 'its own memories answer');
  assert.ok(!found.includes('half marathon'), 'Priya\'s memories are not in Ann\'s tenant');
  await open(p, server.url, '/health', 'health');
  assert.ok(await p.isVisible('#forbidden'), 'the whole space\'s health is the admin\'s');
  const fact = await currentFact();
  await open(p, server.url, '/memory/' + fact.id, 'memory');
  p.once('dialog', (d) => d.accept());
  await p.click('button[data-action="Forget"]');
  await p.waitForSelector('#forbidden');
  assert.equal((await api('GET', '/v1/memories/' + fact.id)).body.lifecycle?.deleted_at, undefined, 'a read key cannot forget');
  await p.close();
});
