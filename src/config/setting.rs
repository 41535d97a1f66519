//! The machinery behind the settings table ([`super::table`]): the `settings!` macro that turns one
//! row per setting into the TOML layer, the merge, the `LIVEPACK_*` reader and the defaulted,
//! checked values; how each type is read from the environment; and the checks a row can name.

use std::net::SocketAddr;
use std::ops::{RangeFrom, RangeInclusive};
use std::path::PathBuf;

use super::ConfigError;

/// Generates, from rows of `/// doc` + `key: Type [= default] [, check];` (the file key is the
/// field name; a row without a doc comment does not compile, so no setting goes undocumented):
/// - `Layer`: every setting as `Option<Type>`, deserialised from TOML with unknown keys refused;
///   `Layer::over` (merge) and `Layer::from_env` (`LIVEPACK_` + the key in capitals);
/// - `Settings`: the value of each setting, defaulted (`Type`) or not (`Option<Type>`), checked;
/// - `KEYS`: every file key, in table order;
/// - `documented()`: each setting as the configuration reference shows it, its default and
///   allowed values taken from the row itself.
macro_rules! settings {
    (@value $ty:ty) => { Option<$ty> };
    (@value $ty:ty, $default:expr) => { $ty };
    (@resolve $key:expr, $v:expr) => { $v };
    (@resolve $key:expr, $v:expr; $check:expr) => {
        $v.map(|v| $crate::config::setting::Check::check(&$check, $key, v)).transpose()?
    };
    (@resolve $key:expr, $v:expr, $default:expr) => { $v.unwrap_or_else(|| $default) };
    (@resolve $key:expr, $v:expr, $default:expr; $check:expr) => {
        $crate::config::setting::Check::check(&$check, $key, $v.unwrap_or_else(|| $default))?
    };
    (@default $ty:ty) => { None };
    (@default $ty:ty, $default:expr) => {
        Some($crate::config::setting::Shown::shown(&{ let v: $ty = $default; v }))
    };
    (@allowed $ty:ty) => { None };
    (@allowed $ty:ty, $check:expr) => { $crate::config::setting::Check::<$ty>::allowed(&$check) };
    ($( $(#[doc = $doc:literal])+ $key:ident : $ty:ty $(= $default:expr)? $(, $check:expr)? ; )*) => {
        /// Every setting optional: one layer of configuration (file, environment or flags).
        #[derive(Debug, Default, Clone, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct Layer {
            $( $(#[doc = $doc])+ pub $key: Option<$ty>, )*
        }

        /// The file key of every setting, in table order.
        pub const KEYS: &[&str] = &[$(stringify!($key)),*];

        /// Every setting as the reference documents it, in table order.
        pub fn documented() -> Vec<$crate::config::setting::Documented> {
            vec![$( $crate::config::setting::Documented {
                key: stringify!($key),
                kind: <$ty as $crate::config::setting::Shown>::KIND,
                doc: [$($doc),+].iter().map(|l| l.trim()).collect::<Vec<_>>().join(" "),
                default: settings!(@default $ty $(, $default)?),
                allowed: settings!(@allowed $ty $(, $check)?),
            }, )*]
        }

        impl Layer {
            /// Later layers win, field by field.
            pub fn over(self, lower: Layer) -> Layer {
                Layer { $( $key: self.$key.or(lower.$key), )* }
            }

            /// Reads the `LIVEPACK_*` variables through `get` (so tests need not touch the
            /// process env).
            pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Layer, $crate::config::ConfigError> {
                Ok(Layer {
                    $( $key: {
                        let name = $crate::config::setting::env_name(stringify!($key));
                        get(&name)
                            .map(|v| $crate::config::setting::FromEnv::from_env(&name, v))
                            .transpose()?
                    }, )*
                })
            }
        }

        /// Each setting's value: its default applied, its check passed.
        #[derive(Debug)]
        pub(super) struct Settings {
            $( pub(super) $key: settings!(@value $ty $(, $default)?), )*
        }

        impl Settings {
            pub(super) fn resolve(layer: Layer) -> Result<Settings, $crate::config::ConfigError> {
                Ok(Settings {
                    $( $key: settings!(@resolve stringify!($key), layer.$key $(, $default)? $(; $check)?), )*
                })
            }
        }
    };
}

/// `http_addr` → `LIVEPACK_HTTP_ADDR`.
pub fn env_name(key: &str) -> String {
    format!("LIVEPACK_{}", key.to_ascii_uppercase())
}

/// A value from the configuration that is not acceptable.
pub(super) fn invalid(
    key: &str,
    value: impl Into<String>,
    reason: impl Into<String>,
) -> ConfigError {
    ConfigError::Invalid {
        origin: "configuration",
        key: key.to_owned(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// How a setting's type is written in an environment variable.
pub trait FromEnv: Sized {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError>;
}

const ENV: &str = "environment";

impl FromEnv for String {
    fn from_env(_: &str, v: String) -> Result<Self, ConfigError> {
        Ok(v)
    }
}

impl FromEnv for PathBuf {
    fn from_env(_: &str, v: String) -> Result<Self, ConfigError> {
        Ok(PathBuf::from(v))
    }
}

impl FromEnv for SocketAddr {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError> {
        parse_addr(ENV, name, &v)
    }
}

impl FromEnv for u64 {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError> {
        v.trim().parse::<u64>().map_err(|e| ConfigError::Invalid {
            origin: ENV,
            key: name.to_owned(),
            reason: e.to_string(),
            value: v,
        })
    }
}

impl FromEnv for usize {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError> {
        u64::from_env(name, v).map(|n| n as usize)
    }
}

impl FromEnv for bool {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError> {
        match v.trim() {
            "1" | "true" | "yes" => Ok(true),
            "0" | "false" | "no" => Ok(false),
            _ => Err(ConfigError::Invalid {
                origin: ENV,
                key: name.to_owned(),
                value: v,
                reason: "expected true or false".into(),
            }),
        }
    }
}

/// Lists are comma-separated, so an item given here cannot contain a comma.
impl FromEnv for Vec<String> {
    fn from_env(_: &str, v: String) -> Result<Self, ConfigError> {
        Ok(split_keys(&v))
    }
}

impl FromEnv for Vec<SocketAddr> {
    fn from_env(name: &str, v: String) -> Result<Self, ConfigError> {
        split_keys(&v)
            .iter()
            .map(|a| parse_addr(ENV, name, a))
            .collect()
    }
}

/// Comma-separated keys; blanks are dropped so `a,,b` or a trailing comma is harmless.
pub fn split_keys(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

pub fn parse_addr(origin: &'static str, key: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.trim()
        .parse()
        .map_err(|e: std::net::AddrParseError| ConfigError::Invalid {
            origin,
            key: key.to_owned(),
            value: v.to_owned(),
            reason: format!("{e} (expected IP:PORT, e.g. 127.0.0.1:8080)"),
        })
}

/// A built-in default address.
pub(super) fn default_addr(s: &str) -> SocketAddr {
    s.parse().expect("valid default address")
}

/// What a row's check can be: a range (its bounds are the error message) or a function.
pub trait Check<T> {
    fn check(&self, key: &'static str, v: T) -> Result<T, ConfigError>;

    /// The allowed values in words, when the check can say them (a function's cannot: the
    /// setting's doc does).
    fn allowed(&self) -> Option<String> {
        None
    }
}

impl<T: PartialOrd + std::fmt::Display> Check<T> for RangeInclusive<T> {
    fn check(&self, key: &'static str, v: T) -> Result<T, ConfigError> {
        if self.contains(&v) {
            return Ok(v);
        }
        let reason = format!("must be {}..={}", self.start(), self.end());
        Err(invalid(key, v.to_string(), reason))
    }

    fn allowed(&self) -> Option<String> {
        Some(format!("{} to {}", self.start(), self.end()))
    }
}

impl<T: PartialOrd + std::fmt::Display> Check<T> for RangeFrom<T> {
    fn check(&self, key: &'static str, v: T) -> Result<T, ConfigError> {
        if self.contains(&v) {
            return Ok(v);
        }
        let reason = format!("must be at least {}", self.start);
        Err(invalid(key, v.to_string(), reason))
    }

    fn allowed(&self) -> Option<String> {
        Some(format!("at least {}", self.start))
    }
}

impl<T, F: Fn(&'static str, T) -> Result<T, ConfigError>> Check<T> for F {
    fn check(&self, key: &'static str, v: T) -> Result<T, ConfigError> {
        self(key, v)
    }
}

/// One setting as the configuration reference shows it.
#[derive(Debug, Clone)]
pub struct Documented {
    pub key: &'static str,
    /// What kind of value it takes, in words.
    pub kind: &'static str,
    pub doc: String,
    /// The built-in value; `None`: absent unless set (the doc says what absence means).
    pub default: Option<String>,
    /// The range the row checks, in words.
    pub allowed: Option<String>,
}

/// How a setting's type is named and its default written in the reference.
pub trait Shown {
    const KIND: &'static str;
    fn shown(&self) -> String;
}

macro_rules! shown_by_display {
    ($($ty:ty => $kind:expr),* $(,)?) => {$(
        impl Shown for $ty {
            const KIND: &'static str = $kind;
            fn shown(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

shown_by_display! {
    SocketAddr => "address `IP:PORT`",
    u64 => "integer",
    usize => "integer",
    bool => "`true` or `false`",
    String => "string",
}

impl Shown for PathBuf {
    const KIND: &'static str = "path";
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

impl Shown for Vec<String> {
    const KIND: &'static str = "array of strings (environment: comma-separated)";
    fn shown(&self) -> String {
        list(self.iter().map(String::as_str))
    }
}

impl Shown for Vec<SocketAddr> {
    const KIND: &'static str = "array of addresses `IP:PORT` (environment: comma-separated)";
    fn shown(&self) -> String {
        list(self.iter().map(ToString::to_string))
    }
}

impl Shown for Vec<super::CdnResource> {
    const KIND: &'static str = "array of tables";
    fn shown(&self) -> String {
        list(self.iter().map(|r| r.id.to_string()))
    }
}

impl Shown for Vec<super::IngestRegion> {
    const KIND: &'static str = "array of tables";
    fn shown(&self) -> String {
        list(self.iter().map(|r| r.name.clone()))
    }
}

/// An empty list is an empty string (the reference writes it "none").
fn list<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    items
        .map(|s| s.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}
