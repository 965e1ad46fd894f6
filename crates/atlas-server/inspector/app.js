// The ATLAS inspector: one page over the public JSON API (/v1), every view at its own address.
// Memory texts only ever enter the page as text nodes (never as markup), the key lives in this
// tab's sessionStorage and travels as a header, and nothing is fetched from anywhere else.

const KEY = 'atlas.key';
const SIGNALS = ['text', 'vector', 'context', 'graph', 'recency', 'instruction', 'preference', 'numbers', 'speaker'];
const DAY = 86400000;

// ---- building the page: elements from data, text as text --------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'class') el.className = value;
    // Through the CSSOM: the policy refuses style attributes, not styles set by script.
    else if (name === 'style') el.style.cssText = value;
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function link(path, ...children) {
  return h('a', { href: path }, ...children);
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, v);
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

function when(t) {
  if (!t) return '—';
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toISOString().replace('T', ' ').replace(/:\d\d\.\d+Z$|:\d\dZ$/, '');
}

function day(t) {
  return when(t).slice(0, 10);
}

function fixed(x, digits = 3) {
  return typeof x === 'number' ? x.toFixed(digits) : '—';
}

function badge(kind, extra) {
  return h('span', { class: 'badge ' + kind }, extra || kind);
}

function scopeOf(m) {
  return { user: (m.scope && m.scope.user) || '', agent: (m.scope && m.scope.agent) || '' };
}

function memoryLink(m, text) {
  return link('/memory/' + m.id, text === undefined ? m.text : text);
}

function entityLink(name, scope) {
  return link('/entity/' + encodeURIComponent(name) + query(scope || {}), name);
}

function sessionLink(session, scope) {
  return link('/session/' + encodeURIComponent(session) + query(scope || {}), session);
}

function notice(text) {
  const el = h('div', { class: 'notice', role: 'status' }, text);
  document.body.append(el);
  setTimeout(() => el.remove(), 2500);
}

// ---- the API ----------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : 'HTTP ' + status);
    this.status = status;
    this.code = error && error.code;
    this.field = error && error.field;
  }
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = 'Bearer ' + key;
  const response = await fetch(path, {
    method, headers, credentials: 'omit', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (!response.ok) throw new ApiError(response.status, data && data.error);
  return data;
}

function failure(e) {
  if (e.status === 401) {
    return h('div', { class: 'card error', id: 'needs-key' },
      'This server needs an access key: enter it above (it is kept for this tab only). ', e.message);
  }
  if (e.status === 403) return h('div', { class: 'card error', id: 'forbidden' }, 'Not allowed with this key: ', e.message);
  return h('div', { class: 'card error' }, e.status ? `Error ${e.status}: ` : '', e.message);
}

// ---- routing ----------------------------------------------------------------------------

const routes = [
  [/^\/$/, 'search', viewSearch],
  [/^\/search$/, 'search', viewSearch],
  [/^\/memory\/(\d+)$/, 'memory', viewMemory],
  [/^\/entity\/(.+)$/, 'entity', viewEntity],
  [/^\/sessions$/, 'sessions', viewSessions],
  [/^\/session\/(.+)$/, 'session', viewSession],
  [/^\/forgetting$/, 'forgetting', viewForgetting],
  [/^\/agents$/, 'agents', viewAgents],
  [/^\/health$/, 'health', viewHealth],
];

let rendering = 0;

async function render() {
  const ticket = ++rendering;
  const path = location.pathname;
  const params = new URLSearchParams(location.search);
  const main = document.getElementById('view');
  document.body.removeAttribute('data-ready');
  for (const a of document.querySelectorAll('header nav a')) {
    a.classList.toggle('here', path === a.getAttribute('href') || (path === '/' && a.getAttribute('href') === '/search'));
  }
  const found = routes.find(([re]) => re.test(path));
  let content;
  let name = 'missing';
  if (!found) {
    content = [h('h1', {}, 'Nothing here'), h('p', {}, 'No view at ', path, '. ', link('/search', 'Search'), '.')];
  } else {
    name = found[1];
    const match = path.match(found[0]);
    try {
      content = await found[2](match.slice(1).map(decodeURIComponent), params);
    } catch (e) {
      content = failure(e);
    }
  }
  if (ticket !== rendering) return;
  main.replaceChildren(...[content].flat(Infinity).filter((c) => c !== null && c !== undefined));
  document.title = 'ATLAS · ' + name;
  // The first paint of the view: what the browser test measures.
  requestAnimationFrame(() => {
    if (ticket !== rendering) return;
    window.atlasPaint = { view: name, ms: performance.now() };
    document.body.dataset.ready = name;
  });
}

function go(path, replace) {
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  render();
}

document.addEventListener('click', (event) => {
  const a = event.target.closest && event.target.closest('a[href]');
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith('/v1/')) return;
  event.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener('popstate', render);

function keyForm() {
  const form = document.getElementById('key-form');
  const input = document.getElementById('key-input');
  const state = document.getElementById('key-state');
  const show = () => { state.textContent = sessionStorage.getItem(KEY) ? 'key set for this tab' : 'no key'; };
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (input.value.trim()) sessionStorage.setItem(KEY, input.value.trim());
    else sessionStorage.removeItem(KEY);
    input.value = '';
    show();
    render();
  });
  show();
}

// ---- Search -----------------------------------------------------------------------------

const KINDS = ['episode', 'fact', 'summary', 'core', 'entity', 'experience', 'strategy', 'concept', 'doc'];

function filterFields(params, extra) {
  const field = (name, label, attrs) =>
    h('label', {}, label, h('input', { name, value: params.get(name) || '', ...attrs }));
  const kinds = h('select', { name: 'kind' }, h('option', { value: '' }, 'every kind'),
    KINDS.map((k) => h('option', { value: k, selected: params.get('kind') === k }, k)));
  return [
    extra,
    field('user', 'user'), field('agent', 'agent'), field('session', 'session'),
    h('label', {}, 'kind', kinds),
    field('since', 'since', { placeholder: '2023-05-01' }), field('until', 'until', { placeholder: '2023-06-01' }),
    field('as_of', 'as of', { placeholder: 'what held then' }),
  ];
}

function formParams(form) {
  const out = {};
  for (const [k, v] of new FormData(form).entries()) if (String(v).trim()) out[k] = String(v).trim();
  return out;
}

function isoOrNull(text) {
  if (!text) return undefined;
  const d = new Date(text);
  return isNaN(d) ? text : d.toISOString();
}

function scopeParams(params) {
  const scope = {};
  for (const k of ['user', 'agent', 'session']) if (params.get(k)) scope[k] = params.get(k);
  return Object.keys(scope).length ? scope : undefined;
}

async function viewSearch(_, params) {
  const q = params.get('q') || '';
  const form = h('form', { class: 'filters', id: 'search-form', onsubmit: (event) => {
    event.preventDefault();
    go('/search' + query(formParams(event.target)));
  } }, filterFields(params, h('label', { class: 'wide' }, 'query',
    h('input', { name: 'q', value: q, placeholder: 'what do you want to know?', autofocus: true }))),
  h('button', { class: 'primary', type: 'submit' }, 'Recall'));
  const out = [h('h1', {}, 'Search'), form];
  if (!q) {
    out.push(h('p', { class: 'muted' }, 'Recall fuses full text, vectors, graph and recency; each hit shows what each signal contributed.'));
    return out;
  }
  const body = { query: q, k: Number(params.get('k')) || 20, explain: true, scope: scopeParams(params) };
  if (params.get('kind')) body.kind = [params.get('kind')];
  for (const [k, f] of [['since', 'since'], ['until', 'until'], ['as_of', 'as_of']]) {
    if (params.get(k)) body[f] = isoOrNull(params.get(k));
  }
  const recall = await api('POST', '/v1/recall', body);
  const skipped = Object.entries(recall.signals || {}).filter(([, s]) => !s.used);
  out.push(h('p', { class: 'muted', id: 'recall-summary' },
    `${recall.hits.length} hits in ${fixed(recall.took_ms, 1)} ms`,
    recall.pending_vectors ? ` · ${recall.pending_vectors} memories still wait for a vector` : ''));
  if (skipped.length) {
    out.push(h('div', { class: 'card', id: 'skipped' }, 'Signals skipped: ',
      skipped.map(([name, s]) => h('span', {}, h('b', {}, name), s.note ? ` (${s.note}) ` : ' '))));
  }
  out.push(h('div', { class: 'legend' }, SIGNALS.map((s) => h('span', {}, h('i', { class: 'seg-' + s }), s))));
  recall.hits.forEach((hit, i) => out.push(hitCard(hit, i + 1)));
  return out;
}

function hitCard(hit, rank) {
  const explain = hit.explain || {};
  // The bar shows what each signal added; one that took away (an agent's turn, for a question
  // about the requester) is in the table below, not in the bar.
  const total = Object.values(explain).reduce((a, s) => a + Math.max(s.contribution || 0, 0), 0) || 1;
  const bar = h('div', { class: 'bar', title: 'share of the fused score' },
    SIGNALS.filter((s) => explain[s] && explain[s].contribution > 0).map((s) =>
      h('span', { class: 'seg-' + s, style: `width:${(100 * explain[s].contribution / total).toFixed(1)}%` })));
  const rows = SIGNALS.filter((s) => explain[s]).map((s) =>
    h('tr', {}, h('td', {}, s), h('td', {}, '#' + explain[s].rank), h('td', {}, fixed(explain[s].score)),
      h('td', {}, fixed(explain[s].contribution, 4))));
  return h('div', { class: 'card hit', 'data-id': hit.id },
    h('div', { class: 'row' }, h('b', {}, '#' + rank), badge(hit.kind), memoryLink(hit, ''), h('span', { class: 'muted' }, 'fused ', fixed(hit.score, 4)),
      bar, hit.valid_until ? h('span', { class: 'muted' }, 'held until ', day(hit.valid_until)) : null),
    h('div', { class: 'text' }, memoryLink(hit)),
    h('div', { class: 'row muted' }, when(hit.time), hit.speaker ? ' · ' + hit.speaker : '',
      hit.session ? [' · session ', sessionLink(hit.session, scopeOf(hit))] : ''),
    rows.length ? h('details', {}, h('summary', { class: 'muted' }, 'signals: ', SIGNALS.filter((s) => explain[s]).map((s) => `${s} #${explain[s].rank}`).join(' · ')),
      h('table', { class: 'signals' }, h('tr', {}, h('th', {}, 'signal'), h('th', {}, 'rank'), h('th', {}, 'raw score'), h('th', {}, 'contribution')), rows)) : null,
    hit.duplicates ? h('div', { class: 'chips' }, 'Folded near-duplicates: ', hit.duplicates.map((d) => link('/memory/' + d, '#' + d))) : null,
    hit.sources ? h('div', { class: 'chips' }, 'From: ', hit.sources.map((s) => memoryLink(s, '#' + s.id + ' ' + s.text.slice(0, 60)))) : null);
}

// ---- Memory -----------------------------------------------------------------------------

async function viewMemory([id]) {
  const [detail, explanation] = await Promise.all([api('GET', '/v1/memories/' + id), api('GET', '/v1/memories/' + id + '/explain')]);
  const m = detail;
  const scope = scopeOf(m);
  const deleted = m.lifecycle && m.lifecycle.deleted_at;
  const out = [h('h1', {}, badge(m.kind), ' Memory #', m.id, deleted ? [' ', badge('forgotten', 'forgotten ' + day(deleted))] : '')];
  out.push(h('div', { class: 'card' }, h('div', { class: 'text', id: 'memory-text' }, m.text)));
  const facts = [
    ['kind', m.kind], ['user', scope.user || '—'], ['agent', scope.agent || '—'],
    ['session', m.session ? sessionLink(m.session, scope) : '—'], ['said / happened', when(m.time)],
    ['learned (recorded)', when(m.recorded_at)],
    ['valid', `${when(explanation.memory.valid_from)} → ${explanation.memory.valid_until ? when(explanation.memory.valid_until) : 'now'}`],
    ['strength', [strengthBar(explanation.decay.strength), ' ', fixed(explanation.decay.strength, 2), explanation.decay.decays ? '' : ' (does not decay)']],
  ];
  if (m.speaker) facts.push(['speaker', m.speaker]);
  if (m.body && m.kind === 'fact') facts.push(['subject · predicate · object', `${m.body.subject} · ${m.body.predicate} · ${m.body.object}`], ['confidence', fixed(m.body.confidence, 2)]);
  out.push(h('table', { class: 'card' }, facts.map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v)))));
  out.push(actions(m));
  if (m.kind === 'fact') out.push(await timelineSection(m, explanation));
  out.push(h('h2', {}, 'Provenance'));
  out.push(explanation.sources.length
    ? h('div', {}, explanation.sources.map((s) => h('div', { class: 'card' }, h('div', { class: 'row muted' }, badge(s.kind), when(s.time), s.speaker ? '· ' + s.speaker : ''), h('div', { class: 'text' }, memoryLink(s)))))
    : h('p', { class: 'muted' }, m.kind === 'episode' ? 'An episode: said, not derived.' : 'No source episodes recorded.'));
  if (explanation.entities.length) {
    out.push(h('h2', {}, 'Entities'), h('div', { class: 'chips' }, explanation.entities.map((e) =>
      e.kind === 'entity' ? entityLink(e.body.name, scopeOf(e)) : memoryLink(e, '#' + e.id + ' ' + e.text.slice(0, 50)))));
  }
  if (m.kind === 'entity') out.push(h('p', {}, entityLink(m.body.name, scope), ': everything known about it, through time.'));
  out.push(h('h2', {}, 'Edges'));
  out.push(m.edges.length ? h('table', {}, h('tr', {}, ['kind', 'from', 'to', 'weight', 'valid'].map((t) => h('th', {}, t))),
    m.edges.map((e) => h('tr', {}, h('td', {}, e.kind), h('td', {}, link('/memory/' + e.src, '#' + e.src)), h('td', {}, link('/memory/' + e.dst, '#' + e.dst)),
      h('td', {}, fixed(e.weight, 2)), h('td', {}, day(e.valid_from), ' → ', e.valid_until ? day(e.valid_until) : 'now'))))
    : h('p', { class: 'muted' }, 'No edges.'));
  if (explanation.judgments && explanation.judgments.length) {
    out.push(h('h2', {}, 'Judgments'), h('pre', {}, JSON.stringify(explanation.judgments, null, 2)));
  }
  if (m.meta) out.push(h('h2', {}, 'Metadata'), h('pre', {}, JSON.stringify(m.meta, null, 2)));
  return out;
}

function strengthBar(strength) {
  const s = Math.max(0, Math.min(1, Number(strength) || 0));
  return h('span', { class: 'strength' + (s < 0.3 ? ' weak' : ''), title: fixed(s, 2) }, h('span', { style: `width:${(s * 100).toFixed(0)}%` }));
}

function actions(m) {
  const deleted = m.lifecycle && m.lifecycle.deleted_at;
  const act = (label, cls, question, method, path, body, done) =>
    h('button', { class: cls, type: 'button', 'data-action': label, onclick: async () => {
      if (!confirm(question)) return;
      try {
        await api(method, path, body);
        notice(done);
        render();
      } catch (e) {
        document.getElementById('view').prepend(failure(e));
      }
    } }, label);
  return h('div', { class: 'actions' },
    deleted
      ? act('Recover', 'primary', `Bring memory #${m.id} back?`, 'POST', `/v1/memories/${m.id}/recover`, {}, 'Recovered')
      : act('Forget', 'danger', `Forget memory #${m.id}? Recall will stop returning it; it can be recovered.`, 'DELETE', `/v1/memories/${m.id}`, undefined, 'Forgotten'),
    act('Forget for good', 'danger', `Erase memory #${m.id} for good, from every index and archive? This cannot be undone.`, 'DELETE', `/v1/memories/${m.id}?hard=true`, undefined, 'Erased'),
    deleted ? null : act('Useful', '', `Record that memory #${m.id} was useful?`, 'POST', `/v1/memories/${m.id}/feedback`, { useful: true }, 'Thanks: reinforced'),
    deleted ? null : act('Not useful', '', `Record that memory #${m.id} was not useful?`, 'POST', `/v1/memories/${m.id}/feedback`, { useful: false }, 'Noted'));
}

// A fact's versions: follow what replaced it to the newest, whose explanation holds the chain.
async function timelineSection(m, explanation) {
  let newest = explanation;
  for (let hops = 0; newest.replaced_by.length && hops < 50; hops++) {
    newest = await api('GET', '/v1/memories/' + newest.replaced_by[0].id + '/explain');
  }
  const versions = [...newest.replaced].reverse().concat([newest.memory]);
  return [h('h2', {}, 'Timeline'), h('p', { class: 'muted' }, 'Every version of this fact: the bar is when it held, the dot when it was said.'),
    timeline(versions, m.id, null), h('table', { id: 'versions' }, h('tr', {}, ['version', 'held', 'said', 'replaced'].map((t) => h('th', {}, t))),
      versions.map((v, i) => h('tr', { class: v.id === m.id ? 'current' : '' },
        h('td', {}, memoryLink(v, v.body ? v.body.object : v.text)),
        h('td', {}, day(v.valid_from || v.time), ' → ', v.valid_until ? day(v.valid_until) : 'now'),
        h('td', {}, when(v.time)),
        h('td', {}, i > 0 ? ['#', versions[i - 1].id, ' (', versions[i - 1].body ? versions[i - 1].body.object : '', ')'] : '—'))))];
}

function timeline(versions, currentId, asOf) {
  const start = (v) => Date.parse(v.valid_from || v.time);
  const end = (v) => (v.valid_until ? Date.parse(v.valid_until) : Date.now());
  let lo = Math.min(...versions.map(start), ...versions.map((v) => Date.parse(v.time)));
  let hi = Math.max(...versions.map(end));
  if (asOf) { lo = Math.min(lo, asOf); hi = Math.max(hi, asOf); }
  if (!(hi > lo)) hi = lo + DAY;
  const width = 900, left = 160, row = 22, top = 8;
  const x = (t) => left + ((t - lo) / (hi - lo)) * (width - left - 20);
  const height = top + versions.length * row + 26;
  const parts = [svg('line', { class: 'axis', x1: left, x2: width - 20, y1: height - 20, y2: height - 20 }),
    svg('text', { x: left, y: height - 6 }, day(new Date(lo).toISOString())),
    svg('text', { x: width - 90, y: height - 6 }, day(new Date(hi).toISOString()))];
  versions.forEach((v, i) => {
    const y = top + i * row;
    const holds = asOf && start(v) <= asOf && (!v.valid_until || asOf < end(v));
    const label = (v.body && v.body.object) || v.text;
    parts.push(svg('text', { x: 4, y: y + 12 }, label.length > 24 ? label.slice(0, 23) + '…' : label));
    parts.push(svg('rect', { class: 'interval' + (v.id === currentId ? ' current' : '') + (holds ? ' at' : ''), x: x(start(v)), y, width: Math.max(2, x(end(v)) - x(start(v))), height: row - 8, rx: 2 },
      svg('title', {}, `${label}: ${day(v.valid_from || v.time)} → ${v.valid_until ? day(v.valid_until) : 'now'}`)));
    parts.push(svg('circle', { class: 'said', cx: x(Date.parse(v.time)), cy: y + (row - 8) / 2, r: 3 }));
  });
  if (asOf) parts.push(svg('line', { class: 'asof', x1: x(asOf), x2: x(asOf), y1: 0, y2: height - 20 }));
  return svg('svg', { class: 'timeline', viewBox: `0 0 ${width} ${height}`, width, height }, parts);
}

// ---- Entity -----------------------------------------------------------------------------

async function viewEntity([name], params) {
  const scope = { user: params.get('user') || undefined, agent: params.get('agent') || undefined };
  const view = await api('POST', '/v1/entity', { name, scope: scope.user || scope.agent ? scope : undefined });
  const out = [h('h1', {}, 'Entity: ', name)];
  out.push(h('p', { class: 'muted' }, [scope.user ? `user ${scope.user}` : 'no user', scope.agent ? `agent ${scope.agent}` : null,
    `${view.facts.length} fact versions`, `${view.mentions.length} latest mentions`].filter(Boolean).join(' · '),
    view.entities.length ? [' · ', view.entities.map((e) => memoryLink(e, 'entity #' + e.id))] : ''));
  if (!view.facts.length && !view.mentions.length) {
    out.push(h('p', { class: 'muted' }, 'Nothing is known about this name in this scope.'));
    return out;
  }
  // The slider spans what is known, and its right end is now: nothing changes after the last event.
  const starts = view.facts.map((f) => Date.parse(f.valid_from)).concat(view.mentions.map((m) => Date.parse(m.time)));
  const ends = view.facts.filter((f) => f.valid_until).map((f) => Date.parse(f.valid_until));
  const lo = Math.min(...starts), hi = Math.max(...starts, ...ends) + DAY;
  const initial = params.get('as_of') ? Date.parse(params.get('as_of')) : hi;
  const label = h('b', { id: 'as-of-label' });
  const slider = h('input', { type: 'range', id: 'as-of', min: lo, max: hi, step: Math.max(1, Math.floor((hi - lo) / 1000)), value: isNaN(initial) ? hi : initial });
  const body = h('div', { id: 'entity-facts' });
  const mentions = h('div', { id: 'mentions' });
  const draw = () => {
    const atNow = Number(slider.value) >= hi - Number(slider.step);
    const at = atNow ? Infinity : Number(slider.value);
    label.textContent = atNow ? 'now' : when(new Date(at).toISOString());
    const groups = new Map();
    for (const f of view.facts) {
      const key = f.body.predicate;
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(f);
    }
    const holds = (f) => Date.parse(f.valid_from) <= at && (!f.valid_until || at < Date.parse(f.valid_until));
    body.replaceChildren(...[...groups.entries()].map(([predicate, facts]) => {
      const current = facts.filter(holds);
      return h('div', { class: 'card predicate', 'data-predicate': predicate },
        h('div', { class: 'row' }, h('b', {}, predicate), h('span', { class: 'held' },
          current.length ? current.map((f, i) => [i ? ', ' : '', memoryLink(f, f.body.object)]) : h('span', { class: 'muted' }, 'nothing held then'))),
        timeline(facts, current.length ? current[0].id : null, atNow ? null : at),
        h('div', { class: 'chips muted' }, 'History: ', facts.map((f) => h('span', {}, f.body.object, ' (', day(f.valid_from), ' → ', f.valid_until ? day(f.valid_until) : 'now', ')'))));
    }));
    const said = view.mentions.filter((m) => Date.parse(m.time) <= at);
    mentions.replaceChildren(h('h2', {}, `Mentioned in (${said.length} by then)`), ...said.slice(-20).reverse().map((m) =>
      h('div', { class: 'turn' }, h('span', { class: 'muted' }, when(m.time)), h('b', {}, m.speaker || m.kind), h('div', { class: 'text' }, memoryLink(m)))));
  };
  slider.addEventListener('input', () => {
    draw();
    const p = new URLSearchParams(location.search);
    if (Number(slider.value) >= hi - Number(slider.step)) p.delete('as_of'); else p.set('as_of', new Date(Number(slider.value)).toISOString());
    history.replaceState(null, '', location.pathname + (p.toString() ? '?' + p : ''));
  });
  draw();
  out.push(h('div', { class: 'slider card' }, 'As of ', label, slider), body, mentions);
  return out;
}

// ---- Sessions ---------------------------------------------------------------------------

async function viewSessions(_, params) {
  const scope = scopeParams(params);
  const before = params.get('before') || undefined;
  const page = await api('POST', '/v1/sessions', { scope: scope ? { user: scope.user, agent: scope.agent } : undefined, before, limit: 25 });
  const row = (s) => h('tr', {}, h('td', {}, sessionLink(s.session, { user: s.user || '', agent: s.agent || '' })),
    h('td', {}, s.user || '—'), h('td', {}, when(s.last_turn)),
    h('td', { class: 'text' }, s.summary ? s.summary.text.slice(0, 220) : h('span', { class: 'muted' }, 'no summary yet')));
  const head = h('tr', {}, ['session', 'user', 'last turn', 'summary'].map((t) => h('th', {}, t)));
  const form = h('form', { class: 'filters', onsubmit: (event) => { event.preventDefault(); go('/sessions' + query(formParams(event.target))); } },
    h('label', {}, 'user', h('input', { name: 'user', value: params.get('user') || '' })),
    h('label', {}, 'agent', h('input', { name: 'agent', value: params.get('agent') || '' })),
    h('button', { type: 'submit' }, 'Show'));
  const out = [h('h1', {}, 'Sessions'), form];
  if (page.open.length) out.push(h('h2', {}, 'Open (no summary yet)'), h('table', { id: 'open-sessions' }, head.cloneNode(true), page.open.map(row)));
  out.push(h('h2', {}, 'Summarised'), page.sessions.length ? h('table', { id: 'sessions' }, head, page.sessions.map(row)) : h('p', { class: 'muted' }, 'No summarised sessions.'));
  if (page.next) out.push(h('p', {}, link('/sessions' + query({ ...Object.fromEntries(params), before: page.next }), 'Older sessions →')));
  return out;
}

async function viewSession([session], params) {
  const scope = { user: params.get('user') || undefined, agent: params.get('agent') || undefined };
  const view = await api('POST', '/v1/sessions/turns', { session, scope: scope.user || scope.agent ? scope : undefined, before: params.get('before') || undefined });
  const facts = new Map(view.facts.map((f) => [f.id, f]));
  const out = [h('h1', {}, 'Session: ', session), h('p', { class: 'muted' }, [view.user ? `user ${view.user}` : null, view.agent ? `agent ${view.agent}` : null,
    `${view.turns.length} turns shown`, `${view.facts.length} facts found in them`].filter(Boolean).join(' · '))];
  out.push(view.summary ? h('div', { class: 'card', id: 'summary' }, h('b', {}, 'Summary '), memoryLink(view.summary, '#' + view.summary.id), h('div', { class: 'text' }, view.summary.text)) : h('p', { class: 'muted' }, 'No summary yet (written when the session ends).'));
  if (view.earlier) out.push(h('p', {}, link(location.pathname + query({ ...Object.fromEntries(params), before: view.earlier }), '← Earlier turns')));
  out.push(h('div', { id: 'turns' }, view.turns.map((t) => h('div', { class: 'turn' + (t.facts.length ? ' found' : '') },
    h('span', { class: 'muted' }, when(t.time)), h('b', {}, t.speaker || ''),
    h('div', {}, h('div', { class: 'text' }, memoryLink(t)),
      t.facts.length ? h('div', { class: 'chips' }, 'Facts found: ', t.facts.map((id) => { const f = facts.get(id); return f ? memoryLink(f, f.body ? `${f.body.subject} ${f.body.predicate} ${f.body.object}` : f.text) : null; })) : null)))));
  return out;
}

// ---- Forgetting -------------------------------------------------------------------------

async function viewForgetting(_, params) {
  const scope = scopeParams(params);
  const [facts, forgotten, archive] = await Promise.all([
    api('POST', '/v1/memories/list', { kind: ['fact'], scope, limit: 50, before: params.get('before') || undefined }),
    api('POST', '/v1/memories/list', { forgotten: true, scope, limit: 50 }),
    api('GET', '/v1/archive').catch((e) => ({ error: e })),
  ]);
  const recoverButton = (m) => h('button', { type: 'button', 'data-action': 'Recover', onclick: async () => {
    if (!confirm(`Bring memory #${m.id} back?`)) return;
    try { await api('POST', `/v1/memories/${m.id}/recover`, {}); notice('Recovered'); render(); } catch (e) { document.getElementById('view').prepend(failure(e)); }
  } }, 'Recover');
  const byStrength = [...facts.memories].sort((a, b) => a.decay.strength - b.decay.strength);
  const out = [h('h1', {}, 'Forgetting'), h('p', { class: 'muted' }, 'Facts fade unless used: opinions fastest, observed world facts never. The decay pass forgets softly what falls below its threshold; the archive pass moves what was forgotten long ago to files.')];
  out.push(h('h2', {}, 'Facts by strength (this page, weakest first)'), h('table', { id: 'facts' },
    h('tr', {}, ['fact', 'strength', 'decays', 'uses', 'last used', 'next review'].map((t) => h('th', {}, t))),
    byStrength.map((m) => h('tr', { class: m.decay.fading ? 'fading' : '' }, h('td', { class: 'text' }, memoryLink(m)),
      h('td', {}, strengthBar(m.decay.strength), ' ', fixed(m.decay.strength, 2), m.decay.fading ? ' fading' : ''),
      h('td', {}, m.decay.decays ? 'yes' : 'no'), h('td', {}, m.lifecycle.uses || 0), h('td', {}, when(m.lifecycle.last_used)),
      h('td', {}, when(m.decay.next_review))))));
  if (facts.next) out.push(h('p', {}, link('/forgetting' + query({ ...Object.fromEntries(params), before: facts.next }), 'More facts →')));
  const byDay = new Map();
  for (const m of forgotten.memories) byDay.set(day(m.lifecycle.deleted_at), (byDay.get(day(m.lifecycle.deleted_at)) || 0) + 1);
  out.push(h('h2', {}, 'Forgotten softly'), forgotten.memories.length
    ? [h('p', { class: 'muted' }, 'Forgotten by day (decay runs and forgets): ', [...byDay.entries()].map(([d, n]) => h('span', { class: 'badge' }, `${d}: ${n}`))),
      h('table', { id: 'forgotten' }, h('tr', {}, ['memory', 'kind', 'forgotten', ''].map((t) => h('th', {}, t))),
        forgotten.memories.map((m) => h('tr', { 'data-id': m.id }, h('td', { class: 'text' }, memoryLink(m)), h('td', {}, m.kind), h('td', {}, when(m.lifecycle.deleted_at)), h('td', {}, recoverButton(m)))))]
    : h('p', { class: 'muted' }, 'Nothing forgotten.'));
  out.push(h('h2', {}, 'Archived'));
  if (archive.error) out.push(failure(archive.error));
  else {
    if (archive.files.length) out.push(h('p', { class: 'muted' }, archive.files.map((f) => h('span', { class: 'badge' }, `${f.file}: ${f.memories}`))));
    out.push(archive.memories.length ? h('table', { id: 'archived' }, archive.memories.map((m) => h('tr', {}, h('td', { class: 'text' }, m.text), h('td', {}, m.kind), h('td', {}, m.archive), h('td', {}, recoverButton(m)))))
      : h('p', { class: 'muted' }, 'The archive is empty.'));
  }
  return out;
}

// ---- Agent memories ---------------------------------------------------------------------

// ln Γ by Lanczos (g = 7): enough for the Beta densities drawn here.
function lnGamma(z) {
  const c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (z < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * z)) - lnGamma(1 - z);
  z -= 1;
  let x = c[0];
  for (let i = 1; i < 9; i++) x += c[i] / (z + i);
  const t = z + 7.5;
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(x);
}

// Beta(a, b) drawn: its density, mean and central 95% interval (by the density's running sum).
function betaChart(a, b) {
  const width = 260, height = 70, n = 200;
  const lnB = lnGamma(a) + lnGamma(b) - lnGamma(a + b);
  const xs = Array.from({ length: n + 1 }, (_, i) => (i + 0.5) / (n + 1));
  const ys = xs.map((x) => Math.exp((a - 1) * Math.log(x) + (b - 1) * Math.log(1 - x) - lnB));
  const max = Math.max(...ys);
  const sum = ys.reduce((s, y) => s + y, 0);
  let run = 0, lo = 0, hi = 1;
  xs.forEach((x, i) => { const before = run; run += ys[i] / sum; if (before < 0.025 && run >= 0.025) lo = x; if (before < 0.975 && run >= 0.975) hi = x; });
  const px = (x) => 4 + x * (width - 8);
  const py = (y) => height - 16 - (y / max) * (height - 24);
  const path = 'M' + xs.map((x, i) => `${px(x).toFixed(1)},${py(ys[i]).toFixed(1)}`).join(' L') + ` L${px(1)},${py(0)} L${px(0)},${py(0)} Z`;
  const mean = a / (a + b);
  return svg('svg', { class: 'beta', viewBox: `0 0 ${width} ${height}`, width, height },
    svg('rect', { x: px(lo), y: 4, width: px(hi) - px(lo), height: height - 20, fill: '#fdf2f8' }),
    svg('path', { class: 'density', d: path }),
    svg('line', { class: 'mean', x1: px(mean), x2: px(mean), y1: 4, y2: height - 16 }),
    svg('line', { class: 'axis', x1: px(0), x2: px(1), y1: height - 16, y2: height - 16 }),
    svg('text', { x: px(0), y: height - 3 }, '0'), svg('text', { x: px(1) - 8, y: height - 3 }, '1'),
    svg('text', { x: px(0) + 2, y: 14 }, `mean ${mean.toFixed(2)} · 95% ${lo.toFixed(2)}–${hi.toFixed(2)}`));
}

async function viewAgents(_, params) {
  const scope = scopeParams(params);
  const [experiences, strategies, concepts] = await Promise.all(['experience', 'strategy', 'concept'].map((kind) =>
    api('POST', '/v1/memories/list', { kind: [kind], scope, limit: 100 })));
  const out = [h('h1', {}, 'Agent memories')];
  out.push(h('h2', {}, 'Strategies'), strategies.memories.length ? h('table', { id: 'strategies' },
    h('tr', {}, ['situation → suggestion', 'tried', 'success rate: Beta(1 + successes, 1 + failures)'].map((t) => h('th', {}, t))),
    strategies.memories.map((m) => {
      const s = m.body.successes || 0, f = m.body.failures || 0;
      return h('tr', {}, h('td', { class: 'text' }, memoryLink(m, m.body.situation), ' → ', m.body.suggestion),
        h('td', { class: 'nowrap' }, `${s} ✓ ${f} ✗`), h('td', {}, betaChart(1 + s, 1 + f)));
    })) : h('p', { class: 'muted' }, 'No strategies yet.'));
  const outcomes = ['success', 'partial', 'failure'];
  out.push(h('h2', {}, 'Experiences by outcome'), h('div', { class: 'grid2', id: 'experiences' }, outcomes.map((o) => {
    const mine = experiences.memories.filter((m) => m.body.outcome === o);
    return h('div', { class: 'card' }, h('b', {}, o, ` (${mine.length})`), mine.map((m) => h('div', {}, memoryLink(m, m.body.task), m.body.feedback ? h('span', { class: 'muted' }, ' — ', m.body.feedback) : '')));
  })));
  out.push(h('h2', {}, 'Concepts'), concepts.memories.length ? h('table', { id: 'concepts' },
    h('tr', {}, ['concept', 'uses', 'successes', 'failures', 'code'].map((t) => h('th', {}, t))),
    concepts.memories.map((m) => { const d = m.body.detail || {}; return h('tr', {}, h('td', {}, memoryLink(m, m.body.name), d.description ? h('div', { class: 'muted' }, d.description) : ''),
      h('td', {}, d.occurrences || 0), h('td', {}, d.successes || 0), h('td', {}, d.failures || 0), h('td', {}, h('pre', {}, m.body.code))); }))
    : h('p', { class: 'muted' }, 'No concepts yet.'));
  return out;
}

// ---- Health -----------------------------------------------------------------------------

// The embedder's calls since the server started, where it calls a service (an endpoint).
function usageRows(usage) {
  if (!usage || !usage.calls) return [];
  return [['embedder calls', `${usage.calls} (${usage.retries} retried, ${usage.failures} failed)`],
    ['embedded texts', usage.texts], ['embedder tokens', usage.tokens]];
}

async function viewHealth() {
  const [stats, cycles] = await Promise.all([api('GET', '/v1/stats'), api('GET', '/v1/cycles')]);
  const out = [h('h1', {}, 'Health')];
  out.push(h('table', { class: 'card', id: 'stats' },
    [['memories', stats.memories], ['edges', stats.edges], ['soft-deleted', stats.soft_deleted], ['vectors', stats.vectors],
      ['waiting for a vector', stats.pending_vectors], ['bytes', stats.bytes], ['schema', stats.schema_version],
      ['embedder', stats.embedder || 'none'], ...usageRows(stats.embedder_usage), ['space', stats.db || stats.space]].map(([k, v]) => h('tr', {}, h('th', {}, k), h('td', {}, v ?? '—')))));
  out.push(h('h2', {}, 'Memories by kind'), h('table', {}, Object.entries(stats.by_kind).map(([k, n]) => h('tr', {}, h('td', {}, badge(k)), h('td', {}, n)))));
  const columns = ['episodes_seen', 'facts_added', 'facts_merged', 'facts_superseded', 'entities_added', 'summaries_added', 'core_added', 'failed', 'deferred', 'llm_calls', 'input_tokens', 'output_tokens', 'took_ms'];
  out.push(h('h2', {}, 'Last sleep cycles (newest first)'), cycles.cycles.length
    ? h('div', { style: 'overflow:auto' }, h('table', { id: 'cycles' }, h('tr', {}, columns.map((c) => h('th', {}, c.replace(/_/g, ' ')))),
      cycles.cycles.map((c) => h('tr', {}, columns.map((k) => h('td', {}, k === 'took_ms' ? fixed(c[k], 0) : (c[k] ?? '—')))))))
    : h('p', { class: 'muted' }, 'No sleep cycle has run yet.'));
  return out;
}

keyForm();
render();
