#!/usr/bin/env python3
"""Instructions per request by layer, from a callgrind profile of the
allocation bench (scripts/instructions.sh leaves one per path in
target/instructions/).

    scripts/layers.py target/instructions/in-place.out 5000

Every instruction counted is given to exactly one layer (the rows add up to
the total): by the source file its code comes from (inlined code counts
where it was written: serde_json's parser inlined into switchyard's decode
is parsing), else by the function it runs in. The rules are the LAYERS
table below, first match wins; what matches none is "other".

    scripts/layers.py PROFILE REQUESTS --functions LAYER

lists the functions (and files) that make up one layer's count.
"""
import re
import sys
from collections import defaultdict

# (layer, regex on the source file, regex on the function). A rule matches
# when its file pattern matches the code's file, or (file pattern None) its
# function pattern matches the function the code runs in. First match wins.
LAYERS = [
    # Third-party code, by where it was written.
    ("WebSocket codec (tungstenite)", r"/(tungstenite|tokio-tungstenite|axum)-[0-9.]+/", None),
    ("parsing (JSON scan, serde_json, UTF-8 checks)", r"/serde_json-[0-9.]+/src/(de|read)\.rs$", None),
    ("rendering (serde_json)", r"/serde_json-[0-9.]+/src/ser\.rs$", None),
    ("spans and log macros (tracing)", r"/(tracing|tracing-core|tracing-subscriber|tracing-opentelemetry|log|opentelemetry[a-z_-]*)-[0-9.]+/", None),
    ("in-flight caps (limits::cap, tokio Semaphore)", r"/tokio-[0-9.]+/src/sync/(batch_semaphore|semaphore)\.rs$", None),
    ("tokio (scheduler, I/O driver, timers, channels)", r"/tokio(-util)?-[0-9.]+/", None),
    # switchyard, by module. The JSON-RPC decoders' validating pass is
    # parsing, as serde_json's was.
    ("parsing (JSON scan, serde_json, UTF-8 checks)", r"src/dialect/jsonrpc/scan\.rs$", None),
    ("metrics", r"src/telemetry/metrics", None),
    ("spans and log macros (tracing)", r"src/telemetry/", None),
    ("outbox (queue, reply encoding, writer)", r"src/outbox/", None),
    ("in-flight caps (limits::cap, tokio Semaphore)", r"src/limits/cap", None),
    ("limits and method policy", r"src/limits/|src/router/policy", None),
    # A call's waiter and the slots it holds share correlator.rs with the
    # table of gateway ids: counted as admission by the function they run in
    # (their own methods, trait impls and drop glue, not the table's).
    ("upstream admission (room, slots, queue)", None, r"upstream::correlator::(Waiter|Settle|Receipt|Held|Slots)(::| as |>+$)"),
    ("upstream admission (room, slots, queue)", r"src/upstream/(admission|slots|outlet)", None),
    ("upstream link (correlator, send, read)", r"src/upstream/", None),
    ("router and in-place hand-off", r"src/router/", None),
    ("parsing and rendering (switchyard codecs)", r"src/dialect/|src/lines\.rs|src/envelope\.rs", None),
    ("session (admission of a frame, dispatch)", r"src/transport/session/", None),
    ("connection driver and WebSocket glue", r"src/transport/", None),
    # Floor M, the minimal gateway of benches/minimal/gateway.rs (the
    # allocation bench's "minimal" case): its own code, by file, and
    # library code inlined into it, by function (below).
    ("minimal gateway's own code (benches/minimal)", r"benches/minimal/", None),
    # Library code (core, alloc, std, libc, small crates): by the function
    # it runs in.
    ("WebSocket codec (tungstenite)", None, r"tungstenite|axum::extract::ws|transport::ws::incoming|^__mem(set|cpy|move).*"),
    ("parsing (JSON scan, serde_json, UTF-8 checks)", None, r"serde_json::de|serde_json::read|from_utf8|decode|upstream::ndjson::incoming|jsonrpc::scan::"),
    ("rendering (serde_json)", None, r"serde_json::ser|encode|render"),
    ("spans and log macros (tracing)", None, r"tracing|opentelemetry|telemetry::trace|Span"),
    ("metrics", None, r"telemetry::metrics|prometheus"),
    ("in-flight caps (limits::cap, tokio Semaphore)", None, r"batch_semaphore|Semaphore|limits::cap"),
    ("outbox (queue, reply encoding, writer)", None, r"outbox"),
    ("upstream admission (room, slots, queue)", None, r"upstream::(admission|slots|outlet)"),
    ("upstream link (correlator, send, read)", None, r"switchyard::upstream"),
    ("router and in-place hand-off", None, r"switchyard::router"),
    ("limits and method policy", None, r"switchyard::limits"),
    ("session (admission of a frame, dispatch)", None, r"transport::session"),
    ("connection driver and WebSocket glue", None, r"switchyard::transport"),
    ("minimal gateway's own code (benches/minimal)", None, r"(^|::)minimal::"),
    ("parsing and rendering (switchyard codecs)", None, r"switchyard::(dialect|envelope|lines)|memchr|compact_str"),
    ("call tables (hashbrown)", None, r"hashbrown"),
    ("buffers (bytes)", None, r"^bytes::"),
    ("number formatting (core::fmt)", None, r"core::fmt|as core::fmt::Display"),
    ("allocator", None, r"malloc|free|alloc::|__rust_(alloc|dealloc|realloc)|allocation_counter"),
    ("tokio (scheduler, I/O driver, timers, channels)", None, r"tokio|futures|mio|epoll|clock_gettime|syscall|send|recv|read|write|Instant|timespec|parking_lot|arc_swap"),
]

COMPILED = [(name, re.compile(f) if f else None, re.compile(g) if g else None) for name, f, g in LAYERS]


def parse(path):
    """Self cost per (file of the code, function)."""
    names = {"fl": {}, "fn": {}}
    cost = defaultdict(int)
    fl = fi = fn = None
    after_calls = False

    def name(kind, rest):
        m = re.match(r"\((\d+)\)(?: (.*))?", rest)
        if not m:
            return rest
        table = names["fn" if kind == "fn" else "fl"]
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), "?")

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if after_calls:
                    after_calls = False
                    continue
                parts = line.split()
                if len(parts) >= 2:
                    cost[(fi or fl, fn)] += int(parts[1])
                continue
            key, _, rest = line.partition("=")
            if key == "fl":
                fl = name("fl", rest)
                fi = None
            elif key in ("fi", "fe"):
                fi = name("fl", rest)
            elif key == "fn":
                fn = name("fn", rest)
                fi = None
            elif key in ("cfi", "cfl"):
                name("fl", rest)
            elif key == "cfn":
                name("fn", rest)
            elif key == "calls":
                after_calls = True
    return cost


def layer_of(file, fn):
    for name, fpat, gpat in COMPILED:
        if fpat is not None and file and fpat.search(file):
            return name
        if gpat is not None and fn and gpat.search(fn):
            return name
    return "other"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, requests = sys.argv[1], int(sys.argv[2])
    only = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--functions" else None
    cost = parse(path)
    layers = defaultdict(int)
    detail = defaultdict(int)
    for (file, fn), ir in cost.items():
        layer = layer_of(file, fn)
        layers[layer] += ir
        if only and layer.startswith(only):
            detail[f"{fn}  ({file})"] += ir
    total = sum(layers.values())
    if only:
        for what, ir in sorted(detail.items(), key=lambda kv: -kv[1])[:40]:
            print(f"{ir / requests:8.0f}  {what}")
        return
    print("| layer | instructions / request | share |")
    print("|---|---|---|")
    for layer, ir in sorted(layers.items(), key=lambda kv: -kv[1]):
        print(f"| {layer} | {ir / requests:.0f} | {100 * ir / total:.1f} % |")
    print(f"| **total** | **{total / requests:.0f}** | 100 % |")


if __name__ == "__main__":
    main()
