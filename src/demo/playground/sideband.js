// Sideband (SBP) framing for the playground, written from
// shared/protocols/sideband.md: §2 frame layout, §3 handshake, §6 JSON v1
// envelopes. One frame per WebSocket binary message, little-endian:
//
//   offset 0  kind u8 (0 Control, 1 Message, 2 Ack, 3 Error)
//   offset 1  flags u8 (bit 0: timestamp present; bits 1-7 must be 0)
//   offset 2  frameId, 16 bytes
//   offset 18 ts int64, only with flag bit 0
//   then the payload, to the end of the message:
//     Control  op u8 (0 Handshake, 1 Ping, 2 Pong, 3 Close) + data
//     Message  subjectLen u32 + subject (UTF-8) + data
//     Ack      16-byte frameId
//     Error    code u16 + msgLen u32 + message (UTF-8) + details
//
// The page advertises no CBOR capability, so every envelope is JSON.

export const KIND = { CONTROL: 0, MESSAGE: 1, ACK: 2, ERROR: 3 };
export const OP = { HANDSHAKE: 0, PING: 1, PONG: 2, CLOSE: 3 };
const KIND_NAMES = ['Control', 'Message', 'Ack', 'Error'];
const OP_NAMES = ['Handshake', 'Ping', 'Pong', 'Close'];
const HEADER = 18;

const encoder = new TextEncoder();
const strict = new TextDecoder('utf-8', { fatal: true });

/** 16 random bytes from the browser's CSPRNG. */
export function newFrameId() {
  return crypto.getRandomValues(new Uint8Array(16));
}

/** Lowercase hex of bytes (a cid is the hex of a frameId). */
export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** One frame, without timestamp. */
export function encodeFrame(kind, id, payload) {
  const out = new Uint8Array(HEADER + payload.length);
  out[0] = kind;
  out[1] = 0;
  out.set(id, 2);
  out.set(payload, HEADER);
  return out;
}

/** A Control frame: op + data. */
export function controlFrame(op, data = new Uint8Array(0), id = newFrameId()) {
  const payload = new Uint8Array(1 + data.length);
  payload[0] = op;
  payload.set(data, 1);
  return encodeFrame(KIND.CONTROL, id, payload);
}

/** A Message frame: subjectLen u32 LE + subject + data. */
export function messageFrame(subject, data, id = newFrameId()) {
  const subj = encoder.encode(subject);
  const payload = new Uint8Array(4 + subj.length + data.length);
  new DataView(payload.buffer).setUint32(0, subj.length, true);
  payload.set(subj, 4);
  payload.set(data, 4 + subj.length);
  return encodeFrame(KIND.MESSAGE, id, payload);
}

/** Our handshake (§3): a fresh 32-hex peerId, no capabilities. */
export function handshakeFrame() {
  const hello = {
    protocol: 'sideband',
    version: '1',
    peerId: hex(newFrameId()),
    caps: [],
    metadata: {},
  };
  return controlFrame(OP.HANDSHAKE, encoder.encode(JSON.stringify(hello)));
}

/** An `r` envelope on `rpc` whose cid is its own frameId (§6). */
export function requestFrame(method, params) {
  const id = newFrameId();
  const env = { t: 'r', m: method, cid: hex(id) };
  if (params !== undefined) env.p = params;
  return { bytes: messageFrame('rpc', encoder.encode(JSON.stringify(env)), id), cid: env.cid, env };
}

/** Decodes one frame; throws Error with the reference message (§2). */
export function decodeFrame(buf) {
  const bytes = new Uint8Array(buf);
  if (bytes.length < HEADER) throw new Error('Invalid frame: too short');
  const kind = bytes[0];
  const flags = bytes[1];
  if (flags & 0xfe) throw new Error('Invalid frame: reserved flag bits must be zero');
  let offset = HEADER;
  if (flags & 1) {
    if (bytes.length < HEADER + 8) throw new Error('Invalid frame: incomplete timestamp');
    offset += 8;
  }
  const frame = { kind: KIND_NAMES[kind], id: hex(bytes.subarray(2, HEADER)), size: bytes.length };
  const payload = bytes.subarray(offset);
  const pv = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
  switch (kind) {
    case KIND.CONTROL: {
      if (payload.length < 1) throw new Error('Invalid control frame: no operation');
      if (payload[0] > 3) throw new Error('Unknown control op');
      return { ...frame, op: OP_NAMES[payload[0]], data: strict.decode(payload.subarray(1)) };
    }
    case KIND.MESSAGE: {
      if (payload.length < 4) throw new Error('Invalid message frame: no subject');
      const len = pv.getUint32(0, true);
      if (payload.length < 4 + len) throw new Error('Invalid message frame: incomplete subject');
      return {
        ...frame,
        subject: strict.decode(payload.subarray(4, 4 + len)),
        data: strict.decode(payload.subarray(4 + len)),
      };
    }
    case KIND.ACK:
      return { ...frame, of: hex(payload.subarray(0, 16)) };
    case KIND.ERROR: {
      if (payload.length < 6) throw new Error('Invalid error frame: no code or message');
      const code = pv.getUint16(0, true);
      const len = pv.getUint32(2, true);
      if (payload.length < 6 + len) throw new Error('Invalid error frame: incomplete message');
      return { ...frame, code, message: strict.decode(payload.subarray(6, 6 + len)) };
    }
    default:
      throw new Error('Unknown frame kind');
  }
}

/** One line describing a decoded frame, for the log. */
export function describe(frame) {
  const id = `id ${frame.id.slice(0, 8)}…`;
  switch (frame.kind) {
    case 'Control':
      return `[Control ${frame.op} · ${id}]${frame.data ? ` ${frame.data}` : ''}`;
    case 'Message':
      return `[Message ${frame.subject} · ${id}] ${frame.data}`;
    case 'Error':
      return `[Error ${frame.code} · ${id}] ${frame.message}`;
    default:
      return `[${frame.kind} · ${id}]`;
  }
}

/** The first bytes of a frame in hex: kind, flags, frameId, payload head. */
export function headHex(bytes, max = 30) {
  const b = new Uint8Array(bytes);
  const shown = hex(b.subarray(0, max)).replace(/(..)/g, '$1 ').trim();
  return b.length > max ? `${shown} … (${b.length} bytes)` : `${shown} (${b.length} bytes)`;
}
