//! The daemon's methods: the JSON-RPC 2.0 specification's examples plus a
//! few test devices (`echo`, `sleep`, `fail`).
//!
//! Pure functions from raw params to a raw JSON result. Nothing here waits:
//! `sleep` returns [`Outcome::Sleep`] and the connection does the waiting.
//! `Subscribe` never reaches this module; it takes over the connection.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Number;

/// The result of one method call.
#[derive(Debug)]
pub(super) enum Outcome<'a> {
    /// A raw JSON result.
    Value(Cow<'a, str>),
    /// An error reply.
    Error(RpcError),
    /// Answer with this number after sleeping that many milliseconds.
    Sleep(u64),
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RpcError {
    /// The error code.
    pub(super) code: i64,
    /// The error message.
    pub(super) message: Cow<'static, str>,
    /// Raw JSON `data`, if any.
    pub(super) data: Option<String>,
}

/// Why params were refused; rendered per mode by [`invalid_params`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ParamsError(Cow<'static, str>);

/// A number kept exact while it is an integer.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

/// Named `subtract` params.
#[derive(Deserialize)]
struct Subtract {
    minuend: Number,
    subtrahend: Number,
}

/// Named `sleep` params.
#[derive(Deserialize)]
struct Sleep {
    ms: u64,
}

/// `fail` params; every member optional.
#[derive(Deserialize)]
struct Fail<'a> {
    #[serde(default)]
    code: Option<i64>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default, borrow, deserialize_with = "some_raw")]
    data: Option<&'a RawValue>,
}

const NO_PARAMS: &str = "unexpected end of JSON input";

/// Runs `method`. `hld` selects hld's error texts and codes.
pub(super) fn call<'a>(method: &str, params: Option<&'a RawValue>, hld: bool) -> Outcome<'a> {
    let result = match method {
        "echo" => Ok(Cow::Borrowed(params.map_or("null", RawValue::get))),
        "sum" => sum(params),
        "subtract" => subtract(params),
        "get_data" => Ok(Cow::Borrowed("[\"hello\",5]")),
        "notify_hello" | "notify_sum" | "update" => Ok(Cow::Borrowed("null")),
        "sleep" => match sleep_ms(params) {
            Ok(ms) => return Outcome::Sleep(ms),
            Err(e) => Err(e),
        },
        "fail" => return Outcome::Error(fail(params, hld)),
        _ => return Outcome::Error(method_not_found(method, hld)),
    };
    match result {
        Ok(value) => Outcome::Value(value),
        Err(e) => Outcome::Error(invalid_params(&e, hld)),
    }
}

// === impl RpcError ===

impl RpcError {
    /// An error without `data`.
    pub(super) fn new(code: i64, message: impl Into<Cow<'static, str>>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

fn method_not_found(method: &str, hld: bool) -> RpcError {
    if hld {
        RpcError::new(-32601, format!("Method not found: {method}"))
    } else {
        RpcError::new(-32601, "Method not found")
    }
}

/// Standard: -32602 with the detail as `data`; hld: -32603 with the text.
fn invalid_params(e: &ParamsError, hld: bool) -> RpcError {
    if hld {
        return RpcError::new(-32603, format!("invalid request: {e}"));
    }
    RpcError {
        code: -32602,
        message: Cow::Borrowed("Invalid params"),
        data: Some(serde_json::Value::from(e.to_string()).to_string()),
    }
}

fn required(params: Option<&RawValue>) -> Result<&RawValue, ParamsError> {
    params.ok_or(ParamsError(Cow::Borrowed(NO_PARAMS)))
}

fn decode<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Result<T, ParamsError> {
    serde_json::from_str(raw.get()).map_err(|e| ParamsError(Cow::Owned(e.to_string())))
}

/// `sum`: an array of numbers.
fn sum(params: Option<&RawValue>) -> Result<Cow<'static, str>, ParamsError> {
    let numbers: Vec<Number> = decode(required(params)?)?;
    let total = numbers
        .iter()
        .map(Num::from)
        .fold(Num::Int(0), |acc, n| acc.combine(n, 1));
    Ok(Cow::Owned(total.render()))
}

/// `subtract`: `[minuend, subtrahend]` or `{"minuend":…,"subtrahend":…}`.
fn subtract(params: Option<&RawValue>) -> Result<Cow<'static, str>, ParamsError> {
    let raw = required(params)?;
    let (a, b) = if raw.get().starts_with('{') {
        let named: Subtract = decode(raw)?;
        (named.minuend, named.subtrahend)
    } else {
        let [a, b]: [Number; 2] = decode(raw)?;
        (a, b)
    };
    Ok(Cow::Owned(
        Num::from(&a).combine(Num::from(&b), -1).render(),
    ))
}

/// `sleep`: `{"ms":N}` or `[N]`.
fn sleep_ms(params: Option<&RawValue>) -> Result<u64, ParamsError> {
    let raw = required(params)?;
    if raw.get().starts_with('{') {
        Ok(decode::<Sleep>(raw)?.ms)
    } else {
        let [ms]: [u64; 1] = decode(raw)?;
        Ok(ms)
    }
}

/// `fail`: the error the caller asked for.
fn fail(params: Option<&RawValue>, hld: bool) -> RpcError {
    let parsed = match params {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) if raw.get().starts_with('{') => decode::<Fail<'_>>(raw).map(Some),
        Some(_) => Err(ParamsError(Cow::Borrowed("params must be an object"))),
    };
    match parsed {
        Ok(fail) => {
            let (code, message, data) =
                fail.map_or((None, None, None), |f| (f.code, f.message, f.data));
            RpcError {
                code: code.unwrap_or(-32000),
                message: message.map_or(Cow::Borrowed("failure"), Cow::Owned),
                data: data.map(|d| d.get().to_owned()),
            }
        }
        Err(e) => invalid_params(&e, hld),
    }
}

/// Deserializes a present member, `null` included, as `Some`.
fn some_raw<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(de).map(Some)
}

// === impl Num ===

impl From<&Number> for Num {
    fn from(n: &Number) -> Num {
        match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Num::Int(i128::from(i)),
            (None, Some(u)) => Num::Int(i128::from(u)),
            // serde_json holds every other number as a finite f64.
            _ => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
        }
    }
}

impl Num {
    /// `self + sign * other`, exact for integers.
    fn combine(self, other: Num, sign: i8) -> Num {
        if let (Num::Int(a), Num::Int(b)) = (self, other) {
            let b = if sign < 0 { b.checked_neg() } else { Some(b) };
            if let Some(sum) = b.and_then(|b| a.checked_add(b)) {
                return Num::Int(sum);
            }
        }
        Num::Float(self.as_f64() + f64::from(sign) * other.as_f64())
    }

    fn as_f64(self) -> f64 {
        match self {
            // Precision loss is the documented behaviour for huge sums.
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// Integer-valued results print as integers (`[1,2,4]` → `7`).
    fn render(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                // In range and integral, so the cast is exact.
                let i = f as i64;
                i.to_string()
            }
            Num::Float(f) => serde_json::Value::from(f).to_string(),
        }
    }
}
