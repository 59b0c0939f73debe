#!/usr/bin/env python3
"""Writes the seed corpora (fuzz/seeds/<target>/) from the protocol notes'
examples and test vectors, copied here so the repo stands alone.

    python3 fuzz/seeds.py

The files are committed; run this again only after changing the lists.
"""
import hashlib
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))

JSONRPC = [
    '{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42,"subtrahend":23},"id":1}',
    '{"jsonrpc":"2.0","method":"update","params":[1,2,3]}',
    '{"jsonrpc":"2.0","result":19,"id":1}',
    '{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":"1"}',
    '{"jsonrpc":"2.0","method":"foobar, "params":"bar","baz]',
    '[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method"]',
    '[]',
    '[1]',
    '[1,2,3]',
    '{"jsonrpc":"2.0","method":1,"params":"bar"}',
    '{"jsonrpc":"2.0","method":"m","id":{"a":1}}',
    '{"jsonrpc":"2.1","method":"m","id":7}',
    '{"jsonrpc":"2.0","id":7}',
    '{"jsonrpc":"2.0","method":"m","params":"x","id":7}',
    '{"jsonrpc":"2.0","method":"m","params":null,"id":7}',
    '{"jsonrpc":"2.0","method":"ping"}',
    '[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method":"notify_hello","params":[7]},'
    '{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"2"},{"foo":"boo"},'
    '{"jsonrpc":"2.0","method":"foo.get","params":{"name":"myself"},"id":"5"},{"jsonrpc":"2.0","method":"get_data","id":"9"}]',
    '{"jsonrpc":"2.0","method":"rpc.subscribe","params":{"topics":["orders.>","chat.*"]},"id":3}',
    '{"jsonrpc":"2.0","method":"echo","params":{"s":"\\u00e9\\ud83d\\ude00\\n"},"id":-1.5e300}',
    '  \r\n{"jsonrpc":"2.0","method":"echo","params":{},"id":null}  ',
]

HOLON = [
    '{"jsonrpc":"2.0","id":"1","method":"pkg.Service/Method","params":{"x":1}}',
    '{"jsonrpc":"2.0","id":"1","result":{"ok":true}}',
    '{"jsonrpc":"2.0","id":"1","error":{"code":12,"message":"method not registered"}}',
    '{"jsonrpc":"2.0","id":"h1","method":"rpc.heartbeat","params":{}}',
    '{"jsonrpc":"2.0","id":"s1"}',
    '{"jsonrpc":"2.0","id":"s1","result":{}}',
    '{"jsonrpc":"2.0","id":"1","method":"m","params":null}',
    '{"jsonrpc":"2.0","id":1,"method":"m","params":{}}',
    '{"jsonrpc":"2.0","method":"m","params":[1]}',
    '{"jsonrpc":"2.0","id":"1","method":"m","extra":true}',
]

UPSTREAM = [
    '{"jsonrpc":"2.0","result":19,"id":1}',
    '{"jsonrpc":"2.0","error":{"code":-32602,"message":"invalid request: json: cannot unmarshal"},"id":null}',
    '{"jsonrpc":"2.0","result":{"subscription_id":"20250715120000-0123456789abcdef","message":"Subscription established. Waiting for events..."},"id":null}',
    '{"jsonrpc":"2.0","result":{"event":{"type":"new_approval","timestamp":"2025-07-15T12:00:00.123456789-07:00","data":{"approval_id":"a","session_id":"s","tool_name":"Bash"}}},"id":null}',
    '{"jsonrpc":"2.0","result":{"message":"Connection alive","type":"heartbeat"},"id":null}',
    '{"jsonrpc":"2.0","method":"event","params":{"x":1}}',
    '{"jsonrpc":"2.0","method":"ask","params":{},"id":"s1"}',
    '{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}',
]

# sideband.md §9: frames (P*, C*, negative N*/L1).
FRAMES = {
    "P1": "0000000102030405060708090a0b0c0d0e0f007b2270726f746f636f6c223a227369646562616e64222c2276657273696f6e223a2231222c22706565724964223a22706565722d61222c2263617073223a5b5d2c226d65746164617461223a7b7d7d",
    "P3": "0000000102030405060708090a0b0c0d0e0f01",
    "P4": "0001000102030405060708090a0b0c0d0e0f0068e5cf8b01000001",
    "P7": "0000202122232425262728292a2b2c2d2e2f03627965",
    "P8": "0100202122232425262728292a2b2c2d2e2f030000007270637b2274223a2272222c226d223a226563686f222c22636964223a223230323132323233323432353236323732383239326132623263326432653266222c2270223a7b2274657874223a226869227d7d",
    "P9": "0100303132333435363738393a3b3c3d3e3f030000007270637b2274223a2252222c22636964223a223230323132323233323432353236323732383239326132623263326432653266222c22726573756c74223a7b2274657874223a226869227d7d",
    "P11": "0100404142434445464748494a4b4c4d4e4f030000007270637b2274223a2245222c22636964223a223230323132323233323432353236323732383239326132623263326432653266222c22636f6465223a313130312c226d657373616765223a224d6574686f64206e6f7420666f756e643a206563686f227d",
    "P12": "0100505152535455565758595a5b5c5d5e5f050000006576656e747b2274223a224e222c2265223a22757365722e6a6f696e6564222c2264223a7b226964223a317d7d",
    "P15": "0200101112131415161718191a1b1c1d1e1f000102030405060708090a0b0c0d0e0f",
    "P16": "0300202122232425262728292a2b2c2d2e2fea0319000000496e76616c6964207375626a656374206e616d657370616365",
    "P17": "0300202122232425262728292a2b2c2d2e2feb031b000000556e737570706f7274656420666561747572653a2073747265616d7b7d",
    "C1": "0100202122232425262728292a2b2c2d2e2f03000000727063a461746172616d646563686f6363696450202122232425262728292a2b2c2d2e2f6170a16474657874626869",
    "C2": "0100303132333435363738393a3b3c3d3e3f03000000727063a3617461526363696450202122232425262728292a2b2c2d2e2f66726573756c74a16474657874626869",
    "C3": "0100404142434445464748494a4b4c4d4e4f03000000727063a4617461456363696450202122232425262728292a2b2c2d2e2f64636f646519044d676d657373616765764d6574686f64206e6f7420666f756e643a206563686f",
    "C4": "0100505152535455565758595a5b5c5d5e5f050000006576656e74a36174614e61656b757365722e6a6f696e65646164a162696401",
    "N3": "0002000102030405060708090a0b0c0d0e0f01",
    "N5": "0001000102030405060708090a0b0c0d0e0f01",
    "N11": "0100000102030405060708090a0b0c0d0e0f080000007270632f6563686f",
}
CBOR_PAYLOADS = {
    "C5": "a4616e016166fb3ff000000000000063626967c2490100000000000000006173626869",
    "C6": "a161624300fffe",
}
# Message frames: type 01, 16-byte id, subject length (u32 LE), subject, data.
MESSAGE_HEADER = 2 + 16


def envelope(frame_hex):
    b = bytes.fromhex(frame_hex)
    n = int.from_bytes(b[MESSAGE_HEADER:MESSAGE_HEADER + 4], "little")
    return b[MESSAGE_HEADER + 4 + n:]


def handshake(frame_hex):
    return bytes.fromhex(frame_hex)[MESSAGE_HEADER + 1:]


TOML = [
    open(os.path.join(HERE, "..", "config", "switchyard.example.toml"), "rb").read(),
    b'[listeners.a]\ndialect = "jsonrpc-ws"\naddress = "127.0.0.1:0"\n\n[upstreams.u]\ndialect = "ndjson"\nsocket = "/tmp/u.sock"\n\n[[routes]]\nlistener = "a"\nupstream = "u"\n',
    b'[listeners.a]\ndialect = "bogus"\nadress = 1\n',
]

PAYLOADS_JSON = [
    '{"n":1,"f":1.0,"big":18446744073709551616,"s":"hi"}',
    '[-18446744073709551616,18446744073709551615,-0,0.1,1e300,-1.5e-300]',
    '{"a":{"b":[true,false,null,"\\u0000"]},"a":2}',
    '"\\ud83d\\ude00"',
]


def write(target, items):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    for item in items:
        data = item.encode() if isinstance(item, str) else item
        name = hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def main():
    shutil.rmtree(os.path.join(HERE, "seeds"), ignore_errors=True)
    frames = [bytes.fromhex(h) for h in FRAMES.values()]
    json_envs = [envelope(FRAMES[k]) for k in ("P8", "P9", "P11", "P12")]
    cbor_envs = [envelope(FRAMES[k]) for k in ("C1", "C2", "C3", "C4")]
    cbor_envs += [bytes.fromhex(h) for h in CBOR_PAYLOADS.values()]
    write("jsonrpc_decode", JSONRPC)
    write("holon_decode", HOLON)
    write("ndjson_upstream_line", UPSTREAM + JSONRPC)
    write("sideband_frame", frames)
    write("sideband_handshake", [handshake(FRAMES["P1"])])
    write("sideband_envelope_json", json_envs)
    write("sideband_envelope_cbor", cbor_envs)
    write("config_toml", TOML)
    write("transcode_roundtrip", PAYLOADS_JSON + [e.decode() for e in json_envs])
    write(
        "dialect_roundtrip",
        [b"\x00" + s.encode() for s in JSONRPC]
        + [b"\x01" + s.encode() for s in UPSTREAM]
        + [b"\x02" + s.encode() for s in HOLON]
        + [b"\x03" + e for e in json_envs + cbor_envs],
    )


if __name__ == "__main__":
    main()
