// JSON-RPC over HTTP from the playground: calls POSTed with the browser's
// own fetch to the demo's jsonrpc-http listener, and an EventSource on the
// listener's /events stream that lists topic events as they arrive. Both
// carry the page's real Origin, which the listener's allow-list admits
// (CORS), and go straight to the gateway, never through the admin listener.
//
// DOM state the tests wait on:
//   #http-reply[data-state=idle|sent|answered|error]   the last POST
//     [data-status]                                     its HTTP status
//   #sse-state[data-state=idle|connecting|open|closed] the event stream
//   #sse-events li[data-topic]                          one per event
//
// A call also gets a row in the id-rewrite table (dialect "http") through
// the hooks app.js passes in. Everything shown is set with textContent, the
// reply shown is cut at REPLY_MAX characters and the event list keeps the
// last EVENTS_MAX events.

const REPLY_MAX = 4096;
const EVENTS_MAX = 100;

const $ = (id) => document.getElementById(id);

let hooks = null;
let source = null;

/**
 * Wires the panel. `h`: { endpoint() → the HTTP endpoint URL,
 * nextId() → a client id, addCall(dialect, method, params, id),
 * settle(dialect, id, ok, answer), poll() → read the upstream leg now }.
 */
export function startHttp(h) {
  hooks = h;
  $('http-send').addEventListener('click', () => post());
  $('http-params').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter') post();
  });
  $('sse-open').addEventListener('click', () => subscribe());
  $('sse-close').addEventListener('click', () => {
    close();
    setSse('idle', 'not subscribed');
  });
  showEndpoint();
  $('http-send').disabled = false;
  $('sse-open').disabled = false;
}

/** Shows the endpoint (again, after the demo restarted). */
export function showEndpoint() {
  $('http-endpoint').textContent = hooks ? hooks.endpoint() : '';
}

function cut(text) {
  return text.length > REPLY_MAX ? `${text.slice(0, REPLY_MAX)}… (${text.length} characters)` : text;
}

function showReply(state, status, text) {
  const el = $('http-reply');
  el.dataset.state = state;
  if (status === null) delete el.dataset.status;
  else el.dataset.status = String(status);
  el.textContent = cut(text);
}

function httpHint(text, error = false) {
  $('http-hint').textContent = text;
  $('http-hint').classList.toggle('error', error);
}

async function post() {
  httpHint('');
  let params;
  const method = $('http-method').value.trim();
  try {
    const text = $('http-params').value.trim();
    params = text === '' ? undefined : JSON.parse(text);
    if (!method) throw new Error('a method is required');
  } catch (e) {
    httpHint(e.message, true);
    return;
  }
  const notify = $('http-notify').checked;
  const msg = { jsonrpc: '2.0', method };
  if (params !== undefined) msg.params = params;
  if (!notify) msg.id = hooks.nextId();
  const body = JSON.stringify(msg);
  const url = hooks.endpoint();
  showReply('sent', null, `POST ${url}\n${body}`);
  if (!notify) hooks.addCall('http', method, params, msg.id);
  hooks.poll();
  let res;
  let text;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      cache: 'no-store',
    });
    text = await res.text();
  } catch (e) {
    // A refused CORS preflight or a stopped demo: fetch says no more.
    showReply('error', null, `fetch failed: ${e.message}`);
    if (!notify) hooks.settle('http', msg.id, false, `fetch failed: ${e.message}`);
    return;
  }
  const head = `HTTP ${res.status} ${res.headers.get('content-type') ?? ''}`.trim();
  if (res.status === 204) {
    showReply('answered', res.status, `${head}\n(a notification: no reply)`);
    return;
  }
  let value = null;
  try {
    value = JSON.parse(text);
  } catch (e) {
    // Not JSON (a 4xx/5xx text body): shown as it is.
  }
  const ok = res.ok && value !== null && typeof value === 'object' && !('error' in value);
  showReply(ok ? 'answered' : 'error', res.status, `${head}\n${text}`);
  if (!notify) {
    const answer = value === null ? head : JSON.stringify(ok ? value.result : (value.error ?? value));
    hooks.settle('http', msg.id, ok, answer);
  }
  hooks.poll();
}

// ---------------------------------------------------------------------------
// Server-Sent Events

function setSse(state, text) {
  $('sse-state').dataset.state = state;
  $('sse-state').textContent = text;
  $('sse-close').disabled = state === 'idle';
}

function close() {
  if (source) {
    source.close();
    source = null;
  }
}

function subscribe() {
  close();
  httpHint('');
  const patterns = $('sse-topic').value.split(/[\s,]+/).filter(Boolean);
  if (patterns.length === 0) {
    httpHint('a topic pattern is required (e.g. daemon.events or daemon.>)', true);
    return;
  }
  const query = patterns.map((p) => `topic=${encodeURIComponent(p)}`).join('&');
  const url = `${hooks.endpoint()}/events?${query}`;
  const es = new EventSource(url);
  source = es;
  setSse('connecting', 'connecting…');
  es.addEventListener('open', () => {
    if (source === es) setSse('open', `open: ${patterns.join(' ')}`);
  });
  es.addEventListener('rpc.notification', (ev) => {
    if (source === es) addEvent(ev.data);
  });
  es.addEventListener('error', () => {
    if (source !== es) return;
    if (es.readyState === EventSource.CLOSED) {
      // Refused (a 4xx such as a topic the policy denies): no retry.
      setSse('closed', 'closed: refused or ended by the server');
      source = null;
    } else {
      // The browser reconnects by itself; events meanwhile are not replayed.
      setSse('connecting', 'reconnecting… (events meanwhile are not replayed)');
    }
  });
}

function addEvent(data) {
  let topic = '?';
  try {
    topic = String(JSON.parse(data).topic);
  } catch (e) {
    // Not JSON: listed under "?".
  }
  const list = $('sse-events');
  const li = document.createElement('li');
  li.className = 'in';
  li.dataset.topic = topic;
  const t = document.createElement('span');
  t.className = 'time';
  t.textContent = new Date().toISOString().slice(11, 23);
  const d = document.createElement('span');
  d.className = 'dir';
  d.textContent = 'event';
  li.append(t, d, document.createTextNode(cut(data)));
  list.append(li);
  while (list.children.length > EVENTS_MAX) list.firstElementChild.remove();
  list.scrollTop = list.scrollHeight;
}
