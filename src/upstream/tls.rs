//! TLS for `wss://` upstreams and `switchyard call wss://…`: the client
//! side of rustls with the ring provider, the listeners' stack.
//!
//! Trusted roots: the certificates of a configured CA file (an upstream's
//! `ca_file`, the CLI's `--ca-file`) and nothing else, or else the
//! system's roots (`rustls-native-certs`: the platform store, or
//! `SSL_CERT_FILE` / `SSL_CERT_DIR` when set). An upstream reads them once
//! when it starts (and when a reload changes it), not per connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use tokio_tungstenite::Connector;

use crate::config::{UpstreamConfig, UpstreamTarget};

/// Why no TLS client configuration could be built.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsSetupError {
    /// The CA file could not be read or holds no usable certificate.
    #[error("ca_file {}: {message}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// No CA file, and the system has no root certificate to trust.
    #[error("no system root certificates found ({0}); set ca_file (call: --ca-file)")]
    NoSystemRoots(String),
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The client configuration of `wss://` dials: trusts the certificates
/// in `ca_file` only, or the system's roots without one.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let roots = match ca_file {
        Some(path) => file_roots(path)?,
        None => system_roots()?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // WebSocket upgrades are HTTP/1.1.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS client configuration of an upstream: `None` unless its URL is
/// `wss://` or `https://`; an error (logged here, once) fails each of its dials.
pub(super) fn for_upstream(
    cfg: &UpstreamConfig,
) -> Option<Result<Arc<ClientConfig>, TlsSetupError>> {
    let url = match &cfg.target {
        UpstreamTarget::Ws(url) => url,
        UpstreamTarget::Http(h) => &h.url,
        UpstreamTarget::Unix(_) | UpstreamTarget::Process(_) => return None,
    };
    if !url.starts_with("wss://") && !url.starts_with("https://") {
        return None;
    }
    let config = client_config(cfg.ca_file.as_deref());
    if let Err(e) = &config {
        tracing::error!(upstream = %cfg.name, error = %e, "cannot set up TLS for the upstream: no connection to it can be made");
    }
    Some(config)
}

/// The WebSocket library's connector for `config`.
pub(crate) fn connector(config: &Arc<ClientConfig>) -> Connector {
    Connector::Rustls(config.clone())
}

/// The certificates of a PEM file, every one a trust anchor.
fn file_roots(path: &Path) -> Result<RootCertStore, TlsSetupError> {
    let error = |message: String| TlsSetupError::CaFile {
        path: path.to_owned(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(e.to_string()))?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(error("no usable CERTIFICATE in the file".to_owned()));
    }
    Ok(roots)
}

/// The platform's root certificates; unreadable ones are skipped.
fn system_roots() -> Result<RootCertStore, TlsSetupError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = match found.errors.first() {
            Some(e) => e.to_string(),
            None => "the store is empty".to_owned(),
        };
        return Err(TlsSetupError::NoSystemRoots(why));
    }
    if let Some(e) = found.errors.first() {
        tracing::debug!(error = %e, loaded = added, "some system root certificates were skipped");
    }
    Ok(roots)
}

/// The TLS failure inside a WebSocket dial error, if it is one (a
/// certificate the roots do not vouch for, a name mismatch, an alert).
pub(crate) fn handshake_error(e: &tokio_tungstenite::tungstenite::Error) -> Option<&rustls::Error> {
    use tokio_tungstenite::tungstenite::Error;
    match e {
        Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>(),
        Error::Tls(tokio_tungstenite::tungstenite::error::TlsError::Rustls(e)) => Some(&**e),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // in tests a panic is the failure report
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let text = client_config(Some(&missing)).err().unwrap().to_string();
        assert!(
            text.starts_with("ca_file ") && text.contains("missing.pem"),
            "{text}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let text = client_config(Some(&empty)).err().unwrap().to_string();
        assert!(
            text.contains("empty.pem") && text.contains("no usable CERTIFICATE"),
            "{text}"
        );
    }

    #[test]
    fn a_ca_file_with_a_certificate_builds_a_client_config() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&ca, cert.cert.pem()).unwrap();
        assert!(client_config(Some(&ca)).is_ok());
    }
}
