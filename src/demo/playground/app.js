// The switchyard playground: talks to the demo's WebSocket listeners with
// the browser's own WebSocket (and the page's real Origin), shows the frames
// on both legs and the id switchyard gave each call upstream. The HTTP
// panel (fetch and EventSource on the jsonrpc-http listener) is http.js.
//
// DOM state the tests wait on:
//   body[data-ready=true]                 endpoints loaded, first poll done
//   #link-state[data-state]               online|offline (link.js)
//   #conn-state[data-state=open]          the selected dialect is connected
//   #calls tr[data-seq][data-state]       one row per call: sent|answered|error
//     [data-client-id][data-upstream-id]  the ids on each leg
//
// Everything shown is set with textContent (never innerHTML), and every
// list is bounded (LOG_MAX, CALLS_MAX). While the demo does not answer,
// nothing is polled (link.js); when it is back, polls resume and the
// WebSocket reconnects.

import { startCounters } from './counters.js';
import * as http from './http.js';
import * as link from './link.js';
import * as sbp from './sideband.js';

const LOG_MAX = 200;
const CALLS_MAX = 100;
const FAST_POLL_MS = 400;
const SLOW_POLL_MS = 1500;
// The page numbers its JSON-RPC and holon-rpc calls from here, so that its
// ids never read like the ones switchyard gives them upstream (numbered per
// upstream from 1).
const FIRST_CLIENT_ID = 101;
const EXAMPLES = {
  jsonrpc: ['subtract', '[42,23]'],
  holon: ['echo', '{"hello":"holon"}'],
  sideband: ['echo', '{"text":"hi"}'],
};
const LABELS = { jsonrpc: 'JSON-RPC 2.0', holon: 'holon-rpc', sideband: 'Sideband (SBP)', http: 'JSON-RPC over HTTP' };

const $ = (id) => document.getElementById(id);
const state = {
  endpoints: null,
  conn: null, // { dialect, ws, ready: Promise }
  calls: [], // { seq, dialect, method, key, clientId, upstream: null|{conn,id}, row }
  nextSeq: 1,
  nextId: FIRST_CLIENT_ID,
  tapAfter: 0,
};

// ---------------------------------------------------------------------------
// Logs

function time() {
  return new Date().toISOString().slice(11, 23);
}

function logLine(listId, dir, text, extra = {}) {
  const list = $(listId);
  const li = document.createElement('li');
  li.className = dir;
  const t = document.createElement('span');
  t.className = 'time';
  t.textContent = extra.time ?? time();
  const d = document.createElement('span');
  d.className = 'dir';
  d.textContent = { out: 'sent →', in: '← recv', note: '' }[dir] ?? dir;
  li.append(t, d, document.createTextNode(text));
  if (extra.hex) {
    const h = document.createElement('span');
    h.className = 'hex';
    h.textContent = extra.hex;
    li.append(h);
  }
  if (extra.dataset) Object.assign(li.dataset, extra.dataset);
  list.append(li);
  while (list.children.length > LOG_MAX) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
  return li;
}

function hint(text, error = false) {
  $('hint').textContent = text;
  $('hint').classList.toggle('error', error);
}

function setConnState(s, text) {
  $('conn-state').dataset.state = s;
  $('conn-state').textContent = text;
}

// ---------------------------------------------------------------------------
// Calls and the id-rewrite table

/** A comparable form of params: the gateway forwards them unchanged. */
function paramsKey(params) {
  return params === undefined ? '' : JSON.stringify(params);
}

function addCall(dialect, method, params, clientId) {
  const seq = state.nextSeq++;
  const row = document.createElement('tr');
  Object.assign(row.dataset, { seq, dialect, state: 'sent', clientId: String(clientId) });
  const cells = [String(seq), LABELS[dialect], method, String(clientId), '…', 'waiting'];
  const classes = ['', '', '', 'id client', 'id upstream', 'answer'];
  cells.forEach((text, i) => {
    const td = document.createElement('td');
    td.textContent = text;
    if (classes[i]) td.className = classes[i];
    row.append(td);
  });
  $('calls').tBodies[0].prepend(row);
  const call = { seq, dialect, method, key: paramsKey(params), clientId: String(clientId), upstream: null, row };
  state.calls.push(call);
  while (state.calls.length > CALLS_MAX) state.calls.shift().row.remove();
  return call;
}

function settle(dialect, clientId, ok, answer) {
  const call = state.calls.find(
    (c) => c.dialect === dialect && c.clientId === String(clientId) && c.row.dataset.state === 'sent',
  );
  if (!call) return;
  call.row.dataset.state = ok ? 'answered' : 'error';
  call.row.querySelector('td.answer').textContent = answer;
}

/** Matches a request line the daemon read to the call it came from. */
function matchUpstream(line, item) {
  if (typeof item.method !== 'string' || item.id === undefined) return;
  const key = paramsKey(item.params);
  const call = state.calls.find((c) => !c.upstream && c.method === item.method && c.key === key);
  if (!call) return;
  call.upstream = { conn: line.conn, id: JSON.stringify(item.id) };
  call.row.dataset.upstreamId = call.upstream.id;
  call.row.querySelector('td.upstream').textContent = `${call.upstream.id} (daemon conn ${line.conn})`;
}

// ---------------------------------------------------------------------------
// Dialects: how a call is framed and a reply recognised

function parseParams() {
  const text = $('params').value.trim();
  if (text === '') return undefined;
  return JSON.parse(text);
}

const dialects = {
  jsonrpc: {
    open: (url) => new WebSocket(url),
    request(method, params, notify = false) {
      const msg = { jsonrpc: '2.0', method };
      if (params !== undefined) msg.params = params;
      if (!notify) msg.id = state.nextId++;
      return msg;
    },
    send(ws, method, params) {
      const msg = this.request(method, params);
      addCall('jsonrpc', method, params, msg.id);
      sendText(ws, JSON.stringify(msg));
    },
    batch(ws, method, params) {
      const items = [this.request(method, params), this.request('sum', [1, 2, 4]), this.request('notify_hello', [7], true)];
      items.filter((m) => m.id !== undefined).forEach((m) => addCall('jsonrpc', m.method, m.params, m.id));
      sendText(ws, JSON.stringify(items));
      hint('A batch of two calls and a notification (which gets no answer) in one frame.');
    },
    receive(ws, data) {
      logLine('client-log', 'in', data);
      const value = JSON.parse(data);
      for (const item of Array.isArray(value) ? value : [value]) {
        if (item && item.id !== undefined && item.method === undefined) {
          const ok = !('error' in item);
          settle('jsonrpc', item.id, ok, JSON.stringify(ok ? item.result : item.error));
        }
      }
    },
  },

  holon: {
    open: (url) => new WebSocket(url, ['holon-rpc']),
    send(ws, method, params) {
      if (params !== undefined && (params === null || typeof params !== 'object' || Array.isArray(params))) {
        throw new Error('holon-rpc params must be a JSON object');
      }
      const id = String(state.nextId++);
      const msg = { jsonrpc: '2.0', id, method, params: params ?? {} };
      addCall('holon', method, msg.params, id);
      sendText(ws, JSON.stringify(msg));
    },
    batch(ws, method, params) {
      this.send(ws, method, params);
      this.send(ws, 'echo', { n: 2 });
      this.send(ws, 'echo', { n: 3 });
      hint('holon-rpc has no batches: three requests in three frames, answered as they complete.');
    },
    receive(ws, data) {
      logLine('client-log', 'in', data);
      const msg = JSON.parse(data);
      if (typeof msg.method === 'string') {
        // A request from switchyard (rpc.heartbeat): answer it.
        sendText(ws, JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: {} }));
        return;
      }
      const ok = !('error' in msg);
      settle('holon', msg.id, ok, JSON.stringify(ok ? msg.result : msg.error));
    },
  },

  sideband: {
    open(url) {
      const ws = new WebSocket(url);
      ws.binaryType = 'arraybuffer';
      return ws;
    },
    onOpen(ws) {
      sendFrame(ws, sbp.handshakeFrame());
    },
    send(ws, method, params) {
      const { bytes, cid } = sbp.requestFrame(method, params);
      addCall('sideband', method, params, cid);
      sendFrame(ws, bytes);
    },
    batch(ws, method, params) {
      this.send(ws, method, params);
      this.send(ws, 'sum', [1, 2, 4]);
      this.send(ws, 'get_data', undefined);
      hint('Sideband has no batches: three r envelopes in three frames; cids are their frameIds.');
    },
    receive(ws, data) {
      let frame;
      try {
        frame = sbp.decodeFrame(data);
      } catch (e) {
        logLine('client-log', 'in', `undecodable frame: ${e.message}`, { hex: sbp.headHex(data) });
        return;
      }
      logLine('client-log', 'in', sbp.describe(frame), { hex: sbp.headHex(data) });
      if (frame.kind === 'Control' && frame.op === 'Handshake') {
        state.conn?.handshaken?.();
      } else if (frame.kind === 'Control' && frame.op === 'Ping') {
        sendFrame(ws, sbp.controlFrame(sbp.OP.PONG));
      } else if (frame.kind === 'Message' && frame.subject === 'rpc') {
        const env = JSON.parse(frame.data);
        if (env.t === 'R') settle('sideband', env.cid, true, JSON.stringify(env.result ?? null));
        if (env.t === 'E') settle('sideband', env.cid, false, JSON.stringify({ code: env.code, message: env.message, data: env.data }));
      }
    },
  },
};

function sendText(ws, text) {
  ws.send(text);
  logLine('client-log', 'out', text);
}

function sendFrame(ws, bytes) {
  ws.send(bytes);
  logLine('client-log', 'out', sbp.describe(sbp.decodeFrame(bytes.buffer)), { hex: sbp.headHex(bytes) });
}

// ---------------------------------------------------------------------------
// Connection to the selected dialect

function connect() {
  const dialect = $('dialect').value;
  if (state.conn) {
    state.conn.closing = true;
    state.conn.ws.close(1000, 'dialect changed');
  }
  const url = state.endpoints[dialect];
  $('endpoint').textContent = url;
  $('leg-dialect').textContent = `${LABELS[dialect]} · ${url}`;
  setConnState('connecting', 'connecting…');
  $('send').disabled = true;
  $('batch').disabled = true;
  const ws = dialects[dialect].open(url);
  const conn = { dialect, ws };
  state.conn = conn;
  const ready = () => {
    if (state.conn !== conn) return;
    setConnState('open', `${LABELS[dialect]}: open`);
    $('send').disabled = false;
    $('batch').disabled = false;
  };
  ws.addEventListener('open', () => {
    logLine('client-log', 'note', `WebSocket open: ${url}${ws.protocol ? ` (subprotocol ${ws.protocol})` : ''}`);
    if (dialect === 'sideband') {
      conn.handshaken = ready;
      dialects.sideband.onOpen(ws);
    } else {
      ready();
    }
  });
  ws.addEventListener('message', (ev) => {
    try {
      dialects[dialect].receive(ws, ev.data);
    } catch (e) {
      logLine('client-log', 'note', `cannot read a frame: ${e.message}`);
    }
  });
  ws.addEventListener('close', (ev) => {
    const why = conn.closing ? 'by the page (dialect changed)' : `${ev.code}${ev.reason ? ` ${ev.reason}` : ''}`;
    logLine('client-log', 'note', `WebSocket closed: ${why} · ${url}`);
    if (state.conn === conn) {
      setConnState('closed', `closed (${ev.code}): pick a dialect to reconnect`);
      $('send').disabled = true;
      $('batch').disabled = true;
      // The demo may have stopped: if so, wait for it and reconnect.
      if (!conn.closing) link.check('WebSocket closed');
    }
  });
}

function send(batch) {
  const conn = state.conn;
  if (!conn || conn.ws.readyState !== WebSocket.OPEN) return;
  hint('');
  try {
    const params = parseParams();
    const method = $('method').value.trim();
    if (!method) throw new Error('a method is required');
    const d = dialects[conn.dialect];
    if (batch) d.batch(conn.ws, method, params);
    else d.send(conn.ws, method, params);
    schedulePoll(0);
  } catch (e) {
    hint(e.message, true);
  }
}

// ---------------------------------------------------------------------------
// The upstream leg: the daemon's tapped lines

let pollTimer = null;

function schedulePoll(ms) {
  clearTimeout(pollTimer);
  pollTimer = setTimeout(pollUpstream, ms);
}

async function pollUpstream() {
  if (!link.isOnline()) return;
  let lines;
  try {
    const res = await fetch(`/demo/upstream?after=${state.tapAfter}`, { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    ({ lines } = await res.json());
  } catch (e) {
    // The demo stopped: poll again once it answers (link.js).
    link.lost('/demo/upstream');
    return;
  }
  for (const line of lines) {
    state.tapAfter = Math.max(state.tapAfter, line.seq);
    showUpstream(line);
  }
  if (!link.isOnline()) return;
  // rpc.* (pub/sub) is served by switchyard itself: never upstream.
  const waiting = state.calls.some((c) => !c.method.startsWith('rpc.') && (!c.upstream || c.row.dataset.state === 'sent'));
  schedulePoll(waiting ? FAST_POLL_MS : SLOW_POLL_MS);
}

function showUpstream(line) {
  const at = new Date(line.at_ms).toISOString().slice(11, 23);
  const li = logLine('upstream-log', line.dir === 'in' ? 'out' : 'in', `[conn ${line.conn}] ${line.text}`, { time: at });
  if (line.dir !== 'in') return;
  try {
    const value = JSON.parse(line.text);
    for (const item of Array.isArray(value) ? value : [value]) {
      const before = state.calls.filter((c) => c.upstream).length;
      matchUpstream(line, item);
      if (state.calls.filter((c) => c.upstream).length > before) li.classList.add('hit');
    }
  } catch (e) {
    // Not JSON (the daemon answers that itself): nothing to match.
  }
}

// ---------------------------------------------------------------------------

/** Only the daemon's lines from now on are matched to this page's calls. */
async function skipTappedLines() {
  const { lines } = await (await fetch('/demo/upstream?after=0', { cache: 'no-store' })).json();
  state.tapAfter = 0;
  for (const line of lines) state.tapAfter = Math.max(state.tapAfter, line.seq);
}

/** The demo answers again (maybe restarted): poll and reconnect. */
async function resume(endpoints) {
  state.endpoints = endpoints;
  logLine('upstream-log', 'note', 'the demo answers again');
  try {
    // A restarted demo numbers its lines from 1 again.
    await skipTappedLines();
  } catch (e) {
    link.lost('/demo/upstream');
    return;
  }
  schedulePoll(0);
  http.showEndpoint();
  if (!state.conn || state.conn.ws.readyState !== WebSocket.OPEN) connect();
}

async function init() {
  state.endpoints = await (await fetch('/demo/endpoints', { cache: 'no-store' })).json();
  await skipTappedLines();
  link.register(() => clearTimeout(pollTimer), resume);
  $('dialect').addEventListener('change', () => {
    const [method, params] = EXAMPLES[$('dialect').value];
    $('method').value = method;
    $('params').value = params;
    connect();
  });
  $('method').addEventListener('change', () => {
    if (!$('method').value.startsWith('rpc.')) return;
    $('params').value = '{"topic":"daemon.events"}';
    hint('Pub/sub, served by switchyard itself: the daemon\'s Subscribe stream is opened once for every subscriber; its events arrive as rpc.notification (holon: s<N> requests, Sideband: N on event).');
  });
  $('send').addEventListener('click', () => send(false));
  $('batch').addEventListener('click', () => send(true));
  $('params').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') send(false);
  });
  http.startHttp({
    endpoint: () => state.endpoints.http,
    nextId: () => state.nextId++,
    addCall,
    settle,
    poll: () => schedulePoll(0),
  });
  connect();
  schedulePoll(SLOW_POLL_MS);
  startCounters();
  document.body.dataset.ready = 'true';
}

init().catch((e) => hint(`cannot start: ${e.message}`, true));
