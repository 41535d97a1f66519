//! The one connection abstraction the aggregates' SQL runs on: [`Conn`] (statements with
//! [`Value`] arguments, rows of [`Value`]s read through typed getters) and [`Backend`] (where a
//! connection comes from and how a transaction is run), with each driver's value conversion.
//! SQL is written once, PostgreSQL-style (`$1`, `$1::BIGINT`); [`sqlite_sql`] is the one place
//! that turns it into SQLite's.

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type};
use postgres::GenericClient;

use super::dialect::Dialect;
use super::StoreError;

/// A statement argument or a column value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    /// Client text kept only to compare and sort (folded names, an app's plan): BYTEA in
    /// PostgreSQL (byte-wise whatever the locale, and NUL allowed), TEXT in SQLite.
    ByteText(String),
    Bytes(Vec<u8>),
    Bool(bool),
    /// Ids as one argument: an array in PostgreSQL, a JSON array in SQLite (see
    /// [`Dialect::id_list`]); as a column, one of those read back (see [`Dialect::id_array`]).
    Ids(Vec<i64>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}
impl From<u8> for Value {
    fn from(v: u8) -> Value {
        Value::Int(i64::from(v))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}
impl From<Vec<i64>> for Value {
    fn from(v: Vec<i64>) -> Value {
        Value::Ids(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// A statement's arguments: `args![a, b]` is `[Value::from(a), Value::from(b)]`.
macro_rules! args {
    ($($v:expr),* $(,)?) => { [$($crate::db::conn::Value::from($v)),*] };
}
pub(super) use args;

/// Offsets beyond what SQL's signed integers hold mean "past the end" anyway.
pub(super) fn sql_offset(offset: u64) -> i64 {
    offset.min(i64::MAX as u64) as i64
}

/// Whether a row with this id exists in `table` (after an update matched none: gone or
/// stale?).
pub(super) fn exists(c: &mut dyn Conn, table: &str, id: i64) -> Result<bool, StoreError> {
    let sql = format!("SELECT 1 FROM {table} WHERE id = $1");
    Ok(c.query_opt(&sql, &args![id])?.is_some())
}

/// One result row.
#[derive(Debug)]
pub(super) struct Row(Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value, StoreError> {
        self.0
            .get(i)
            .ok_or_else(|| mismatch(i, "a column", &"none"))
    }

    pub(super) fn opt_i64(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            other => Err(mismatch(i, "an integer", other)),
        }
    }

    pub(super) fn i64(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_i64(i)?
            .ok_or_else(|| mismatch(i, "an integer", &Value::Null))
    }

    pub(super) fn f64(&self, i: usize) -> Result<f64, StoreError> {
        match self.at(i)? {
            Value::Real(v) => Ok(*v),
            // SQLite hands back an integral REAL result as an integer.
            Value::Int(v) => Ok(*v as f64),
            other => Err(mismatch(i, "a number", other)),
        }
    }

    pub(super) fn opt_f64(&self, i: usize) -> Result<Option<f64>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            _ => self.f64(i).map(Some),
        }
    }

    pub(super) fn bool(&self, i: usize) -> Result<bool, StoreError> {
        match self.at(i)? {
            Value::Bool(v) => Ok(*v),
            // SQLite has no boolean type: 0 or 1.
            Value::Int(v) => Ok(*v != 0),
            other => Err(mismatch(i, "a boolean", other)),
        }
    }

    pub(super) fn string(&self, i: usize) -> Result<String, StoreError> {
        self.opt_string(i)?
            .ok_or_else(|| mismatch(i, "text", &Value::Null))
    }

    pub(super) fn opt_string(&self, i: usize) -> Result<Option<String>, StoreError> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            other => Err(mismatch(i, "text", other)),
        }
    }

    /// Ids from [`Dialect::id_array`], ascending.
    pub(super) fn ids(&self, i: usize) -> Result<Vec<i64>, StoreError> {
        let mut ids = match self.at(i)? {
            Value::Ids(v) => v.clone(),
            Value::Text(json) => serde_json::from_str(json)
                .map_err(|e| mismatch(i, "a JSON array of ids", &e.to_string()))?,
            other => return Err(mismatch(i, "ids", other)),
        };
        // SQLite's json_group_array does not promise its subquery's order.
        ids.sort_unstable();
        Ok(ids)
    }
}

fn mismatch(i: usize, wanted: &str, found: &dyn std::fmt::Debug) -> StoreError {
    StoreError::Corrupt {
        kind: "column",
        id: i as i64,
        reason: format!("expected {wanted}, found {found:?}"),
    }
}

/// Statements on one connection (or in one transaction of it).
pub(super) trait Conn {
    fn dialect(&self) -> Dialect;
    /// Rows changed.
    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<u64, StoreError>;
    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError>;

    fn query_opt(&mut self, sql: &str, args: &[Value]) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// For statements that always return a row (`COUNT(*)`, `INSERT … RETURNING`).
    fn query_one(&mut self, sql: &str, args: &[Value]) -> Result<Row, StoreError> {
        self.query_opt(sql, args)?
            .ok_or_else(|| StoreError::Corrupt {
                kind: "query",
                id: 0,
                reason: format!("no row from {sql}"),
            })
    }
}

/// Which connections a call uses: PostgreSQL keeps the cluster's apart so that heartbeats never
/// queue behind API calls; SQLite has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pool {
    Main,
    Cluster,
}

/// How a transaction isolates itself from other writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tx {
    /// Atomic, nothing more: statements that decide under their own row locks.
    Plain,
    /// Writes that read before writing across records: one at a time across every daemon.
    Serial,
    /// Reads of several statements that must agree (a count and a page), read-only.
    Snapshot,
}

/// Where connections come from: the two drivers behind one interface.
pub(super) trait Backend: Send + Sync + 'static {
    /// Runs `f` on one connection; each statement commits on its own.
    fn with_conn<T>(
        &self,
        pool: Pool,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError>;

    /// Runs `f` in a transaction that commits when `f` returns `Ok` and rolls back on `Err`
    /// (an `E` of the caller's can carry an outcome that must write nothing).
    fn transaction<T, E: From<StoreError>>(
        &self,
        pool: Pool,
        tx: Tx,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, E>,
    ) -> Result<T, E>;
}

impl StoreError {
    /// A unique constraint refused the write (a name taken).
    pub(super) fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Db(rusqlite::Error::SqliteFailure(f, _)) => {
                f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
            }
            StoreError::Postgres(e) => {
                e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION)
            }
            _ => false,
        }
    }
}

/// SQL as SQLite reads it: `$n` placeholders become `?n` and their PostgreSQL type annotations
/// (`$n::BIGINT`, `$n::BIGINT[]`) go, outside string literals.
pub(super) fn sqlite_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if quoted || c != '$' || !chars.peek().is_some_and(char::is_ascii_digit) {
            out.push(c);
            continue;
        }
        out.push('?');
        while let Some(d) = chars.next_if(char::is_ascii_digit) {
            out.push(d);
        }
        let rest: String = chars.clone().take(2).collect();
        if rest == "::" {
            chars.next();
            chars.next();
            while chars
                .next_if(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '[' | ']'))
                .is_some()
            {}
        }
    }
    out
}

/// SQLite's side: a connection (or a transaction, which derefs to one).
pub(super) struct Lite<'a>(pub &'a rusqlite::Connection);

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as V, ValueRef};
        Ok(match self {
            Value::Null => ToSqlOutput::Owned(V::Null),
            Value::Int(v) => ToSqlOutput::Owned(V::Integer(*v)),
            Value::Real(v) => ToSqlOutput::Owned(V::Real(*v)),
            Value::Text(v) | Value::ByteText(v) => {
                ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes()))
            }
            Value::Bytes(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v)),
            Value::Bool(v) => ToSqlOutput::Owned(V::Integer(i64::from(*v))),
            Value::Ids(v) => ToSqlOutput::Owned(V::Text(
                serde_json::to_string(v).expect("ids always serialize"),
            )),
        })
    }
}

fn lite_value(v: rusqlite::types::Value) -> Value {
    use rusqlite::types::Value as V;
    match v {
        V::Null => Value::Null,
        V::Integer(v) => Value::Int(v),
        V::Real(v) => Value::Real(v),
        V::Text(v) => Value::Text(v),
        V::Blob(v) => Value::Bytes(v),
    }
}

impl Conn for Lite<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<u64, StoreError> {
        let mut stmt = self.0.prepare_cached(&sqlite_sql(sql))?;
        Ok(stmt.execute(rusqlite::params_from_iter(args))? as u64)
    }

    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        let mut stmt = self.0.prepare_cached(&sqlite_sql(sql))?;
        let width = stmt.column_count();
        let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| {
            (0..width)
                .map(|i| r.get::<_, rusqlite::types::Value>(i).map(lite_value))
                .collect::<rusqlite::Result<Vec<_>>>()
                .map(Row)
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// PostgreSQL's side: a pooled client or a transaction on one.
pub(super) struct Pg<'a, C: GenericClient>(pub &'a mut C);

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(v) if *ty == Type::INT4 => i32::try_from(*v)?.to_sql_checked(ty, out),
            Value::Int(v) => v.to_sql_checked(ty, out),
            Value::Real(v) => v.to_sql_checked(ty, out),
            Value::Text(v) => v.as_str().to_sql_checked(ty, out),
            Value::ByteText(v) => v.as_bytes().to_sql_checked(ty, out),
            Value::Bytes(v) => v.as_slice().to_sql_checked(ty, out),
            Value::Bool(v) => v.to_sql_checked(ty, out),
            Value::Ids(v) => v.to_sql_checked(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        // Each variant checks the server's type itself (`to_sql_checked` above).
        true
    }

    postgres::types::to_sql_checked!();
}

fn pg_value(row: &postgres::Row, i: usize) -> Result<Value, postgres::Error> {
    let ty = row.columns()[i].type_();
    Ok(match *ty {
        Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(Value::Bool),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)?
            .map(|v| Value::Real(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Bytes),
        Type::INT8_ARRAY => row.try_get::<_, Option<Vec<i64>>>(i)?.map(Value::Ids),
        // Text, or the driver's own error naming the type it cannot read.
        _ => row.try_get::<_, Option<String>>(i)?.map(Value::Text),
    }
    .unwrap_or(Value::Null))
}

fn pg_args(args: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

impl<C: GenericClient> Conn for Pg<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<u64, StoreError> {
        Ok(self.0.execute(sql, &pg_args(args))?)
    }

    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        let rows = self.0.query(sql, &pg_args(args))?;
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| pg_value(r, i))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Row)
                    .map_err(StoreError::from)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::sqlite_sql;

    #[test]
    fn placeholders_become_sqlites_without_their_types() {
        assert_eq!(
            sqlite_sql("SELECT $1::BIGINT, $12, x::TEXT, '$3' FROM t WHERE a = ANY($2::BIGINT[])"),
            "SELECT ?1, ?12, x::TEXT, '$3' FROM t WHERE a = ANY(?2)"
        );
    }
}
