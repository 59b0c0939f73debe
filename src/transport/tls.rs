//! TLS (`wss://`) for WebSocket listeners: rustls with the ring provider.
//!
//! The certificate and key are read when the listener is bound
//! ([`acceptor`]). The handshake itself runs in [`super::accept`], under
//! the listener's header-read timeout; a failed handshake only drops that
//! connection.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsFiles;

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

// === impl Acceptor ===

impl Acceptor {
    /// The server side of the handshake on `tcp`.
    pub(crate) fn accept(&self, tcp: TcpStream) -> tokio_rustls::Accept<TcpStream> {
        self.0.accept(tcp)
    }
}

/// Reads the PEM files and builds the server side of the handshake. With
/// `http2` (an address serving a `jsonrpc-http` listener) ALPN offers `h2`
/// before `http/1.1`; WebSocket-only addresses offer `http/1.1` alone:
/// their upgrades are HTTP/1.1.
pub(crate) fn acceptor(files: &TlsFiles, http2: bool) -> Result<Acceptor, TlsError> {
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
    if http2 {
        config.alpn_protocols.insert(0, b"h2".to_vec());
    }
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
