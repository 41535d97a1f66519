//! Typed reads from a JSON object body with field-precise errors: wrong type → 400
//! `invalid_type`, unknown key → 422 `unknown_field`. Every key must be consumed or listed as
//! ignorable, so a typo never silently drops a setting.

use serde_json::{Map, Number, Value};

use super::ApiError;

pub struct Fields {
    map: Map<String, Value>,
}

/// `Some(None)` = present and null (clear it), `Some(Some(v))` = set, `None` = absent.
pub type Nullable<T> = Option<Option<T>>;

impl Fields {
    /// `what` names the body in the error when it is not an object (e.g. `stream`).
    pub fn new(value: Value, what: &str) -> Result<Fields, ApiError> {
        match value {
            Value::Object(map) => Ok(Fields { map }),
            _ => Err(ApiError::invalid_type(what, "a JSON object")),
        }
    }

    /// Removes a key and returns its raw value, for nested objects read with their own `Fields`.
    pub fn take_value(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    fn take_non_null(&mut self, key: &str, expected: &str) -> Result<Option<Value>, ApiError> {
        match self.map.remove(key) {
            Some(Value::Null) => Err(ApiError::invalid_type(key, expected)),
            other => Ok(other),
        }
    }

    fn typed<T>(
        &mut self,
        key: &str,
        expected: &str,
        get: impl FnOnce(Value) -> Option<T>,
    ) -> Result<Option<T>, ApiError> {
        self.take_non_null(key, expected)?
            .map(|v| get(v).ok_or_else(|| ApiError::invalid_type(key, expected)))
            .transpose()
    }

    fn nullable<T>(
        &mut self,
        key: &str,
        expected: &str,
        get: impl FnOnce(Value) -> Option<T>,
    ) -> Result<Nullable<T>, ApiError> {
        match self.map.remove(key) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(v) => get(v)
                .map(|t| Some(Some(t)))
                .ok_or_else(|| ApiError::invalid_type(key, &format!("{expected} or null"))),
        }
    }

    pub fn string(&mut self, key: &str) -> Result<Option<String>, ApiError> {
        self.typed(key, "a string", as_string)
    }

    pub fn nullable_string(&mut self, key: &str) -> Result<Nullable<String>, ApiError> {
        self.nullable(key, "a string", as_string)
    }

    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, ApiError> {
        self.typed(key, "a boolean", |v| v.as_bool())
    }

    pub fn int(&mut self, key: &str) -> Result<Option<i64>, ApiError> {
        self.typed(key, "an integer", |v| as_int(&v))
    }

    pub fn nullable_int(&mut self, key: &str) -> Result<Nullable<i64>, ApiError> {
        self.nullable(key, "an integer", |v| as_int(&v))
    }

    /// An integer kept as the client's JSON number (any i64 or u64), so 64-bit ids round-trip.
    pub fn nullable_integer_number(&mut self, key: &str) -> Result<Nullable<Number>, ApiError> {
        self.nullable(key, "an integer", |v| match v {
            Value::Number(n) if n.is_i64() || n.is_u64() => Some(n),
            other => as_int(&other).map(Number::from),
        })
    }

    pub fn int_array(&mut self, key: &str) -> Result<Option<Vec<i64>>, ApiError> {
        self.typed(key, "an array of integers", |v| match v {
            Value::Array(items) => items.iter().map(as_int).collect(),
            _ => None,
        })
    }

    pub fn string_array(&mut self, key: &str) -> Result<Option<Vec<String>>, ApiError> {
        self.typed(key, "an array of strings", |v| match v {
            Value::Array(items) => items.into_iter().map(as_string).collect(),
            _ => None,
        })
    }

    /// Fails on the first key that was neither read nor listed in `ignored`.
    pub fn finish(self, ignored: &[&str]) -> Result<(), ApiError> {
        match self.map.keys().find(|k| !ignored.contains(&k.as_str())) {
            Some(k) => Err(ApiError::unknown_field(k)),
            None => Ok(()),
        }
    }
}

/// JSON Schema counts `2.0` as the integer 2 (a number with a zero fractional part), and so do
/// we, but only where a double is exact (|x| ≤ 2^53): serde_json reads an integer literal beyond
/// i64/u64 as a rounded double, which must not pass for a neighbouring value.
fn as_int(v: &Value) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && (-EXACT..=EXACT).contains(f))
            .map(|f| f as i64)
    })
}

fn as_string(v: Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// Unicode scalar count: limits are stated in characters, not bytes.
pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// An outbound URL a record names (`field`): the one given, or the record's current one;
/// at most `max` characters, its scheme and address checked by the URL policy for `purpose`.
pub fn outbound_url(
    field: &str,
    given: Option<String>,
    current: Option<&str>,
    max: usize,
    purpose: crate::url_policy::Purpose,
) -> Result<String, ApiError> {
    let url = match (given, current) {
        (Some(u), _) => u,
        (None, Some(c)) => c.to_owned(),
        (None, None) => return Err(ApiError::required(field, "")),
    };
    if char_len(&url) > max {
        return Err(ApiError::invalid_value(
            field,
            format!("`{field}` is at most {max} characters"),
        ));
    }
    let parsed = crate::url_policy::parse(&url, purpose)
        .map_err(|e| ApiError::url_policy(field, &url, &e))?;
    crate::url_policy::check(&parsed, purpose, false)
        .map_err(|e| ApiError::url_policy(field, &url, &e))?;
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn types_and_nulls() {
        let mut f = Fields::new(
            json!({"s": "x", "n": null, "i": 5, "f": 1.5, "b": true, "big": 18446744073709551615u64,
                "whole": 3.0, "huge": 1e19,
                "below_min": null}),
            "body",
        )
        .unwrap();
        assert_eq!(f.string("s").unwrap(), Some("x".into()));
        assert_eq!(f.nullable_string("n").unwrap(), Some(None));
        assert_eq!(f.int("i").unwrap(), Some(5));
        assert_eq!(f.int("f").unwrap_err().code, "invalid_type");
        assert_eq!(f.int("whole").unwrap(), Some(3));
        assert_eq!(f.int("huge").unwrap_err().code, "invalid_type");
        let below_min: Value = serde_json::from_str("-9223372036854775809").unwrap();
        let mut g = Fields::new(json!({ "v": below_min }), "body").unwrap();
        assert!(
            g.nullable_integer_number("v").is_err(),
            "rounded, not exact"
        );
        f.take_value("below_min");
        assert_eq!(f.bool("b").unwrap(), Some(true));
        assert_eq!(
            f.nullable_integer_number("big")
                .unwrap()
                .unwrap()
                .unwrap()
                .to_string(),
            "18446744073709551615"
        );
        assert_eq!(f.string("absent").unwrap(), None);
        f.finish(&[]).unwrap();
    }

    #[test]
    fn null_for_non_nullable_is_a_type_error() {
        let mut f = Fields::new(json!({"b": null}), "body").unwrap();
        let e = f.bool("b").unwrap_err();
        assert_eq!((e.code, e.field.as_deref()), ("invalid_type", Some("b")));
    }

    #[test]
    fn leftovers_are_named() {
        let f = Fields::new(json!({"id": 1, "nmae": "x"}), "body").unwrap();
        let e = f.finish(&["id"]).unwrap_err();
        assert_eq!(
            (e.code, e.field.as_deref()),
            ("unknown_field", Some("nmae"))
        );
        assert!(Fields::new(json!([1]), "body").is_err());
    }
}
