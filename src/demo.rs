//! `switchyard demo`: the gateway plus the bundled reference daemon, with
//! nothing to install or configure.

use std::net::SocketAddr;
use std::path::Path;

use crate::app;
use crate::config::Config;
use crate::daemon::{Daemon, DaemonOptions};

/// The embedded demo configuration; `{addr}` and `{socket}` are filled in.
const DEMO_TOML: &str = r#"
[listeners.demo]
dialect = "jsonrpc-ws"
address = "{addr}"
path = "/rpc"

[upstreams.daemon]
dialect = "ndjson"
socket = "{socket}"
pool_size = 2

[[routes]]
listener = "demo"
upstream = "daemon"
"#;

/// Builds the demo configuration for a listener address and daemon socket.
pub fn config(addr: SocketAddr, socket: &Path) -> Result<Config, crate::config::ConfigError> {
    let text = DEMO_TOML
        .replace("{addr}", &addr.to_string())
        .replace("{socket}", &socket.display().to_string());
    Config::from_toml(&text)
}

/// Runs the demo until SIGINT/SIGTERM. Tries `addr`, then any free port.
pub async fn run(addr: SocketAddr) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("switchyard-demo-")
        .tempdir()?;
    let socket = dir.path().join("daemon.sock");
    let daemon = Daemon::start(&socket, DaemonOptions::default()).await?;
    let bound = match app::bind(config(addr, &socket)?).await {
        Ok(bound) => bound,
        Err(e) => {
            eprintln!("note: {e}; using a free port instead");
            app::bind(config(SocketAddr::new(addr.ip(), 0), &socket)?).await?
        }
    };
    let url = bound.ws_url("demo").unwrap_or_default();
    if let Err(e) = crate::stdout::line(&banner(&url, &socket)) {
        // Nobody can see the endpoints (`demo | head` ended): stop cleanly.
        daemon.stop().await;
        return if crate::stdout::is_closed(&e) {
            Ok(())
        } else {
            Err(e.into())
        };
    }
    let running = bound.spawn();
    crate::shutdown::signal().await;
    running.shutdown().await;
    daemon.stop().await;
    Ok(())
}

fn banner(url: &str, socket: &Path) -> String {
    format!(
        "switchyard demo is running\n\
         \n  JSON-RPC 2.0 over WebSocket  {url}\n  \
         reference daemon (NDJSON)    unix://{socket}\n\
         \nTry it from another terminal:\n  \
         switchyard call {url} echo '{{\"hello\":\"world\"}}'\n  \
         switchyard call {url} subtract '[42,23]'\n  \
         switchyard call {url} sum '[1,2,4]'\n  \
         switchyard call unix://{socket} get_data\n\
         (from a checkout, `cargo run --release --` stands for `switchyard`)\n\
         \nPress Ctrl-C to stop.",
        socket = socket.display()
    )
}
