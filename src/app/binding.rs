//! Binding the listeners of a configuration, grouped as they are served:
//! one group per WebSocket address, one per Unix socket.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};

use super::BindError;
use crate::config::{Config, ListenAddr, ListenerConfig};
use crate::transport::tls;

/// What a serving group is bound to: a WebSocket address (the listeners
/// on it share one HTTP server) or a Unix socket path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum GroupKey {
    /// Configured address (port 0 included) of WebSocket listeners.
    Ws(SocketAddr),
    /// Socket path of one NDJSON listener.
    Unix(PathBuf),
}

/// A group's socket, bound and not yet served.
#[derive(Debug)]
pub(super) enum BoundGroup {
    /// WebSocket listeners sharing an address, with their TLS acceptor.
    Ws {
        listener: TcpListener,
        key: SocketAddr,
        names: Vec<String>,
        tls: Option<tls::Acceptor>,
    },
    /// One Unix (NDJSON) listener.
    Unix {
        listener: UnixListener,
        name: String,
        path: PathBuf,
    },
}

/// The group of a listener.
pub(super) fn key_of(l: &ListenerConfig) -> GroupKey {
    match &l.addr {
        ListenAddr::Ws { addr, .. } => GroupKey::Ws(*addr),
        ListenAddr::Unix { path, .. } => GroupKey::Unix(path.clone()),
    }
}

/// True when `new` can keep serving on `old`'s socket: same name, dialect,
/// address (WebSocket: and path) and TLS files. Anything else is a new
/// listener (remove + add). A Unix socket's mode is applied in place.
pub(super) fn same_listener(old: &ListenerConfig, new: &ListenerConfig) -> bool {
    let same_addr = match (&old.addr, &new.addr) {
        (ListenAddr::Ws { .. }, ListenAddr::Ws { .. }) => old.addr == new.addr,
        (ListenAddr::Unix { path: a, .. }, ListenAddr::Unix { path: b, .. }) => a == b,
        _ => false,
    };
    same_addr && old.name == new.name && old.dialect == new.dialect && old.tls == new.tls
}

/// Binds the groups of `cfg` that `wanted` selects: all of them, or none
/// (the socket files of those bound before a failure are removed).
pub(super) async fn bind_groups(
    cfg: &Config,
    wanted: impl Fn(&GroupKey) -> bool,
) -> Result<(Vec<BoundGroup>, BTreeMap<String, SocketAddr>), BindError> {
    let mut bound = Vec::new();
    let result = bind_into(cfg, wanted, &mut bound).await;
    match result {
        Ok(addrs) => Ok((bound, addrs)),
        Err(e) => {
            for group in bound {
                if let BoundGroup::Unix { path, .. } = group {
                    // Ours, just made; nothing else listens there.
                    let _ = std::fs::remove_file(path);
                }
            }
            Err(e)
        }
    }
}

async fn bind_into(
    cfg: &Config,
    wanted: impl Fn(&GroupKey) -> bool,
    bound: &mut Vec<BoundGroup>,
) -> Result<BTreeMap<String, SocketAddr>, BindError> {
    let mut ws: BTreeMap<SocketAddr, Vec<&ListenerConfig>> = BTreeMap::new();
    for l in cfg.listeners.iter().filter(|l| wanted(&key_of(l))) {
        match &l.addr {
            ListenAddr::Ws { addr, .. } => ws.entry(*addr).or_default().push(l),
            ListenAddr::Unix { path, mode } => {
                let listener = crate::transport::unix::bind(path, *mode).map_err(|source| {
                    BindError::Unix {
                        listener: l.name.clone(),
                        path: path.display().to_string(),
                        source,
                    }
                })?;
                let (name, path) = (l.name.clone(), path.clone());
                bound.push(BoundGroup::Unix {
                    listener,
                    name,
                    path,
                });
            }
        }
    }
    let mut addrs = BTreeMap::new();
    for (addr, members) in ws {
        let names: Vec<String> = members.iter().map(|l| l.name.clone()).collect();
        // Validation makes listeners sharing an address agree on TLS.
        let files = members.first().and_then(|l| l.tls.as_ref());
        let http2 = members.iter().any(|l| l.dialect.is_http());
        let tls = files
            .map(|f| tls::acceptor(f, http2))
            .transpose()
            .map_err(|e| BindError::Tls {
                listener: names.join(","),
                message: e.to_string(),
            })?;
        let error = |source| BindError::Tcp {
            listener: names.join(","),
            addr,
            source,
        };
        let listener = TcpListener::bind(addr).await.map_err(error)?;
        let local = listener.local_addr().map_err(error)?;
        for name in &names {
            addrs.insert(name.clone(), local);
        }
        bound.push(BoundGroup::Ws {
            listener,
            key: addr,
            names,
            tls,
        });
    }
    Ok(addrs)
}
