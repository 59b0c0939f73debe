// An independent Sideband client, driven by tests/sideband_node_client.rs.
//
// It uses only the `ws` package and its OWN tiny SBP codec, written from
// shared/protocols/sideband.md §2 (frame layout), §3 (handshake) and §6
// (JSON v1 envelopes), not from switchyard's code:
//
//   offset 0  kind u8 (0 Control, 1 Message, 2 Ack, 3 Error)
//   offset 1  flags u8 (bit 0: timestamp present; bits 1-7 must be 0)
//   offset 2  frameId, 16 bytes
//   offset 18 ts int64 LE, only with flag bit 0
//   then the payload, to the end of the message:
//     Control  op u8 (0 Handshake, 1 Ping, 2 Pong, 3 Close) + data
//     Message  subjectLen u32 LE + subject (UTF-8) + data
//     Ack      16-byte frameId
//     Error    code u16 LE + msgLen u32 LE + message (UTF-8) + details
//
// Like the reference peer SDK it offers no subprotocol and advertises no
// capabilities (so every envelope is JSON v1).
//
// Usage: node sideband_client.mjs <ws-url>
//
// Steps:
//   1. handshake: send ours at once; the gateway's must be the first frame
//      (protocol "sideband", version "1", 32-hex peerId, caps with "rpc");
//   2. `echo` as an `r` on `rpc` whose cid is its frameId → `R` with the
//      same cid in a frame with its own id, result as sent;
//   3. SBP Ping → Pong;
//   4. an event: `N` `notify_hello` on `event`, then `echo`: the reply to
//      the echo is the next frame (nothing answered the event);
//   5. on fresh connections: (a) a frame shorter than 18 bytes, (b) a
//      Message on subject `RPC`, (c) a text frame, and (d), before any
//      handshake, a Message frame; record every frame and the close.
//
// stdout: exactly one JSON object summarising every observation. The exit
// code is 0 only if every check passed; 1 if some check failed (see
// `failures`); 2 on a usage error or the global deadline.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import WebSocket from 'ws';

const STEP_TIMEOUT_MS = 10_000;
const QUIET_MS = 300;
const DEADLINE_MS = 60_000;

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
  malformed: {},
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
  summary.failures.push({ step: 'usage', message: 'usage: node sideband_client.mjs <ws-url>' });
  finish(2);
}

const deadline = setTimeout(() => {
  summary.failures.push({ step: 'deadline', message: `script exceeded ${DEADLINE_MS} ms` });
  finish(2);
}, DEADLINE_MS);
deadline.unref();

// ---------------------------------------------------------------------------
// SBP codec (sideband.md §2), little-endian.

const KIND = { CONTROL: 0, MESSAGE: 1, ACK: 2, ERROR: 3 };
const KIND_NAMES = ['control', 'message', 'ack', 'error'];
const OP = { HANDSHAKE: 0, PING: 1, PONG: 2, CLOSE: 3 };
const OP_NAMES = ['handshake', 'ping', 'pong', 'close'];
const HEADER = 18;

const newFrameId = () => randomBytes(16);
const hex = (buf) => Buffer.from(buf).toString('hex');

/** Encodes one frame; `ts` (ms since the epoch) is optional. */
function encodeFrame(kind, id, payload, ts = undefined) {
  const withTs = ts !== undefined;
  const head = Buffer.alloc(HEADER + (withTs ? 8 : 0));
  head.writeUInt8(kind, 0);
  head.writeUInt8(withTs ? 1 : 0, 1);
  Buffer.from(id).copy(head, 2);
  if (withTs) head.writeBigInt64LE(BigInt(ts), HEADER);
  return Buffer.concat([head, payload]);
}

function controlFrame(op, data = Buffer.alloc(0), id = newFrameId()) {
  return encodeFrame(KIND.CONTROL, id, Buffer.concat([Buffer.from([op]), data]));
}

function messageFrame(subject, data, id = newFrameId()) {
  const subjectBytes = Buffer.from(subject, 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(subjectBytes.length, 0);
  return encodeFrame(KIND.MESSAGE, id, Buffer.concat([len, subjectBytes, data]));
}

class FrameError extends Error {}

/** Decodes one frame; throws FrameError with the reference message. */
function decodeFrame(buf) {
  if (buf.length < HEADER) throw new FrameError('Invalid frame: too short');
  const kind = buf.readUInt8(0);
  const flags = buf.readUInt8(1);
  const id = buf.subarray(2, HEADER);
  if (flags & 0xfe) throw new FrameError('Invalid frame: reserved flag bits must be zero');
  let offset = HEADER;
  let ts = null;
  if (flags & 1) {
    if (buf.length < HEADER + 8) throw new FrameError('Invalid frame: incomplete timestamp');
    ts = Number(buf.readBigInt64LE(HEADER));
    offset += 8;
  }
  const payload = buf.subarray(offset);
  const frame = { kind: KIND_NAMES[kind], id: hex(id), flags, ts };
  switch (kind) {
    case KIND.CONTROL: {
      if (payload.length < 1) throw new FrameError('Invalid control frame: no operation');
      const op = payload.readUInt8(0);
      if (op > 3) throw new FrameError('Unknown control op');
      const data = payload.subarray(1);
      if (op === OP.HANDSHAKE && data.length === 0) throw new FrameError('Invalid handshake frame: data is required');
      if ((op === OP.PING || op === OP.PONG) && data.length > 0) {
        throw new FrameError('Invalid ping/pong frame: must not have payload');
      }
      return { ...frame, op: OP_NAMES[op], data: utf8(data) };
    }
    case KIND.MESSAGE: {
      if (payload.length < 4) throw new FrameError('Invalid message frame: no subject');
      const len = payload.readUInt32LE(0);
      if (payload.length < 4 + len) throw new FrameError('Invalid message frame: incomplete subject');
      return { ...frame, subject: utf8(payload.subarray(4, 4 + len)), data: payload.subarray(4 + len) };
    }
    case KIND.ACK:
      if (payload.length < 16) throw new FrameError('Invalid ack frame: no frame ID');
      if (payload.length > 16) throw new FrameError('Invalid ack frame: unexpected trailing data');
      return { ...frame, of: hex(payload) };
    case KIND.ERROR: {
      if (payload.length < 6) throw new FrameError('Invalid error frame: no code or message');
      const code = payload.readUInt16LE(0);
      const len = payload.readUInt32LE(2);
      if (payload.length < 6 + len) throw new FrameError('Invalid error frame: incomplete message');
      return {
        ...frame,
        code,
        message: utf8(payload.subarray(6, 6 + len)),
        details: utf8(payload.subarray(6 + len)),
      };
    }
    default:
      throw new FrameError('Unknown frame kind');
  }
}

/** Strict UTF-8 (sideband.md §10). */
function utf8(bytes) {
  return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
}

// JSON v1 envelopes (sideband.md §6).
const CID = /^[0-9a-f]{32}$/;

function parseEnvelope(data) {
  const env = JSON.parse(utf8(data));
  if (env === null || typeof env !== 'object' || Array.isArray(env)) throw new Error('envelope is not an object');
  if (!['r', 'R', 'E', 'N'].includes(env.t)) throw new Error(`unknown envelope type ${JSON.stringify(env.t)}`);
  if (env.t !== 'N' && !(typeof env.cid === 'string' && CID.test(env.cid))) {
    throw new Error(`cid must be 32 lowercase hex characters: ${JSON.stringify(env.cid)}`);
  }
  if (env.t === 'E' && !(Number.isInteger(env.code) && typeof env.message === 'string')) {
    throw new Error('E needs an integer code and a string message');
  }
  return env;
}

const envelopeBytes = (env) => Buffer.from(JSON.stringify(env), 'utf8');

// ---------------------------------------------------------------------------

function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual(a[k], b[k]));
}

function check(step, cond, message) {
  if (!cond) {
    summary.failures.push({ step, message });
    process.stderr.write(`[${step}] FAILED: ${message}\n`);
  }
  return cond;
}

async function runStep(step, record, body) {
  try {
    await body(record);
  } catch (err) {
    check(step, false, String(err?.stack ?? err));
  }
}

/** A frame as recorded in the summary (Message data as text). */
function describe(frame) {
  if (frame.kind === 'message') {
    const { data, ...rest } = frame;
    return { ...rest, data: data.toString('utf8') };
  }
  return frame;
}

/** One WebSocket connection speaking SBP. */
class Conn {
  constructor(name, ws) {
    this.name = name;
    this.ws = ws;
    this.frames = []; // every frame received, decoded (or the raw text)
    this.queue = [];
    this.waiter = null;
    this.emittedIds = new Set();
    this.closeInfo = null;
    this.closed = new Promise((resolve) => {
      ws.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString('utf8') };
        resolve(this.closeInfo);
        this.wake();
      });
    });
    ws.on('error', (err) => {
      summary.unexpected.push({ conn: name, event: 'error', message: String(err?.message ?? err) });
    });
    ws.on('message', (data, isBinary) => this.onMessage(data, isBinary));
  }

  static open(name) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url); // no subprotocol, like the reference SDK
      const timer = setTimeout(() => reject(new Error(`${name}: connect timed out`)), STEP_TIMEOUT_MS);
      ws.once('error', (err) => {
        clearTimeout(timer);
        reject(new Error(`${name}: connect failed: ${err?.message ?? err}`));
      });
      // Listen from the start: the gateway sends its handshake at once.
      const conn = new Conn(name, ws);
      ws.once('open', () => {
        clearTimeout(timer);
        resolve(conn);
      });
    });
  }

  onMessage(data, isBinary) {
    if (!isBinary) {
      const text = data.toString('utf8');
      this.frames.push({ text });
      summary.violations.push({ conn: this.name, reason: 'text frame from a Sideband peer', frame: text });
      return;
    }
    let frame;
    try {
      frame = decodeFrame(data);
    } catch (err) {
      if (!(err instanceof FrameError)) throw err;
      this.frames.push({ invalid: err.message, hex: hex(data) });
      summary.violations.push({ conn: this.name, reason: err.message, frame: hex(data) });
      return;
    }
    this.frames.push(describe(frame));
    // Every frame the gateway emits has a fresh id, except an ErrorFrame
    // about one inbound frame, which carries that frame's id (§10).
    if (frame.kind !== 'error') {
      if (this.emittedIds.has(frame.id)) {
        summary.violations.push({ conn: this.name, reason: 'frameId reused', frame: describe(frame) });
      }
      this.emittedIds.add(frame.id);
    }
    if (frame.ts !== null) {
      summary.violations.push({ conn: this.name, reason: 'unexpected timestamp', frame: describe(frame) });
    }
    this.queue.push(frame);
    this.wake();
  }

  wake() {
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w();
    }
  }

  /** The next frame; throws on close or timeout. */
  async next(what, timeoutMs = STEP_TIMEOUT_MS) {
    const until = Date.now() + timeoutMs;
    for (;;) {
      if (this.queue.length > 0) return this.queue.shift();
      if (this.closeInfo) throw new Error(`${this.name}: closed ${JSON.stringify(this.closeInfo)} while waiting for ${what}`);
      const left = until - Date.now();
      if (left <= 0) throw new Error(`${this.name}: timed out waiting for ${what}`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /** Frames that arrive within `ms` (none expected). */
  async quiet(ms = QUIET_MS) {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return this.queue.splice(0).map(describe);
  }

  send(bytes) {
    this.ws.send(bytes, { binary: true });
  }

  /** Sends our handshake and reads the gateway's (the first frame). */
  async handshake(record) {
    const sent = { protocol: 'sideband', version: '1', peerId: hex(newFrameId()), caps: [], metadata: {} };
    this.send(controlFrame(OP.HANDSHAKE, Buffer.from(JSON.stringify(sent), 'utf8')));
    const first = await this.next('the gateway handshake');
    if (record) {
      record.sent = sent;
      record.first_frame = { kind: first.kind, op: first.op ?? null };
    }
    if (!check(`${this.name}:handshake`, first.kind === 'control' && first.op === 'handshake',
      `first frame is not a handshake: ${JSON.stringify(describe(first))}`)) {
      throw new Error('no handshake');
    }
    const hello = JSON.parse(first.data);
    this.peerId = hello.peerId;
    return hello;
  }

  /** Sends an `r` whose cid is its frameId; resolves with the reply frame and envelope. */
  async call(method, params) {
    const id = newFrameId();
    const cid = hex(id);
    const env = { t: 'r', m: method, cid, p: params };
    this.send(messageFrame('rpc', envelopeBytes(env), id));
    const frame = await this.next(`the reply to ${method}`);
    if (frame.kind !== 'message') throw new Error(`expected the reply to ${method}, got ${JSON.stringify(describe(frame))}`);
    const reply = parseEnvelope(frame.data);
    return { cid, frame, reply };
  }

  waitClosed(timeoutMs = STEP_TIMEOUT_MS) {
    return Promise.race([
      this.closed,
      new Promise((_, reject) => setTimeout(() => reject(new Error(`${this.name}: no close within ${timeoutMs} ms`)), timeoutMs)),
    ]);
  }

  async close() {
    if (this.ws.readyState === WebSocket.OPEN) {
      // Graceful: Control Close, then WebSocket 1000 (sideband.md §10).
      this.send(controlFrame(OP.CLOSE, Buffer.from('disconnect', 'utf8')));
      this.ws.close(1000, 'disconnect');
    }
    try {
      await this.waitClosed(5_000);
    } catch {
      this.ws.terminate();
    }
  }
}

const ECHO_PARAMS = { text: 'hello', n: 1, big: 12345, nested: { list: [1, 2.5, null, true] }, unicode: 'héllo ☃' };

function checkHandshake(step, hello) {
  check(step, hello.protocol === 'sideband', `protocol ${JSON.stringify(hello.protocol)}`);
  check(step, hello.version === '1', `version ${JSON.stringify(hello.version)}`);
  check(step, typeof hello.peerId === 'string' && CID.test(hello.peerId), `peerId ${JSON.stringify(hello.peerId)}`);
  check(step, Array.isArray(hello.caps) && hello.caps.includes('rpc'), `caps ${JSON.stringify(hello.caps)}`);
  check(step, hello.metadata !== null && typeof hello.metadata === 'object' && !Array.isArray(hello.metadata),
    `metadata ${JSON.stringify(hello.metadata)}`);
}

async function main() {
  const peerIds = [];
  let conn;

  // 1. handshake
  await runStep('handshake', (summary.steps.handshake = {}), async (r) => {
    conn = await Conn.open('main');
    r.subprotocol = conn.ws.protocol;
    const hello = await conn.handshake(r);
    r.received = hello;
    peerIds.push(hello.peerId);
    checkHandshake('handshake', hello);
  });

  if (conn && !conn.closeInfo) {
    // 2. echo
    await runStep('echo', (summary.steps.echo = {}), async (r) => {
      const { cid, frame, reply } = await conn.call('echo', ECHO_PARAMS);
      r.cid = cid;
      r.subject = frame.subject;
      r.frame_id_is_fresh = frame.id !== cid;
      r.reply = reply;
      check('echo', frame.subject === 'rpc', `subject ${JSON.stringify(frame.subject)}`);
      check('echo', reply.t === 'R' && reply.cid === cid, `reply ${JSON.stringify(reply)}`);
      check('echo', deepEqual(reply.result, ECHO_PARAMS), `result ${JSON.stringify(reply.result)}`);
      check('echo', r.frame_id_is_fresh, 'the reply reused the request frame id');
    });

    // 3. SBP Ping → Pong
    await runStep('ping', (summary.steps.ping = {}), async (r) => {
      conn.send(controlFrame(OP.PING));
      const pong = await conn.next('a pong');
      r.reply = { kind: pong.kind, op: pong.op ?? null };
      check('ping', pong.kind === 'control' && pong.op === 'pong', `got ${JSON.stringify(describe(pong))}`);
    });

    // 4. an event, then a call: nothing answers the event.
    await runStep('event', (summary.steps.event = {}), async (r) => {
      const event = { t: 'N', e: 'notify_hello', d: { x: 7 } };
      conn.send(messageFrame('event', envelopeBytes(event)));
      r.sent = event;
      r.quiet = await conn.quiet();
      const { cid, reply } = await conn.call('echo', { after: 'event' });
      r.reply_after = reply;
      check('event', r.quiet.length === 0, `frames after the event: ${JSON.stringify(r.quiet)}`);
      check('event', reply.t === 'R' && reply.cid === cid && deepEqual(reply.result, { after: 'event' }),
        `reply after the event: ${JSON.stringify(reply)}`);
    });

    summary.steps.main = { frames_received: conn.frames.length, unread: await conn.quiet(50) };
    await conn.close();
    summary.steps.main.close = conn.closeInfo;
  }

  // 5. malformed frames, each on a fresh connection.
  // (a) shorter than the 18-byte header: fatal.
  await runStep('too_short', (summary.malformed.too_short = {}), async (r) => {
    const c = await Conn.open('too_short');
    peerIds.push((await c.handshake()).peerId);
    const before = c.frames.length;
    c.send(Buffer.from([1, 0, 1, 2, 3, 4, 5, 6, 7, 8]));
    r.close = await c.waitClosed();
    r.frames = c.frames.slice(before);
  });

  // (b) a Message on an invalid subject: non-fatal.
  await runStep('invalid_subject', (summary.malformed.invalid_subject = {}), async (r) => {
    const c = await Conn.open('invalid_subject');
    peerIds.push((await c.handshake()).peerId);
    const id = newFrameId();
    r.offending_id = hex(id);
    c.send(messageFrame('RPC', envelopeBytes({ t: 'r', m: 'echo', cid: hex(id), p: {} }), id));
    const error = await c.next('the ErrorFrame');
    r.frames = [describe(error)];
    r.quiet = await c.quiet();
    r.open_after = c.ws.readyState === WebSocket.OPEN;
    const { cid, reply } = await c.call('echo', { still: 'open' });
    r.echo_after = reply;
    check('invalid_subject', reply.cid === cid, `echo after: ${JSON.stringify(reply)}`);
    await c.close();
  });

  // (c) a text frame: close 1003.
  await runStep('text_frame', (summary.malformed.text_frame = {}), async (r) => {
    const c = await Conn.open('text_frame');
    peerIds.push((await c.handshake()).peerId);
    const before = c.frames.length;
    c.ws.send('{"t":"r","m":"echo","cid":"00000000000000000000000000000000"}');
    r.close = await c.waitClosed();
    r.frames = c.frames.slice(before);
  });

  // (d) a first frame that is not a handshake: negotiation fails.
  await runStep('not_handshake_first', (summary.malformed.not_handshake_first = {}), async (r) => {
    const c = await Conn.open('not_handshake_first');
    const id = newFrameId();
    r.offending_id = hex(id);
    c.send(messageFrame('rpc', envelopeBytes({ t: 'r', m: 'echo', cid: hex(id), p: {} }), id));
    r.close = await c.waitClosed();
    r.frames = c.frames.map((f) => (f.op === 'handshake' ? { kind: f.kind, op: f.op } : f));
  });

  summary.peer_ids = peerIds;
  check('peer_ids', new Set(peerIds).size === peerIds.length, `peerIds repeat: ${JSON.stringify(peerIds)}`);

  // The expected observations (the Rust test asserts them again).
  const expectFatal = (name, code, message, closeCode, closeReason) => {
    const got = summary.malformed[name] ?? {};
    const frames = got.frames ?? [];
    check(name, frames.length === 1 && frames[0].kind === 'error' && frames[0].code === code && frames[0].message === message,
      `expected one ErrorFrame ${code} ${JSON.stringify(message)}, got ${JSON.stringify(frames)}`);
    check(name, got.close?.code === closeCode && got.close?.reason === closeReason,
      `expected close ${closeCode} ${JSON.stringify(closeReason)}, got ${JSON.stringify(got.close)}`);
  };
  expectFatal('too_short', 1002, 'Invalid frame: too short', 1002, 'invalid frame');
  const sub = summary.malformed.invalid_subject ?? {};
  check('invalid_subject', sub.frames?.[0]?.kind === 'error' && sub.frames[0].code === 1002
    && sub.frames[0].message === 'Invalid subject namespace' && sub.frames[0].id === sub.offending_id,
  `expected ErrorFrame 1002 "Invalid subject namespace" with the offending id, got ${JSON.stringify(sub.frames)}`);
  check('invalid_subject', sub.open_after === true && (sub.quiet ?? []).length === 0, `after: ${JSON.stringify(sub)}`);
  const text = summary.malformed.text_frame ?? {};
  check('text_frame', text.close?.code === 1003 && (text.frames ?? []).length === 0, `got ${JSON.stringify(text)}`);
  const first = summary.malformed.not_handshake_first ?? {};
  const ff = first.frames ?? [];
  check('not_handshake_first', ff.length === 2 && ff[0].op === 'handshake' && ff[1].kind === 'error' && ff[1].code === 1000,
    `expected the gateway handshake then ErrorFrame 1000, got ${JSON.stringify(ff)}`);
  check('not_handshake_first', first.close?.code === 1000 && first.close?.reason === 'negotiation_failed',
    `got close ${JSON.stringify(first.close)}`);

  check('frames', summary.violations.length === 0, `${summary.violations.length} frame(s) broke the SBP rules`);
  check('frames', summary.unexpected.length === 0, `unexpected events: ${JSON.stringify(summary.unexpected)}`);
  finish(summary.failures.length === 0 ? 0 : 1);
}

main().catch((err) => {
  summary.failures.push({ step: 'main', message: String(err?.stack ?? err) });
  finish(1);
});
