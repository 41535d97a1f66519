//! Small named settings (the default quality set, one-time seeding marks, a secret the nodes
//! share).

use super::conn::{args, Backend, Pool};
use super::{SqlStore, StoreError};

pub trait SettingStore {
    fn get_setting(&self, key: &str) -> Result<Option<String>, StoreError>;
    fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError>;
    /// `key`'s value, storing `value` first when it has none. Atomic: of callers racing with
    /// different values, all get the one stored first (a secret the nodes generate and share).
    fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError>;
}

const GET: &str = "SELECT value FROM settings WHERE key = $1";

impl<B: Backend> SettingStore for SqlStore<B> {
    fn get_setting(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.backend()
            .with_conn(Pool::Main, |c| c.query_opt(GET, &args![key]))?
            .map(|r| r.string(0))
            .transpose()
    }

    fn set_setting(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            c.execute(
                "INSERT INTO settings (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &args![key, value],
            )
        })?;
        Ok(())
    }

    fn setting_or_insert(&self, key: &str, value: &str) -> Result<String, StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            // A concurrent insert of the same key makes this one wait for it to commit (or, in
            // SQLite, cannot interleave: one connection), then skip; the read after it (a new
            // statement, a new snapshot) sees the winner's value.
            c.execute(
                "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &args![key, value],
            )?;
            c.query_one(GET, &args![key])?.string(0)
        })
    }
}
