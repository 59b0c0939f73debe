// An independent client for persistent subscriptions, driven by
// tests/persist.rs (jsonrpc-ws.md §7.3).
//
// It talks to a switchyard JSON-RPC WebSocket listener with the npm
// `json-rpc-2.0` package (JSONRPCServerAndClient: requests out, the
// `rpc.notification.persistent` notifications in, dispatched to a
// registered method) over the `ws` package. It decides nothing: the Rust
// test sends one command a line on stdin and gets one JSON answer a line
// on stdout, and asserts every expected value itself.
//
// Usage: node persist_client.mjs <ws-url>
//
// Commands (stdin), answers (stdout):
//   {"op":"open","peer":P}                      → {"opened":P}
//   {"op":"call","peer":P,"method":M,"params":X} → {"reply":{result|error}}
//   {"op":"notes","peer":P,"count":N}           → {"notes":[params…],"frames":[text…]}
//       waits until P has received at least N persistent notifications
//       (since it opened) and returns all of them, in arrival order, with
//       the raw frames;
//   {"op":"close","peer":P}                     → {"closed":code}
//   {"op":"exit"}                               → exits 0
// Any failure: {"error":"…"} (the test fails on it). Exit code 2 on a
// usage error or the global deadline.

import { createInterface } from 'node:readline';
import WebSocket from 'ws';
import { JSONRPCClient, JSONRPCServer, JSONRPCServerAndClient } from 'json-rpc-2.0';

const CONNECT_TIMEOUT_MS = 10_000;
const CALL_TIMEOUT_MS = 20_000;
const NOTES_TIMEOUT_MS = 20_000;
const DEADLINE_MS = 170_000;

const [url] = process.argv.slice(2);
if (!url) {
  process.stderr.write('usage: node persist_client.mjs <ws-url>\n');
  process.exit(2);
}
setTimeout(() => {
  process.stderr.write('persist_client.mjs: global deadline\n');
  process.exit(2);
}, DEADLINE_MS).unref();

const peers = new Map();

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    Promise.resolve(promise).finally(() => clearTimeout(timer)),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: timed out after ${ms} ms`)), ms);
    }),
  ]);
}

class Peer {
  constructor(name) {
    this.name = name;
    this.nextId = 1;
    this.notes = [];
    this.frames = [];
    this.unexpected = [];
    this.waiters = [];
  }

  async open() {
    this.ws = new WebSocket(url);
    const server = new JSONRPCServer();
    // The library dispatches the notification to this method: what it
    // hands over is what a json-rpc-2.0 application would see.
    server.addMethod('rpc.notification.persistent', (params) => {
      this.notes.push(params);
      for (const w of this.waiters.splice(0)) w();
    });
    const client = new JSONRPCClient((payload) => {
      this.ws.send(JSON.stringify(payload));
    });
    this.rpc = new JSONRPCServerAndClient(server, client);
    this.ws.on('message', (data) => {
      const text = data.toString();
      let msg;
      try {
        msg = JSON.parse(text);
      } catch {
        this.unexpected.push(text);
        return;
      }
      if (msg?.method === 'rpc.notification.persistent') this.frames.push(text);
      this.rpc.receiveAndSend(msg).catch((e) => this.unexpected.push(`${text}: ${e}`));
    });
    this.closed = new Promise((resolve) => {
      this.ws.on('close', (code) => {
        this.rpc.rejectAllPendingRequests(`connection closed (${code})`);
        resolve(code);
      });
    });
    this.ws.on('error', (e) => this.unexpected.push(String(e)));
    await withTimeout(
      new Promise((resolve, reject) => {
        this.ws.once('open', resolve);
        this.ws.once('error', reject);
      }),
      CONNECT_TIMEOUT_MS,
      `${this.name}: connect`,
    );
  }

  async call(method, params) {
    const request = { jsonrpc: '2.0', id: `${this.name}-${this.nextId++}`, method };
    if (params !== undefined && params !== null) request.params = params;
    const response = await withTimeout(
      this.rpc.requestAdvanced(request),
      CALL_TIMEOUT_MS,
      `${this.name}: ${method}`,
    );
    const { jsonrpc: _v, id: _id, ...rest } = response;
    return rest;
  }

  async waitNotes(count) {
    const start = Date.now();
    while (this.notes.length < count) {
      if (Date.now() - start > NOTES_TIMEOUT_MS) {
        throw new Error(
          `${this.name}: ${this.notes.length} of ${count} notifications within ${NOTES_TIMEOUT_MS} ms: ${JSON.stringify(this.notes)}`,
        );
      }
      await new Promise((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 200);
      });
    }
    if (this.unexpected.length > 0) {
      throw new Error(`${this.name}: unexpected input ${JSON.stringify(this.unexpected)}`);
    }
    return { notes: this.notes, frames: this.frames };
  }
}

function peer(name) {
  const p = peers.get(name);
  if (!p) throw new Error(`no peer ${name}`);
  return p;
}

async function run(cmd) {
  switch (cmd.op) {
    case 'open': {
      const p = new Peer(cmd.peer);
      await p.open();
      peers.set(cmd.peer, p);
      return { opened: cmd.peer };
    }
    case 'call':
      return { reply: await peer(cmd.peer).call(cmd.method, cmd.params) };
    case 'notes':
      return peer(cmd.peer).waitNotes(cmd.count);
    case 'close': {
      const p = peer(cmd.peer);
      p.ws.close(1000, 'bye');
      const code = await withTimeout(p.closed, CONNECT_TIMEOUT_MS, `${p.name}: close`);
      peers.delete(cmd.peer);
      return { closed: code };
    }
    case 'exit':
      for (const p of peers.values()) p.ws.terminate();
      process.exit(0);
      return {};
    default:
      throw new Error(`unknown op ${cmd.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  let answer;
  try {
    answer = await run(JSON.parse(line));
  } catch (e) {
    answer = { error: String(e?.stack ?? e) };
  }
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}
