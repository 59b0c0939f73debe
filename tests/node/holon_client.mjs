// An independent holon-rpc client, driven by tests/holon_node_client.rs.
//
// It talks to a switchyard holon-rpc listener the way the browser
// `HolonClient` does (holon-rpc.md §1–§6, §8): it offers exactly `holon-rpc`,
// requires the 101 to select it, uses string ids ("1", "2", … for calls,
// "h1", "h2", … for heartbeats), answers server-initiated `s<N>` requests
// with its registered handlers (error 12 for unknown methods), and checks
// EVERY frame it receives with the HolonClient rules of holon-rpc.md §2
// ("Exact checks made by HolonClient"). A frame that breaks them is
// recorded as a violation and the socket is closed 1002 with the reason, as
// HolonClient on the `ws` package does.
//
// Usage: node holon_client.mjs <ws-url>
//
// Steps:
//   1. `echo` with id "1";
//   2. heartbeat "h1" → `result: {}` within 5 s;
//   3. `callback` {"method":"ui.confirm","params":{"text":"ok?"}}: answer the
//      server-initiated request (sending heartbeat "h2" while it is
//      pending), then get `{"reply":{"confirmed":true}}`;
//   4. on three fresh connections: malformed JSON, a binary frame and an
//      invalid envelope without a usable id; record each close code/reason;
//   5. on a fresh connection: an invalid envelope with a usable id → -32600
//      with that id, the connection stays open and `echo` still works.
//
// stdout: exactly one JSON object summarising every observation. The exit
// code is 0 only if every check passed; 1 if some check failed (see
// `failures`); 2 on a usage error or the global deadline.

import { readFileSync } from 'node:fs';
import WebSocket from 'ws';

const PROTOCOL = 'holon-rpc';
const CONNECT_TIMEOUT_MS = 10_000; // HolonClient's connect timeout
const CALL_TIMEOUT_MS = 10_000;
const HEARTBEAT_TIMEOUT_MS = 5_000; // HolonClient's heartbeat timeout
const CALLBACK_TIMEOUT_MS = 20_000;
const CLOSE_TIMEOUT_MS = 5_000;
const DEADLINE_MS = 90_000;

const url = process.argv[2];
const summary = {
  ok: false,
  url: url ?? null,
  node: process.version,
  ws: wsVersion(),
  failures: [],
  violations: [],
  unexpected: [],
  steps: {},
};

function wsVersion() {
  try {
    const pkg = new URL('./node_modules/ws/package.json', import.meta.url);
    return JSON.parse(readFileSync(pkg, 'utf8')).version;
  } catch {
    return null;
  }
}

function finish(code) {
  summary.ok = code === 0 && summary.failures.length === 0;
  process.stdout.write(`${JSON.stringify(summary)}\n`, () => process.exit(code));
}

if (!url) {
  summary.failures.push({ step: 'usage', message: 'usage: node holon_client.mjs <ws-url>' });
  finish(2);
}

const deadline = setTimeout(() => {
  summary.failures.push({ step: 'deadline', message: `script exceeded ${DEADLINE_MS} ms` });
  finish(2);
}, DEADLINE_MS);
deadline.unref();

// ---------------------------------------------------------------------------
// HolonClient's envelope checks (holon-rpc.md §2), in its order. Returns the
// parsed envelope or throws the reason HolonClient would close with.

const ALLOWED_KEYS = new Set(['jsonrpc', 'id', 'method', 'params', 'result', 'error']);
const hasOwn = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);

class ProtocolError extends Error {}

function checkFrame(data, isBinary) {
  // 1. text frames only (browsers: "unsupported frame type").
  if (isBinary) throw new ProtocolError('unsupported frame type');
  const text = data.toString('utf8');
  // 2. JSON.
  let msg;
  try {
    msg = JSON.parse(text);
  } catch {
    throw new ProtocolError('malformed JSON');
  }
  // 3. a plain object.
  if (msg === null || typeof msg !== 'object' || Array.isArray(msg)
      || Object.getPrototypeOf(msg) !== Object.prototype) {
    throw new ProtocolError('invalid envelope: message must be an object');
  }
  // 4. no unknown top-level key.
  for (const key of Object.keys(msg)) {
    if (!ALLOWED_KEYS.has(key)) throw new ProtocolError(`invalid envelope: unknown field "${key}"`);
  }
  // 5. jsonrpc.
  if (msg.jsonrpc !== '2.0') throw new ProtocolError('invalid envelope: jsonrpc must be "2.0"');
  // 6. id: own property, string, non-blank.
  if (!hasOwn(msg, 'id') || typeof msg.id !== 'string' || msg.id.trim() === '') {
    throw new ProtocolError('invalid envelope: id must be a non-empty string');
  }
  if (hasOwn(msg, 'method')) {
    // 7. a request.
    if (typeof msg.method !== 'string' || msg.method.trim() === '') {
      throw new ProtocolError('invalid envelope: method must be a non-empty string');
    }
    if (hasOwn(msg, 'result') || hasOwn(msg, 'error')) {
      throw new ProtocolError('invalid envelope: request must not carry result or error');
    }
    return { kind: 'request', msg, text };
  }
  // 8. a response.
  if (hasOwn(msg, 'params')) throw new ProtocolError('invalid envelope: response must not carry params');
  const hasResult = hasOwn(msg, 'result');
  const hasError = hasOwn(msg, 'error');
  if (hasResult === hasError) {
    throw new ProtocolError('invalid envelope: response must carry exactly one of result or error');
  }
  if (hasError) {
    const e = msg.error;
    if (e === null || typeof e !== 'object' || Array.isArray(e)) {
      throw new ProtocolError('invalid envelope: error must be an object');
    }
    if (!Number.isInteger(e.code)) throw new ProtocolError('invalid envelope: error.code must be an integer');
    if (typeof e.message !== 'string') throw new ProtocolError('invalid envelope: error.message must be a string');
  }
  return { kind: 'response', msg, text };
}

// ---------------------------------------------------------------------------

function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => hasOwn(b, k) && deepEqual(a[k], b[k]));
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** One holon-rpc connection, HolonClient style. */
class Conn {
  constructor(name, ws) {
    this.name = name;
    this.ws = ws;
    this.pending = new Map(); // id -> { resolve, reject }
    this.closedBy = 'server'; // until this client starts a close
    this.settled = new Set();
    this.handlers = new Map(); // method -> async (params, msg) => result
    this.received = []; // every frame, as text (binary: "<binary N bytes>")
    this.serverRequests = [];
    this.closed = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        const closed = { code, reason: reason.toString('utf8'), closed_by: this.closedBy };
        // HolonClient fails every pending call (code 14) on close.
        for (const [id, waiter] of this.pending) {
          waiter.reject(new Error(`${name}: connection closed (${JSON.stringify(closed)}) before the reply to id ${id}`));
        }
        this.pending.clear();
        resolve(closed);
      });
    });
    ws.on('error', (err) => {
      summary.unexpected.push({ conn: name, event: 'error', message: String(err?.message ?? err) });
    });
    ws.on('message', (data, isBinary) => this.onMessage(data, isBinary));
  }

  static open(name, target) {
    return withTimeout(new Promise((resolve, reject) => {
      const ws = new WebSocket(target, PROTOCOL);
      const onError = (err) => reject(new Error(`connect failed: ${err?.message ?? err}`));
      ws.once('error', onError);
      ws.once('open', () => {
        ws.off('error', onError);
        if (ws.protocol !== PROTOCOL) {
          ws.close(1002, 'missing holon-rpc subprotocol'); // as the Go/Rust clients do
          reject(new Error(`server selected subprotocol ${JSON.stringify(ws.protocol)}`));
          return;
        }
        resolve(new Conn(name, ws));
      });
    }), CONNECT_TIMEOUT_MS, `${name}: connect`);
  }

  onMessage(data, isBinary) {
    this.received.push(isBinary ? `<binary ${data.length} bytes>` : data.toString('utf8'));
    let frame;
    try {
      frame = checkFrame(data, isBinary);
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      const raw = isBinary ? `<binary ${data.length} bytes>` : data.toString('utf8');
      summary.violations.push({ conn: this.name, reason: err.message, frame: raw });
      process.stderr.write(`[${this.name}] INVALID FRAME (${err.message}): ${raw}\n`);
      // HolonClient on the `ws` package closes 1002 with the reason.
      this.closeWith(1002, err.message.slice(0, 123));
      return;
    }
    const { msg } = frame;
    if (frame.kind === 'request') {
      this.serverRequests.push(msg);
      this.serve(msg);
      return;
    }
    const waiter = this.pending.get(msg.id);
    if (!waiter) {
      const kind = this.settled.has(msg.id) ? 'duplicate_response_id' : 'unknown_response_id';
      summary.unexpected.push({ conn: this.name, event: kind, frame: frame.text });
      return;
    }
    this.pending.delete(msg.id);
    this.settled.add(msg.id);
    waiter.resolve(msg);
  }

  async serve(msg) {
    const handler = this.handlers.get(msg.method);
    let reply;
    if (!handler) {
      summary.unexpected.push({ conn: this.name, event: 'unexpected_server_request', frame: msg });
      reply = { jsonrpc: '2.0', id: msg.id, error: { code: 12, message: `method "${msg.method}" not registered` } };
    } else {
      try {
        reply = { jsonrpc: '2.0', id: msg.id, result: await handler(msg.params, msg) };
      } catch (err) {
        reply = { jsonrpc: '2.0', id: msg.id, error: { code: 13, message: String(err?.message ?? err) } };
      }
    }
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(reply));
  }

  /** Sends a request and resolves with the whole response envelope. */
  request(id, method, params, timeoutMs = CALL_TIMEOUT_MS) {
    return this.expectReply(id, JSON.stringify({ jsonrpc: '2.0', id, method, params }), `${method} id ${id}`, timeoutMs);
  }

  /** Sends `text` and resolves with the response envelope whose id is `id`. */
  expectReply(id, text, what, timeoutMs = CALL_TIMEOUT_MS) {
    if (this.ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(new Error(`${this.name}: connection not open (readyState ${this.ws.readyState}) for ${what}`));
    }
    const reply = new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
    this.ws.send(text);
    return withTimeout(reply, timeoutMs, `${this.name}: reply to ${what}`).catch((err) => {
      this.pending.delete(id);
      throw err;
    });
  }

  /** Sends a heartbeat; resolves with `{ reply, ms }`. */
  async heartbeat(id) {
    const start = Date.now();
    const reply = await this.request(id, 'rpc.heartbeat', {}, HEARTBEAT_TIMEOUT_MS);
    return { reply, ms: Date.now() - start };
  }

  waitClosed(timeoutMs = CLOSE_TIMEOUT_MS) {
    return withTimeout(this.closed, timeoutMs, `${this.name}: close`);
  }

  closeWith(code, reason) {
    this.closedBy = 'client';
    this.ws.close(code, reason);
  }

  async close() {
    if (this.ws.readyState === WebSocket.OPEN) this.closeWith(1000, 'client close');
    try {
      await this.waitClosed();
    } catch {
      this.ws.terminate();
    }
  }
}

// ---------------------------------------------------------------------------

function check(step, cond, message) {
  if (!cond) {
    summary.failures.push({ step, message });
    process.stderr.write(`[${step}] FAILED: ${message}\n`);
  }
  return cond;
}

// Runs one step; its observations go to `record` (default: summary.steps[step]).
async function runStep(step, body, record = undefined) {
  const r = record ?? (summary.steps[step] = {});
  try {
    await body(r);
  } catch (err) {
    check(step, false, String(err?.stack ?? err));
  }
}

const ECHO_PARAMS = { text: 'hello', n: 1, nested: { list: [1, 2.5, null, true] }, unicode: 'héllo ☃' };
const CONFIRM_PARAMS = { text: 'ok?' };

async function main() {
  let conn;
  await runStep('connect', async (r) => {
    conn = await Conn.open('main', url);
    r.protocol = conn.ws.protocol;
    check('connect', r.protocol === PROTOCOL, `protocol ${JSON.stringify(r.protocol)}`);
  });

  if (conn) {
    // 1. echo
    await runStep('echo', async (r) => {
      const reply = await conn.request('1', 'echo', ECHO_PARAMS);
      r.reply = reply;
      check('echo', reply.id === '1', `id ${JSON.stringify(reply.id)}`);
      check('echo', deepEqual(reply.result, ECHO_PARAMS), `result ${JSON.stringify(reply.result)}`);
    });

    // 2. heartbeat
    await runStep('heartbeat', async (r) => {
      const { reply, ms } = await conn.heartbeat('h1');
      r.reply = reply;
      r.ms = ms;
      check('heartbeat', deepEqual(reply, { jsonrpc: '2.0', id: 'h1', result: {} }), `reply ${JSON.stringify(reply)}`);
    });

    // 3. callback: the upstream asks this client `ui.confirm`.
    await runStep('callback', async (r) => {
      conn.handlers.set('ui.confirm', async (params, msg) => {
        r.server_request = msg;
        // A browser keeps heartbeating while a server request is pending.
        try {
          const { reply, ms } = await conn.heartbeat('h2');
          r.heartbeat_during = { reply, ms };
        } catch (err) {
          r.heartbeat_during = { error: String(err?.message ?? err) };
        }
        return { confirmed: true };
      });
      const reply = await conn.request('2', 'callback', { method: 'ui.confirm', params: CONFIRM_PARAMS }, CALLBACK_TIMEOUT_MS);
      r.reply = reply;
      const ask = r.server_request;
      if (check('callback', ask !== undefined, 'no server-initiated ui.confirm request arrived')) {
        check('callback', typeof ask.id === 'string' && ask.id.startsWith('s'), `server request id ${JSON.stringify(ask.id)}`);
        check('callback', ask.method === 'ui.confirm', `server request method ${JSON.stringify(ask.method)}`);
        check('callback', deepEqual(ask.params, CONFIRM_PARAMS), `server request params ${JSON.stringify(ask.params)}`);
      }
      const hb = r.heartbeat_during;
      check('callback', hb?.reply !== undefined && deepEqual(hb.reply, { jsonrpc: '2.0', id: 'h2', result: {} }),
        `heartbeat while a server request was pending: ${JSON.stringify(hb)}`);
      check('callback', reply.id === '2', `id ${JSON.stringify(reply.id)}`);
      check('callback', deepEqual(reply.result, { reply: { confirmed: true } }), `result ${JSON.stringify(reply.result ?? reply.error)}`);
    });

    summary.steps.main = {
      server_requests: conn.serverRequests,
      frames_received: conn.received.length,
    };
    await conn.close();
  }

  // 4. protocol errors that close the connection.
  const closers = [
    ['malformed_json', '{nope', false],
    ['binary', Buffer.from('{"jsonrpc":"2.0","id":"9","method":"echo","params":{}}'), true],
    ['invalid_envelope_no_id', '{"jsonrpc":"2.0","id":5,"method":"echo"}', false],
  ];
  summary.closes = {};
  for (const [name, payload, binary] of closers) {
    summary.closes[name] = {};
    await runStep(`close_${name}`, async (r) => {
      const c = await Conn.open(name, url);
      r.frames = c.received;
      c.ws.send(payload, { binary });
      Object.assign(r, await c.waitClosed(), { frames: c.received });
      check(`close_${name}`, c.received.length === 0, `frames before the close: ${JSON.stringify(c.received)}`);
    }, summary.closes[name]);
  }
  const expected = {
    malformed_json: [1002, 'malformed JSON'],
    binary: [1003, 'binary frames are not supported'],
    invalid_envelope_no_id: [1002, 'invalid envelope: id must be a non-empty string'],
  };
  for (const [name, [code, reason]] of Object.entries(expected)) {
    const got = summary.closes[name] ?? {};
    check(`close_${name}`, got.code === code && got.reason === reason && got.closed_by === 'server',
      `expected the server to close ${code} ${JSON.stringify(reason)}, got ${JSON.stringify(got)}`);
  }

  // 5. an invalid envelope with a usable id is answered; the connection stays.
  await runStep('invalid_with_id', async (r) => {
    const c = await Conn.open('invalid_with_id', url);
    r.reply = await c.expectReply('7', '{"jsonrpc":"2.0","id":"7","method":"echo","extra":1}', 'invalid envelope id 7');
    check('invalid_with_id', r.reply.id === '7', `id ${JSON.stringify(r.reply.id)}`);
    check('invalid_with_id', r.reply.error?.code === -32600, `reply ${JSON.stringify(r.reply)}`);
    r.open_after = c.ws.readyState === WebSocket.OPEN;
    check('invalid_with_id', r.open_after, `readyState ${c.ws.readyState} after the error reply`);
    const echo = await c.request('8', 'echo', { still: 'open' });
    r.echo_after = echo;
    check('invalid_with_id', echo.id === '8' && deepEqual(echo.result, { still: 'open' }), `echo after: ${JSON.stringify(echo)}`);
    r.frames = c.received;
    await c.close();
  });

  check('frames', summary.violations.length === 0, `${summary.violations.length} frame(s) broke the HolonClient rules`);
  check('frames', summary.unexpected.length === 0, `unexpected events: ${JSON.stringify(summary.unexpected)}`);
  finish(summary.failures.length === 0 ? 0 : 1);
}

main().catch((err) => {
  summary.failures.push({ step: 'main', message: String(err?.stack ?? err) });
  finish(1);
});
