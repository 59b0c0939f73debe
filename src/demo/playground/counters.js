// Live counters for the playground: polls the admin listener's /metrics
// (Prometheus text) and fills #counters and #upstream-counters; stops while
// the demo does not answer (link.js).

import * as link from './link.js';

const COUNTERS_MS = 2000;
const LISTENERS = ['jsonrpc', 'holon', 'sideband', 'http', 'ndjson'];

const $ = (id) => document.getElementById(id);

let timer = null;

/** Polls /metrics every COUNTERS_MS while the demo answers. */
export function startCounters() {
  link.register(() => clearTimeout(timer), () => schedule(0));
  schedule(0);
}

function schedule(ms) {
  clearTimeout(timer);
  timer = setTimeout(pollCounters, ms);
}

async function pollCounters() {
  if (!link.isOnline()) return;
  let text;
  try {
    const res = await fetch('/metrics', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    text = await res.text();
  } catch (e) {
    // The demo stopped (or is restarting): stop until it answers again.
    link.lost('/metrics');
    return;
  }
  renderCounters(parseMetrics(text));
  if (link.isOnline()) schedule(COUNTERS_MS);
}

/** `name{labels} value` lines into [{ name, labels, value }]. */
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(?:\{(.*)\})? ([0-9.eE+-]+)$/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)) labels[k] = v;
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function renderCounters(samples) {
  const sum = (name, match) => samples
    .filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v))
    .reduce((a, s) => a + s.value, 0);
  const body = $('counters').tBodies[0];
  body.replaceChildren();
  for (const listener of LISTENERS) {
    const total = sum('switchyard_requests_total', { listener });
    const ok = sum('switchyard_requests_total', { listener, outcome: 'ok' });
    const open = sum('switchyard_connections_open', { listener });
    const row = document.createElement('tr');
    row.dataset.listener = listener;
    for (const [text, cls] of [[listener, ''], [total, 'num requests'], [ok, 'num'], [total - ok, 'num'], [open, 'num']]) {
      const td = document.createElement('td');
      td.textContent = String(text);
      if (cls) td.className = cls;
      row.append(td);
    }
    body.append(row);
  }
  const connected = sum('switchyard_upstream_connections', { upstream: 'daemon' });
  const inFlight = sum('switchyard_upstream_in_flight', { upstream: 'daemon' });
  $('upstream-counters').textContent = `upstream daemon: ${connected} pooled connection(s), ${inFlight} call(s) in flight`;
}
