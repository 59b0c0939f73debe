//! The environment layer of the configuration: which `SWITCHYARD_*`
//! variables are configuration, and the key path each one sets.

use figment::providers::Env;
use figment::value::Value;
use figment::Figment;

/// Prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "SWITCHYARD_";

/// The bearer token `switchyard call` and `switchyard watch` send when no
/// `--token` is given. Not a configuration key: loading the configuration
/// ignores it, so one shell can hold it and run the gateway too.
pub const CLIENT_TOKEN_ENV: &str = "SWITCHYARD_TOKEN";

/// Separator of nested keys in environment variable names, e.g.
/// `SWITCHYARD_LISTENERS__PUBLIC__ADDRESS` sets `listeners.public.address`.
pub const ENV_SEPARATOR: &str = "__";

/// The `SWITCHYARD_*` variables that are configuration: those whose name
/// has the [`ENV_SEPARATOR`] after the prefix. Others, such as the
/// `SWITCHYARD_PORT` and `SWITCHYARD_SERVICE_HOST` Kubernetes sets for a
/// Service named `switchyard`, are left out ([`ignored_env_vars`] names
/// them for a warning). Keys are lower-cased, except that a listener or
/// upstream name matches the name in `base` case-insensitively (the
/// lower-case one when several match), so `SWITCHYARD_LISTENERS__PUBLIC__…`
/// sets `[listeners.Public]`.
pub(super) fn environment(base: &Figment) -> Env {
    let names = |table: &str| -> Vec<String> {
        match base.find_value(table) {
            Ok(Value::Dict(_, dict)) => dict.into_keys().collect(),
            _ => Vec::new(),
        }
    };
    let (listeners, upstreams) = (names("listeners"), names("upstreams"));
    Env::prefixed(ENV_PREFIX)
        .filter(|key| key.as_str().contains(ENV_SEPARATOR))
        .map(move |key| env_key(key.as_str(), &listeners, &upstreams).into())
        // Last: each filter or map turns lower-casing back on.
        .lowercase(false)
}

/// The key path of a variable named `name` (prefix removed), e.g.
/// `LISTENERS__Public__ADDRESS` → `listeners.Public.address` when the
/// file names the listener `Public`.
fn env_key(name: &str, listeners: &[String], upstreams: &[String]) -> String {
    let mut parts: Vec<String> = name
        .split(ENV_SEPARATOR)
        .map(str::to_ascii_lowercase)
        .collect();
    let known = match parts.first().map(String::as_str) {
        Some("listeners") => listeners,
        Some("upstreams") => upstreams,
        _ => &[],
    };
    if let Some(part) = parts.get_mut(1) {
        let exact = known.iter().find(|n| *n == part);
        let loose = || known.iter().find(|n| n.eq_ignore_ascii_case(part));
        if let Some(written) = exact.or_else(loose) {
            *part = written.clone();
        }
    }
    parts.join(".")
}

/// Names of the `SWITCHYARD_*` variables set now that are not
/// configuration (no [`ENV_SEPARATOR`] after the prefix), sorted, except
/// [`CLIENT_TOKEN_ENV`] (the CLI's token, expected beside a gateway). Only
/// names: their values may be secrets.
pub fn ignored_env_vars() -> Vec<String> {
    let mut names: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| {
            let name = name.to_string_lossy().into_owned();
            let rest = name.get(..ENV_PREFIX.len()).and_then(|prefix| {
                prefix
                    .eq_ignore_ascii_case(ENV_PREFIX)
                    .then(|| &name[ENV_PREFIX.len()..])
            })?;
            (!rest.contains(ENV_SEPARATOR) && name != CLIENT_TOKEN_ENV).then(|| name.clone())
        })
        .collect();
    names.sort();
    names
}
