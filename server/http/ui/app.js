/* MIC admin page (GET /ui).  Plain JavaScript, no framework, no network
 * but micd's own API (the page's Content-Security-Policy forbids any
 * other origin).
 *
 * The page's files hold no data: every figure comes from an API call made
 * here with "Authorization: Bearer <the key typed>".  The key lives in
 * this tab only (sessionStorage, cleared by "Forget key"), never in
 * localStorage or a cookie.  GET /v1/whoami tells the key's role: admin
 * keys get the DLQ's requeue and skip buttons, other keys see the page
 * read-only; the server decides anyway, and when it refuses an action the
 * page shows its error message.  Every text from the server is put in the
 * page as text (textContent), never as HTML. */
'use strict';

const REFRESH_MS = 3000;
const KEY_SLOT = 'mic.ui.key';

const state = {
  key: null,        // null: not connected; '' : micd without --keys
  role: null,
  keyId: null,
  selected: null,   // the group shown in detail
  timer: null,
  busy: false,
  again: false,     // a refresh was asked for while one ran
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? '' : String(k)));
  return e;
}

/* ---- The API ---- */

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = {};
  if (state.key) headers.Authorization = 'Bearer ' + state.key;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store', credentials: 'omit',
  });
  const text = await resp.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
  if (!resp.ok) {
    const err = json && json.error ? json.error : {};
    throw new ApiError(resp.status, err.code || String(resp.status),
                       err.message || (resp.status + ' ' + resp.statusText));
  }
  return json;
}

const enc = encodeURIComponent;

/* ---- Messages ---- */

function showError(what, e) {
  const msg = e instanceof ApiError ? `${what}: ${e.message} (${e.status} ${e.code})`
                                    : `${what}: ${e && e.message ? e.message : e}`;
  $('error-text').textContent = msg;
  $('error').hidden = false;
}

function showNotice(text) {
  $('notice').textContent = text;
  $('notice').hidden = false;
}

function note(id, e) {
  const n = $(id);
  if (!e) { n.textContent = ''; n.className = 'note'; return; }
  n.textContent = e instanceof ApiError ? `${e.message} (${e.status} ${e.code})` : String(e.message || e);
  n.className = 'note err';
}

/* ---- Formatting ---- */

function age(s) {
  if (s == null) return '–';
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
  if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
  return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
}

/* A short age for the chart's axes: "45s", "12min", "3h". */
function shortAge(s) {
  if (s < 120) return (s < 10 && s % 1 ? s.toFixed(1) : Math.round(s)) + 's';
  if (s < 7200) return Math.round(s / 60) + 'min';
  return Math.round(s / 3600) + 'h';
}

function when(t) {
  if (!t) return '–';
  const d = new Date(t);
  return isNaN(d) ? t : d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/* Why the oldest unhandled delivery waits, in words (DESIGN 12 "oldest"). */
function why(d) {
  switch (d.reason) {
    case 'ready': return 'ready: no worker has claimed it';
    case 'leased': return `leased by ${d.worker || 'a worker'} until ${when(d.lease_expires_at)}`;
    case 'retry': return `retry at ${when(d.not_before)}` + (d.last_error ? ` after: ${d.last_error}` : '');
    case 'gap': return `waiting for version ${d.missing_version} of its aggregate`;
    case 'behind_head': return `behind seq ${d.head_seq} of its aggregate`;
    case 'scheduled': return `scheduled for ${when(d.deliver_at)}`;
    default: return d.reason || d.state || '';
  }
}

/* ---- Sections ---- */

function renderGroups(groups, oldest) {
  const tb = $('groups').tBodies[0];
  tb.replaceChildren();
  for (const g of groups) {
    const o = oldest.get(g.group);
    const first = o && o.deliveries && o.deliveries[0];
    const tr = el('tr', {'data-group': g.group},
      el('td', {class: 'mono c-group'}, g.group),
      el('td', {class: 'n c-pending'}, g.pending),
      el('td', {class: 'n c-processing'}, g.processing),
      el('td', {class: 'n c-dlq'}, g.dlq),
      el('td', {class: 'n c-dispatched'}, g.dispatched),
      el('td', {class: 'n c-blocked'}, g.blocked_aggregates),
      el('td', {class: 'n c-oldest'}, age(g.oldest_unhandled_age_s)),
      el('td', {class: 'mono c-event'}, first ? `${first.event_id} (seq ${first.seq})` : (o instanceof Error ? '?' : '–')),
      el('td', {class: 'c-why'}, first ? why(first) : (o instanceof Error ? o.message : '')),
      el('td', {class: 'c-alert'}, el('span', {class: g.alert ? 'badge alert' : 'badge ok'}, g.alert ? 'ALERT' : 'ok')));
    if (g.group === state.selected) tr.classList.add('selected');
    tr.addEventListener('click', () => select(g.group));
    tb.append(tr);
  }
  $('groups-note').textContent = groups.length ? '' : 'No group this key can see.';
}

function renderTopics(topics) {
  const tb = $('topics').tBodies[0];
  tb.replaceChildren(...topics.map((t) => el('tr', {'data-topic': t.topic},
    el('td', {class: 'mono'}, t.topic), el('td', {class: 'n'}, t.events),
    el('td', {class: 'n'}, t.publishes), el('td', {class: 'n'}, t.duplicates),
    el('td', {class: 'n'}, t.conflicts))));
}

function renderReplays(runs) {
  const tb = $('replays').tBodies[0];
  tb.replaceChildren(...runs.map((r) => {
    const done = (r.dispatched || 0) + (r.dlq || 0);
    const p = el('progress', {max: Math.max(r.selected || 0, 1), value: r.selected ? done : 1});
    return el('tr', {'data-run': r.run_id},
      el('td', {class: 'mono'}, r.run_id), el('td', {class: 'mono'}, r.topic), el('td', {}, r.state),
      el('td', {}, p, ` ${done} / ${r.selected}`), el('td', {class: 'n'}, r.selected),
      el('td', {class: 'n'}, r.dlq));
  }));
  if (!runs.length) tb.append(el('tr', {}, el('td', {colSpan: 6, class: 'muted'}, 'No replay run.')));
}

function renderBlocked(list) {
  const tb = $('blocked').tBodies[0];
  const by = {};
  for (const a of list) by[a.reason] = (by[a.reason] || 0) + 1;
  const s = $('blocked-summary');
  s.replaceChildren();
  if (!list.length) s.append('No blocked aggregate.');
  for (const [r, n] of Object.entries(by)) s.append(el('span', {class: 'badge reason'}, `${r}: ${n}`), ' ');
  tb.replaceChildren(...list.map((a) => el('tr', {},
    el('td', {class: 'mono'}, `${a.aggregate_type}/${a.aggregate_id}`),
    el('td', {}, el('span', {class: 'badge reason'}, a.reason)),
    el('td', {class: 'n'}, a.head_seq), el('td', {class: 'n'}, a.waiting),
    el('td', {class: 'n'}, age(a.age_s)))));
}

function renderDlq(group, list) {
  const admin = state.role === 'admin';
  const tb = $('dlq').tBodies[0];
  $('requeue-all').hidden = !admin || !list.length;
  tb.replaceChildren(...list.map((d) => {
    const ev = d.event || {};
    const actions = el('td', {class: 'actions'});
    if (admin) {
      const rq = el('button', {type: 'button', class: 'act requeue', title: 'back to pending, attempts 0'}, 'Requeue');
      const sk = el('button', {type: 'button', class: 'danger skip', title: 'terminal: never delivered'}, 'Skip');
      rq.addEventListener('click', () => act(group, 'requeue', {seqs: [d.seq]}, rq));
      sk.addEventListener('click', () => act(group, 'skip', {seqs: [d.seq]}, sk));
      actions.append(rq, sk);
    } else {
      actions.append(el('span', {class: 'muted'}, 'read-only'));
    }
    return el('tr', {'data-seq': String(d.seq)},
      el('td', {class: 'n'}, d.seq), el('td', {class: 'mono'}, ev.event_id),
      el('td', {class: 'mono'}, ev.topic), el('td', {class: 'n'}, d.attempts),
      el('td', {}, d.last_error || ''), el('td', {}, when(d.dead_lettered_at)), actions);
  }));
  if (!list.length) tb.append(el('tr', {}, el('td', {colSpan: 7, class: 'muted'}, 'Empty.')));
}

/* The chart: oldest unhandled age (left axis) and backlog (right axis) of
 * the selected group over the last hour, from GET /v1/stats/history. */
function renderChart(hist, group) {
  const svg = $('chart');
  const NS = 'http://www.w3.org/2000/svg';
  const W = 640, H = 220, L = 48, R = 48, T = 12, B = 26;
  const mk = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text != null) e.textContent = text;
    svg.append(e);
    return e;
  };
  svg.replaceChildren();
  const g = hist && hist.groups.find((x) => x.group === group);
  const times = hist ? hist.times.map((t) => Date.parse(t)) : [];
  const now = times.length ? times[times.length - 1] : Date.now();
  // The last hour, or less while micd has not sampled for an hour yet
  // (at least two minutes), so that a young micd's points are not all
  // squeezed against the right edge.
  const span = Math.min(3600e3, Math.max(120e3, times.length ? now - times[0] : 0));
  const t0 = now - span;
  const x = (t) => L + ((t - t0) / span) * (W - L - R);
  const ages = g ? g.oldest_unhandled_age_s : [];
  const backs = g ? g.backlog : [];
  const nice = (v) => {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  };
  const amax = nice(Math.max(0, ...ages.filter((v) => v != null)));
  const bmax = Math.max(4, Math.ceil(Math.max(0, ...backs.filter((v) => v != null)) / 4) * 4);
  for (let i = 0; i <= 4; i++) {
    const y = T + (i / 4) * (H - T - B);
    mk('line', {x1: L, x2: W - R, y1: y, y2: y, class: 'grid'});
    mk('text', {x: L - 4, y: y + 4, 'text-anchor': 'end'}, shortAge(amax * (1 - i / 4)));
    mk('text', {x: W - R + 4, y: y + 4}, String(Math.round(bmax * (1 - i / 4))));
  }
  mk('line', {x1: L, x2: W - R, y1: H - B, y2: H - B, class: 'axis'});
  for (let i = 0; i <= 6; i++) {
    const back = span * (1 - i / 6);
    const xx = x(now - back);
    mk('line', {x1: xx, x2: xx, y1: H - B, y2: H - B + 4, class: 'axis'});
    mk('text', {x: xx, y: H - 8, 'text-anchor': 'middle'}, i === 6 ? 'now' : `-${shortAge(back / 1000)}`);
  }
  const series = (vals, max, cls) => {
    let d = '';
    let pen = false;
    vals.forEach((v, i) => {
      if (v == null || times[i] < t0) { pen = false; return; }
      const px = x(times[i]).toFixed(1), py = (H - B - (v / max) * (H - T - B)).toFixed(1);
      d += (pen ? ' L' : ' M') + px + ' ' + py;
      pen = true;
      // a dot per sample: a lone one (a young micd) shows too
      mk('circle', {cx: px, cy: py, r: 2.2, class: cls + '-dot'});
    });
    if (d) mk('path', {d: d.trim(), class: cls});
    return d !== '';
  };
  const drawn = series(ages, amax, 'age') | series(backs, bmax, 'backlog');
  $('chart-note').textContent = drawn ? `${times.length} samples, one every ${hist.interval_s} s (micd keeps the last hour)`
    : 'No sample yet for this group (micd samples every 10 s).';
}

/* ---- Refresh ---- */

async function refresh() {
  if (state.key === null) return;
  if (state.busy) { state.again = true; return; } // once more when this one ends
  state.busy = true;
  state.again = false;
  try {
    const stats = await api('GET', '/v1/stats');
    const groups = stats.groups || [];
    if (!state.selected || !groups.some((g) => g.group === state.selected))
      state.selected = groups.length ? groups[0].group : null;
    const oldest = new Map();
    const [hist] = await Promise.all([
      api('GET', '/v1/stats/history').catch((e) => { note('chart-note', e); return null; }),
      ...groups.map((g) => api('GET', `/v1/groups/${enc(g.group)}/oldest?limit=1`)
        .then((o) => oldest.set(g.group, o), (e) => oldest.set(g.group, e))),
      api('GET', '/v1/replays').then((r) => { renderReplays(r.replays || []); note('replays-note', null); },
                                     (e) => { renderReplays([]); note('replays-note', e); }),
    ]);
    renderGroups(groups, oldest);
    renderTopics(stats.topics || []);
    await renderDetail(hist);
    $('main').hidden = false;
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    $('updated').setAttribute('data-ok', '1');
  } catch (e) {
    showError('Refresh failed', e);
  } finally {
    state.busy = false;
  }
  if (state.again) await refresh();
}

async function renderDetail(hist) {
  const g = state.selected;
  $('detail').hidden = !g;
  if (!g) return;
  $('detail-name').textContent = g;
  renderChart(hist, g);
  await Promise.all([
    api('GET', `/v1/groups/${enc(g)}/blocked`).then((b) => { renderBlocked(b.aggregates || []); note('blocked-note', null); },
                                                 (e) => { renderBlocked([]); note('blocked-note', e); }),
    api('GET', `/v1/groups/${enc(g)}/dlq?limit=100`).then((d) => { renderDlq(g, d.deliveries || []); note('dlq-note', null); },
                                                       (e) => { renderDlq(g, []); note('dlq-note', e); }),
  ]);
  $('detail').setAttribute('data-group', g);
}

function schedule() {
  clearTimeout(state.timer);
  if (state.key === null || document.hidden) return; // paused while the tab is hidden
  state.timer = setTimeout(async () => { await refresh(); schedule(); }, REFRESH_MS);
}

function select(group) {
  state.selected = group;
  for (const tr of $('groups').tBodies[0].rows) tr.classList.toggle('selected', tr.dataset.group === group);
  $('detail').removeAttribute('data-group');
  refresh();
}

/* ---- Actions (admin keys) ---- */

async function act(group, verb, body, button) {
  const label = verb === 'requeue' ? 'Requeue' : 'Skip';
  if (button) button.disabled = true;
  $('notice').hidden = true;
  try {
    const res = await api('POST', `/v1/groups/${enc(group)}/dlq/${verb}`, body);
    if (typeof res.requeued === 'number') {
      showNotice(`${group}: ${res.requeued} delivery(ies) requeued`);
    } else {
      const done = res.results.filter((r) => r.status === (verb === 'requeue' ? 'requeued' : 'skipped'));
      const other = res.results.filter((r) => !done.includes(r));
      if (done.length) showNotice(`${group}: seq ${done.map((r) => r.seq).join(', ')} ${verb === 'requeue' ? 'requeued' : 'skipped'}`);
      if (other.length) showError(`${label} in ${group}`, new Error(other.map((r) => `seq ${r.seq}: ${r.status}`).join('; ')));
    }
  } catch (e) {
    showError(`${label} refused`, e);
    if (e instanceof ApiError && e.status === 403) await whoami().catch(() => {});
  } finally {
    if (button) button.disabled = false;
  }
  await refresh();
}

/* ---- Session ---- */

async function whoami() {
  const me = await api('GET', '/v1/whoami');
  state.role = me.role;
  state.keyId = me.key_id;
  $('who').textContent = (me.key_id ? `key ${me.key_id}` : 'no keys configured') +
    ` · ${me.role}` + (me.role === 'admin' ? '' : ' (read-only)');
  document.body.dataset.role = me.role;
}

async function connect(key) {
  state.key = key;
  try {
    await whoami();
  } catch (e) {
    state.key = null;
    sessionStorage.removeItem(KEY_SLOT);
    showError('Cannot connect', e);
    return;
  }
  sessionStorage.setItem(KEY_SLOT, key);
  $('error').hidden = true;
  $('login').hidden = true;
  $('session').hidden = false;
  await refresh();
  schedule();
}

function logout() {
  sessionStorage.removeItem(KEY_SLOT);
  clearTimeout(state.timer);
  Object.assign(state, {key: null, role: null, keyId: null, selected: null});
  $('main').hidden = true;
  $('session').hidden = true;
  $('login').hidden = false;
  $('notice').hidden = true;
  delete document.body.dataset.role;
}

document.addEventListener('DOMContentLoaded', () => {
  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const k = $('key').value.trim();
    $('key').value = '';
    connect(k);
  });
  $('logout').addEventListener('click', logout);
  $('error-close').addEventListener('click', () => { $('error').hidden = true; });
  $('requeue-all').addEventListener('click', (ev) => act(state.selected, 'requeue', {all: true}, ev.target));
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && state.key !== null) refresh();
    schedule();
  });
  const saved = sessionStorage.getItem(KEY_SLOT);
  if (saved !== null) connect(saved);
});
