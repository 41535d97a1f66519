//! The embedded default backend: one SQLite file in the data dir, WAL journal, versioned
//! migrations (`user_version`), `synchronous=FULL` so an acknowledged write survives `kill -9`
//! and power loss. One connection behind a mutex: one writer, and reads of several statements
//! see no other write in between.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use super::conn::{Backend, Conn, Lite, Pool, Tx};
use super::dialect::Dialect;
use super::{schema, SqlStore, StoreError};

pub const DB_FILE_NAME: &str = "livepack.db";

/// Prepared statements kept: more than the aggregates' fixed statements.
const STATEMENT_CACHE: usize = 128;

/// The SQLite [`super::Store`].
pub type SqliteStore = SqlStore<Sqlite>;

pub struct Sqlite {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl SqlStore<Sqlite> {
    /// Opens (creating if needed) `DATA_DIR/livepack.db` and brings its schema up to date.
    pub fn open_in(data_dir: &Path) -> Result<SqliteStore, StoreError> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        let path = data_dir.join(DB_FILE_NAME);
        // Tokens, passphrases and PULL credentials: the file is created 0600 whatever the umask.
        crate::data_dir::create_private(&path).map_err(|e| StoreError::DataDir {
            path: e.path,
            source: e.source,
        })?;
        Self::open(&path)
    }

    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        // Every statement of the aggregates stays prepared (the default keeps 16).
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrate(&mut conn)?;
        Ok(SqlStore::new(Sqlite {
            conn: Mutex::new(conn),
            path: path.to_owned(),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.backend().path
    }
}

impl Sqlite {
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (the transaction
        // rolls back on drop), so the connection is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Backend for Sqlite {
    fn with_conn<T>(
        &self,
        _: Pool,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        f(&mut Lite(&self.conn()))
    }

    fn transaction<T, E: From<StoreError>>(
        &self,
        _: Pool,
        tx: Tx,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.conn();
        if tx == Tx::Snapshot {
            // Holding the one connection is the snapshot: no write can come in between.
            return f(&mut Lite(&conn));
        }
        // One connection, one writer: `Serial` needs nothing more than `Plain`.
        let t = conn.transaction().map_err(StoreError::from)?;
        let out = f(&mut Lite(&t))?;
        t.commit().map_err(StoreError::from)?;
        Ok(out)
    }
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let known = schema::known_version();
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    let steps = schema::migrations(Dialect::Sqlite).enumerate();
    for (version, sql) in steps.skip(found as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(&sql)?;
        tx.pragma_update(None, "user_version", version as i64 + 1)?;
        tx.commit()?;
        tracing::info!(version = version + 1, "database schema migrated");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{SettingStore, StreamStore};

    #[test]
    fn reopening_keeps_data_and_schema_version() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SqliteStore::open_in(dir.path()).unwrap();
            store.set_setting("k", "v").unwrap();
        }
        let store = SqliteStore::open_in(dir.path()).unwrap();
        assert_eq!(store.get_setting("k").unwrap().as_deref(), Some("v"));
        let v: i64 = store
            .backend()
            .conn()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, schema::known_version());
    }

    #[test]
    fn names_written_before_the_search_are_folded_when_the_store_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE_NAME);
        {
            // Schema 12, as the previous build left it: no folded names.
            let conn = Connection::open(&path).unwrap();
            for sql in schema::migrations(Dialect::Sqlite).take(12) {
                conn.execute_batch(&sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 12).unwrap();
            for doc in [
                r#"{"name":"ÄRZTE Live"}"#,
                r#"{"name":"nul\u0000inside"}"#,
                "not a document",
            ] {
                conn.execute(
                    "INSERT INTO streams (revision, token, created_at_ms, settings) \
                     VALUES (1, 't', 0, ?1)",
                    [doc],
                )
                .unwrap();
            }
        }
        // A record that does not parse does not stop the store: it is reported when read.
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.fold_missing_names().unwrap(), 2, "the two that parse");
        let found = |q: &str| {
            let ids: Vec<i64> = store
                .list_streams(Some(q), 0, 10)
                .unwrap()
                .0
                .iter()
                .map(|r| r.id)
                .collect();
            ids
        };
        assert_eq!(
            found("ärzte"),
            [1],
            "folded as the code folds, beyond ASCII"
        );
        assert_eq!(found("l\0in"), [2]);
        assert_eq!(store.fold_missing_names().unwrap(), 0, "once");
    }

    #[test]
    fn migration_drops_broadcast_ids_that_named_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DB_FILE_NAME);
        {
            // A database as the previous build left it: schema 3, ids in the document.
            let mut conn = Connection::open(&path).unwrap();
            for sql in schema::migrations(Dialect::Sqlite).take(3) {
                conn.execute_batch(&sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            let tx = conn.transaction().unwrap();
            tx.execute(
                "INSERT INTO streams (revision, token, created_at_ms, settings) \
                 VALUES (1, 't', 0, '{\"name\":\"old\",\"broadcast_ids\":[5,6]}')",
                [],
            )
            .unwrap();
            tx.commit().unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let (rows, _) = store.list_streams(None, 0, 10).unwrap();
        assert_eq!(rows[0].settings.name, "old");
        assert!(rows[0].settings.broadcast_ids.is_empty());
    }
}
