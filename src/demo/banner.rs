//! What `switchyard demo` prints: every endpoint, a command for each that
//! can be pasted into another terminal, and the playground's URL.

use super::Endpoints;

/// The banner for `e`.
pub(super) fn text(e: &Endpoints) -> String {
    let admin = &e.admin;
    format!(
        "switchyard demo is running\n\
         \n\
         Endpoints (all routed to the reference daemon):\n  \
         JSON-RPC 2.0 over WebSocket   {jsonrpc}\n  \
         holon-rpc over WebSocket      {holon}\n  \
         Sideband (SBP) over WebSocket {sideband}\n  \
         NDJSON over a Unix socket     {ndjson}\n  \
         JSON-RPC 2.0 over HTTP        {http}\n  \
         reference daemon (upstream)   {daemon}\n  \
         admin: status page            {admin}/\n  \
         admin: Prometheus metrics     {admin}/metrics\n  \
         admin: readiness              {admin}/readyz\n\
         \n\
         Playground (open in a browser: every WebSocket dialect, both legs, the id rewrite):\n  \
         {admin}/playground\n\
         \n\
         Try it from another terminal:\n  \
         switchyard call {jsonrpc} subtract '[42,23]'\n  \
         switchyard call --holon {holon} echo '{{\"hello\":\"holon\"}}'\n  \
         switchyard call --sideband {sideband} echo '{{\"text\":\"hi\"}}'\n  \
         switchyard call {ndjson} sum '[1,2,4]'\n  \
         switchyard call {daemon} get_data\n  \
         curl -s -H 'Content-Type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"method\":\"subtract\",\"params\":[42,23],\"id\":1}}' {http}\n  \
         curl -sN '{http}/events?topic=daemon.events'\n  \
         curl -s {admin}/metrics | grep '^switchyard_requests_total'\n  \
         curl -s {admin}/readyz\n\
         (from a checkout, `cargo run --release --` stands for `switchyard`)\n\
         \n\
         Press Ctrl-C to stop.",
        jsonrpc = e.jsonrpc,
        holon = e.holon,
        sideband = e.sideband,
        ndjson = e.ndjson,
        http = e.http,
        daemon = e.daemon,
    )
}
