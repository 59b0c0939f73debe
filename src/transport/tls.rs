//! TLS (`wss://`) for WebSocket listeners: rustls with the ring provider.
//!
//! The certificate and key are read when the listener is bound
//! ([`acceptor`]). [`serve`] accepts TCP connections, completes the TLS
//! handshake and serves the axum router over HTTP/1.1 with upgrades, the
//! peer address inserted as [`ConnectInfo`] like `axum::serve` does. A
//! failed handshake only drops that connection. On shutdown it stops
//! accepting and closes idle HTTP connections; upgraded connections belong
//! to the session tracker from then on.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::Serve;
use crate::config::TlsFiles;

/// Time a client has to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Pause after an accept error (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Why a listener's certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    /// The certificate file could not be read or holds no certificate.
    #[error("tls_cert {path}: {message}")]
    Cert {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The key file could not be read or holds no private key.
    #[error("tls_key {path}: {message}")]
    Key {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// rustls refused the pair (e.g. the key does not match).
    #[error("tls_cert/tls_key: {0}")]
    Config(#[from] rustls::Error),
}

/// The server side of the TLS handshake of one listener address.
#[derive(Clone)]
pub(crate) struct Acceptor(TlsAcceptor);

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor")
    }
}

/// Reads the PEM files and builds the server side of the handshake.
pub(crate) fn acceptor(files: &TlsFiles) -> Result<Acceptor, TlsError> {
    let certs = load_certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::Key {
        path: files.key.display().to_string(),
        message: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    // WebSocket upgrades are HTTP/1.1.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Acceptor(TlsAcceptor::from(Arc::new(config))))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let error = |message: String| TlsError::Cert {
        path: path.display().to_string(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    if certs.is_empty() {
        return Err(error("no CERTIFICATE in the file".to_owned()));
    }
    Ok(certs)
}

/// Serves `app` over TLS on `listener` until shutdown.
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    acceptor: Acceptor,
    ctx: &Serve,
) -> io::Result<()> {
    let conns = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = ctx.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let connection = connection(tcp, peer, app.clone(), acceptor.0.clone(), ctx.clone());
        conns.spawn(connection);
    }
    drop(listener);
    conns.close();
    conns.wait().await;
    Ok(())
}

/// One TCP connection: handshake, then HTTP/1.1 until it ends, upgrades or
/// shutdown closes it.
async fn connection(
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    acceptor: TlsAcceptor,
    ctx: Serve,
) {
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
    let stream = tokio::select! {
        () = ctx.shutdown.cancelled() => return,
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out");
                return;
            }
        },
    };
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        app.clone().oneshot(req)
    });
    let mut conn = pin!(hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades());
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = ctx.shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "HTTPS connection ended with an error");
    }
}
