//! What the command line names: the URL's target (a WebSocket, a Unix
//! socket or an HTTP listener) and the params, checked and minified before
//! anything is sent.

use std::path::Path;

use serde_json::value::RawValue;

use super::error::ClientError;

/// Where a URL points.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Target<'a> {
    Ws(&'a str),
    Unix(&'a Path),
    Http(&'a str),
}

/// Classifies a URL; refuses relative paths, and a CA file for anything
/// but `wss://`.
pub(super) fn parse_url<'a>(
    url: &'a str,
    ca_file: Option<&Path>,
) -> Result<Target<'a>, ClientError> {
    if ca_file.is_some() && !url.starts_with("wss://") {
        Err(ClientError::CaFileWithoutTls(url.to_owned()))
    } else if url.starts_with("ws://") || url.starts_with("wss://") {
        Ok(Target::Ws(url))
    } else if url.starts_with("http://") {
        Ok(Target::Http(url))
    } else if let Some(path) = url
        .strip_prefix("unix://")
        .or(Some(url))
        .filter(|p| p.starts_with('/'))
    {
        Ok(Target::Unix(Path::new(path)))
    } else {
        Err(ClientError::UnsupportedUrl(url.to_owned()))
    }
}

/// The `ws://` or `wss://` URL of a dialect that only speaks WebSocket.
pub(super) fn ws_only<'a>(url: &'a str, ca_file: Option<&Path>) -> Result<&'a str, ClientError> {
    match parse_url(url, ca_file)? {
        Target::Ws(ws) => Ok(ws),
        Target::Unix(_) | Target::Http(_) => Err(ClientError::UnsupportedUrl(url.to_owned())),
    }
}

/// Checks that PARAMS is one JSON array or object (only an object for
/// holon-rpc) and returns it minified, so it fits on one NDJSON line.
pub(super) fn checked_params(params: &str, object_only: bool) -> Result<String, ClientError> {
    let raw: &RawValue = serde_json::from_str(params)
        .map_err(|e| ClientError::InvalidParams(format!("not valid JSON: {e}")))?;
    match raw.get().as_bytes().first() {
        Some(b'{') => {}
        Some(b'[') if !object_only => {}
        _ if object_only => {
            return Err(ClientError::InvalidParams(
                "holon-rpc params must be a JSON object".into(),
            ))
        }
        _ => {
            return Err(ClientError::InvalidParams(
                "params must be a JSON array or object".into(),
            ))
        }
    }
    Ok(minify(raw.get()))
}

/// Drops insignificant whitespace from valid JSON; string contents are kept
/// byte for byte.
pub(super) fn minify(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            in_string = c == '"';
            out.push(c);
        }
    }
    out
}
