// An independent pub/sub client, driven by tests/pubsub.rs.
//
// It talks to a switchyard JSON-RPC WebSocket listener with the npm
// `json-rpc-2.0` package (JSONRPCServerAndClient: requests out, the
// `rpc.notification` notifications in) over the `ws` package, and runs one
// case of jsonrpc-ws.md §7.1–7.2. It only records what it sees; the Rust
// test asserts every expected value itself, so a script that stops checking
// cannot pass.
//
// Events are published by calling `push {"method":M,"params":P}` through
// the gateway: the route leads to the reference JSON-RPC WebSocket daemon
// (upstream `events`, shared mode), which sends the notification M on
// switchyard's shared connection, published as topic `events.M`. To prove
// something is NOT delivered, a case publishes a marker (`events.marker`,
// data {"marker":N}) afterwards and waits for it: everything published
// before it travels the same ordered connection, so an unwanted event would
// have arrived first.
//
// Usage: node pubsub_client.mjs <ws-url> <case>
//   case: wildcards | invalid | idempotence | batch | once | cleanup | cap
//
// stdout, one JSON object a line:
//   {"checkpoint":NAME}  the case waits for one line on stdin before going
//                        on (the Rust test scrapes /metrics meanwhile);
//   {"summary":{…}}      last: every observation.
// Exit code 0 when the case ran to its end, 1 when a step failed (see
// `failures`), 2 on a usage error or the global deadline.

import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import WebSocket from 'ws';
import { JSONRPCClient, JSONRPCServer, JSONRPCServerAndClient } from 'json-rpc-2.0';

const CONNECT_TIMEOUT_MS = 10_000;
const CALL_TIMEOUT_MS = 20_000;
const EVENT_TIMEOUT_MS = 20_000;
const DEADLINE_MS = 100_000;

const [url, caseName] = process.argv.slice(2);
const summary = {
  ok: false,
  case: caseName ?? null,
  node: process.version,
  ws: version('ws'),
  json_rpc_2_0: version('json-rpc-2.0'),
  failures: [],
  unexpected: [],
  calls: {},
  notes: {},
  handled: {},
  frames: {},
  closes: {},
};

function version(pkg) {
  try {
    const path = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
    return JSON.parse(readFileSync(path, 'utf8')).version;
  } catch {
    return null;
  }
}

function finish(code) {
  process.stdout.write(`${JSON.stringify({ summary })}\n`, () => process.exit(code));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One line of stdin per checkpoint.
const stdin = createInterface({ input: process.stdin });
const lines = [];
let lineWaiter = null;
stdin.on('line', (line) => {
  if (lineWaiter) {
    const resolve = lineWaiter;
    lineWaiter = null;
    resolve(line);
  } else {
    lines.push(line);
  }
});

async function checkpoint(name) {
  process.stdout.write(`${JSON.stringify({ checkpoint: name })}\n`);
  if (lines.length > 0) return lines.shift();
  return new Promise((resolve) => {
    lineWaiter = resolve;
  });
}

/// One connection: a json-rpc-2.0 server-and-client over a ws socket.
class Peer {
  constructor(name) {
    this.name = name;
    this.nextId = 1;
    this.notes = [];
    this.waiters = [];
    summary.notes[name] = this.notes;
    summary.frames[name] = [];
  }

  async open() {
    this.ws = new WebSocket(url);
    const server = new JSONRPCServer();
    // json-rpc-2.0 dispatches the notification; the arrival order is
    // recorded in the message handler, before any promise runs.
    summary.handled[this.name] = 0;
    server.addMethod('rpc.notification', () => {
      summary.handled[this.name] += 1;
    });
    const client = new JSONRPCClient((payload) => {
      this.ws.send(JSON.stringify(payload));
    });
    this.rpc = new JSONRPCServerAndClient(server, client);
    this.ws.on('message', (data, isBinary) => {
      const text = data.toString();
      let msg;
      try {
        msg = JSON.parse(text);
      } catch {
        summary.unexpected.push({ peer: this.name, text, binary: isBinary });
        return;
      }
      const isResponse = msg && !Array.isArray(msg) && !('method' in msg);
      if (msg?.method === 'rpc.notification') {
        this.notes.push({ topic: msg.params?.topic, data: msg.params?.data });
        // The first frames verbatim, for the exact shape.
        if (summary.frames[this.name].length < 3) summary.frames[this.name].push(text);
        this.wake();
      } else if (!isResponse) {
        summary.unexpected.push({ peer: this.name, text });
        return;
      }
      this.rpc.receiveAndSend(msg).catch((e) => {
        summary.unexpected.push({ peer: this.name, text, error: String(e) });
      });
    });
    this.closed = new Promise((resolve) => {
      this.ws.on('close', (code, reason) => {
        summary.closes[this.name] = { code, reason: reason.toString() };
        this.rpc.rejectAllPendingRequests(`connection closed (${code})`);
        resolve(code);
      });
    });
    this.ws.on('error', (e) => {
      summary.unexpected.push({ peer: this.name, error: String(e) });
    });
    await withTimeout(
      new Promise((resolve, reject) => {
        this.ws.once('open', resolve);
        this.ws.once('error', reject);
      }),
      CONNECT_TIMEOUT_MS,
      `${this.name}: connect`,
    );
    return this;
  }

  /// Calls `method`; records and returns the whole response object
  /// (`result` or `error` with code, message and data as received).
  async call(label, method, params) {
    const request = { jsonrpc: '2.0', id: `${this.name}-${this.nextId++}`, method };
    if (params !== undefined) request.params = params;
    const response = await withTimeout(
      this.rpc.requestAdvanced(request),
      CALL_TIMEOUT_MS,
      `${this.name}: ${method}`,
    );
    const { jsonrpc: _v, id: _id, ...rest } = response;
    if (label) summary.calls[label] = rest;
    return rest;
  }

  async subscribe(label, topic) {
    return this.call(label, 'rpc.subscribe', { topic });
  }

  wake() {
    for (const w of this.waiters.splice(0)) w();
  }

  /// Waits until a notification satisfies `pred`.
  async waitFor(pred, what) {
    const start = Date.now();
    while (!this.notes.some(pred)) {
      if (Date.now() - start > EVENT_TIMEOUT_MS) {
        throw new Error(`${this.name}: no ${what} within ${EVENT_TIMEOUT_MS} ms`);
      }
      await new Promise((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 200);
      });
    }
  }

  async waitMarker(n) {
    await this.waitFor(
      (note) => note.topic === 'events.marker' && note.data?.marker === n,
      `marker ${n}`,
    );
  }
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    Promise.resolve(promise).finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms);
    }),
  ]);
}

/// Publishes `events.<method>` with `data` through the daemon's `push`.
async function publish(pub, method, data) {
  const reply = await pub.call(null, 'push', { method, params: data });
  if (JSON.stringify(reply) !== JSON.stringify({ result: { pushed: true } })) {
    throw new Error(`push ${method}: ${JSON.stringify(reply)}`);
  }
}

/// Publishes marker `n` and waits until every peer in `peers` has it.
async function marker(pub, n, peers) {
  await publish(pub, 'marker', { marker: n });
  await Promise.all(peers.map((p) => p.waitMarker(n)));
}

async function peers(...names) {
  return Promise.all(names.map((n) => new Peer(n).open()));
}

// === cases ===

const cases = {
  // §7.1: `*` one token, `>` one or more trailing tokens, `orders.>` does
  // not match `orders`; the notification's topic is the concrete one.
  async wildcards() {
    const [pub, star, gt, mid, exact, deep, all] = await peers(
      'pub', 'star', 'gt', 'mid', 'exact', 'deep', 'all',
    );
    const patterns = {
      star: 'events.orders.*',
      gt: 'events.orders.>',
      mid: 'events.*.created',
      exact: 'events.orders',
      deep: 'events.*.>',
      all: '>',
    };
    for (const p of [star, gt, mid, exact, deep, all]) {
      await p.subscribe(`subscribe ${p.name}`, patterns[p.name]);
      if (p.name !== 'all') await p.subscribe(`marker ${p.name}`, 'events.marker');
    }
    let i = 0;
    for (const method of ['orders.created', 'orders.eu.created', 'orders', 'users.created', 'ordersx.created']) {
      await publish(pub, method, { i: ++i, text: 'héllo ☃', list: [1, 2.5, null, true] });
    }
    await marker(pub, 1, [star, gt, mid, exact, deep, all]);
  },

  // §7.1: invalid topics (and params) → -32602 with a detail; valid ones,
  // wildcards included, are accepted.
  async invalid() {
    const [p] = await peers('p');
    const invalid = {
      empty: '',
      'empty token': 'a..b',
      'leading dot': '.a',
      'trailing dot': 'a.',
      'partial star': 'ord*',
      'partial star after': 'a.*b',
      'partial gt': 'a.b>',
      'gt not last': 'a.>.b',
      'gt first': '>.a',
      '257 bytes': 'x'.repeat(257),
      '258 UTF-8 bytes': 'é'.repeat(129),
    };
    for (const [label, topic] of Object.entries(invalid)) {
      await p.subscribe(`invalid ${label}`, topic);
    }
    await p.call('params number', 'rpc.subscribe', { topic: 5 });
    await p.call('params missing topic', 'rpc.subscribe', {});
    await p.call('params absent', 'rpc.subscribe', undefined);
    await p.call('params array', 'rpc.subscribe', ['a.b']);
    await p.call('unsubscribe invalid', 'rpc.unsubscribe', { topic: 'a..b' });
    await p.call('batch topics string', 'rpc.subscribe.batch', { topics: 'a.b' });
    await p.call('batch topic number', 'rpc.subscribe.batch', { topics: ['a.b', 1] });
    await p.call('batch missing topics', 'rpc.subscribe.batch', { topic: 'a.b' });
    await p.call('unsubscribe batch invalid', 'rpc.unsubscribe.batch', { topics: ['a.>.b'] });
    const valid = {
      'star then gt': 'a.*.>',
      star: '*',
      gt: '>',
      plain: 'a.b.c',
      '256 bytes': 'x'.repeat(256),
      '256 UTF-8 bytes': 'é'.repeat(128),
    };
    for (const [label, topic] of Object.entries(valid)) {
      await p.subscribe(`valid ${label}`, topic);
    }
    await p.call('unsubscribe valid', 'rpc.unsubscribe', { topic: 'a.*.>' });
  },

  // §7.2: subscribing twice is a no-op; unsubscribing is idempotent and
  // takes the pattern as subscribed.
  async idempotence() {
    const [pub, a] = await peers('pub', 'a');
    await a.subscribe('marker', 'events.marker');
    await a.subscribe('subscribe 1', 'events.x');
    await a.subscribe('subscribe 2', 'events.x');
    await publish(pub, 'x', { i: 1 });
    await marker(pub, 1, [a]);
    await a.call('unsubscribe 1', 'rpc.unsubscribe', { topic: 'events.x' });
    await a.call('unsubscribe 2', 'rpc.unsubscribe', { topic: 'events.x' });
    await a.call('unsubscribe never', 'rpc.unsubscribe', { topic: 'events.never' });
    await publish(pub, 'x', { i: 2 });
    await marker(pub, 2, [a]);
    await a.subscribe('subscribe wildcard', 'events.y.*');
    await a.call('unsubscribe concrete', 'rpc.unsubscribe', { topic: 'events.y.z' });
    await publish(pub, 'y.z', { i: 3 });
    await marker(pub, 3, [a]);
    await a.call('unsubscribe wildcard', 'rpc.unsubscribe', { topic: 'events.y.*' });
    await publish(pub, 'y.z', { i: 4 });
    await marker(pub, 4, [a]);
  },

  // §7.2: batch results in request order; one invalid topic fails the whole
  // call and changes nothing.
  async batch() {
    const [pub, a] = await peers('pub', 'a');
    await a.call('subscribe batch', 'rpc.subscribe.batch', {
      topics: ['events.b3', 'events.b1', 'events.b2.*', 'events.marker'],
    });
    for (const m of ['b1', 'b2.x', 'b3']) await publish(pub, m, { m });
    await marker(pub, 1, [a]);
    await a.call('unsubscribe batch', 'rpc.unsubscribe.batch', {
      topics: ['events.b3', 'events.b1'],
    });
    for (const m of ['b1', 'b3', 'b2.y']) await publish(pub, m, { m });
    await marker(pub, 2, [a]);
    await a.call('subscribe batch invalid', 'rpc.subscribe.batch', {
      topics: ['events.c1', 'events..bad', 'events.c2'],
    });
    await a.call('unsubscribe batch invalid', 'rpc.unsubscribe.batch', {
      topics: ['events.b2.*', 'ord*'],
    });
    for (const m of ['c1', 'c2', 'b2.z']) await publish(pub, m, { m });
    await marker(pub, 3, [a]);
  },

  // §7.2: once per connection, however many of its patterns match.
  async once() {
    const [pub, a, b] = await peers('pub', 'a', 'b');
    for (const t of ['events.o.created', 'events.o.*', 'events.*.created', 'events.>']) {
      await a.subscribe(`a ${t}`, t);
    }
    for (const t of ['events.o.created', 'events.>']) await b.subscribe(`b ${t}`, t);
    await publish(pub, 'o.created', { once: true });
    await marker(pub, 1, [a, b]);
  },

  // §7.2: subscriptions belong to the connection and go with it.
  async cleanup() {
    const [a, b] = await peers('a', 'b');
    await a.subscribe('a k1', 'events.k1');
    await a.subscribe('a k2', 'events.k2.*');
    await a.subscribe('a k1 again', 'events.k1');
    await b.call('b batch', 'rpc.subscribe.batch', { topics: ['events.k3', 'events.k4', 'events.k5'] });
    await checkpoint('subscribed');
    a.ws.close(1000, 'bye');
    await withTimeout(a.closed, CONNECT_TIMEOUT_MS, 'a: close');
    await checkpoint('a closed');
    await b.call('b unsubscribe', 'rpc.unsubscribe', { topic: 'events.k3' });
    await checkpoint('b unsubscribed');
    // Gone without a close frame.
    b.ws.terminate();
    await withTimeout(b.closed, CONNECT_TIMEOUT_MS, 'b: terminate');
    await checkpoint('b gone');
  },

  // §7.2: at most 1,000 subscriptions per connection, then -32007; a batch
  // that would pass the cap subscribes nothing.
  async cap() {
    const [pub, a] = await peers('pub', 'a');
    const topic = (n) => `events.cap.${n}`;
    const first = Array.from({ length: 998 }, (_, n) => topic(n));
    const reply = await a.call(null, 'rpc.subscribe.batch', { topics: first });
    summary.calls['batch 998'] = {
      count: reply.result?.subscribed?.length ?? null,
      in_order: JSON.stringify(reply.result?.subscribed) === JSON.stringify(first),
      error: reply.error ?? null,
    };
    await a.call('batch over cap', 'rpc.subscribe.batch', {
      topics: [topic(998), topic(999), topic(1000)],
    });
    await a.call('batch to cap', 'rpc.subscribe.batch', { topics: [topic(998), 'events.marker'] });
    await checkpoint('full');
    await a.subscribe('one past cap', topic(1001));
    await a.subscribe('existing at cap', topic(5));
    await publish(pub, 'cap.999', { n: 999 });
    await publish(pub, 'cap.998', { n: 998 });
    await publish(pub, 'cap.1001', { n: 1001 });
    await marker(pub, 1, [a]);
    await a.call('unsubscribe one', 'rpc.unsubscribe', { topic: topic(0) });
    await a.subscribe('room again', topic(1001));
    await publish(pub, 'cap.1001', { n: 1001 });
    await marker(pub, 2, [a]);
  },
};

async function main() {
  if (!url || !cases[caseName]) {
    summary.failures.push(`usage: node pubsub_client.mjs <ws-url> <${Object.keys(cases).join('|')}>`);
    finish(2);
    return;
  }
  const deadline = setTimeout(() => {
    summary.failures.push(`global deadline of ${DEADLINE_MS} ms`);
    finish(2);
  }, DEADLINE_MS);
  try {
    await cases[caseName]();
    summary.ok = true;
  } catch (e) {
    summary.failures.push(String(e?.stack ?? e));
  }
  clearTimeout(deadline);
  // Let late frames land in `unexpected` before reporting.
  await sleep(50);
  finish(summary.ok ? 0 : 1);
}

main();
