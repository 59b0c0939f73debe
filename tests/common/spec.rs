//! The "Examples" section of the JSON-RPC 2.0 specification
//! (jsonrpc.org), for every listener that speaks JSON-RPC.

/// (request, expected reply; `None` where the specification expects no
/// reply at all: no frame on WebSocket, `204` over HTTP).
pub const SPEC_EXAMPLES: &[(&str, Option<&str>)] = &[
    (
        r#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#,
        Some(r#"{"jsonrpc": "2.0", "result": 19, "id": 1}"#),
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}"#,
        Some(r#"{"jsonrpc": "2.0", "result": -19, "id": 2}"#),
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}"#,
        Some(r#"{"jsonrpc": "2.0", "result": 19, "id": 3}"#),
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}"#,
        Some(r#"{"jsonrpc": "2.0", "result": 19, "id": 4}"#),
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}"#,
        None,
    ),
    (r#"{"jsonrpc": "2.0", "method": "foobar"}"#, None),
    (
        r#"{"jsonrpc": "2.0", "method": "foobar", "id": "1"}"#,
        Some(
            r#"{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}"#,
        ),
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]"#,
        Some(
            r#"{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}"#,
        ),
    ),
    (
        r#"{"jsonrpc": "2.0", "method": 1, "params": "bar"}"#,
        Some(
            r#"{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}"#,
        ),
    ),
    (
        r#"[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]"#,
        Some(
            r#"{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}"#,
        ),
    ),
    (
        "[]",
        Some(
            r#"{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}"#,
        ),
    ),
    (
        "[1]",
        Some(
            r#"[{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}]"#,
        ),
    ),
    (
        "[1,2,3]",
        Some(
            r#"[
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}
]"#,
        ),
    ),
    (
        r#"[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
  {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
  {"foo": "boo"},
  {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
  {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
]"#,
        Some(
            r#"[
  {"jsonrpc": "2.0", "result": 7, "id": "1"},
  {"jsonrpc": "2.0", "result": 19, "id": "2"},
  {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},
  {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},
  {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"}
]"#,
        ),
    ),
    (
        r#"[
  {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
  {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
]"#,
        None,
    ),
];
