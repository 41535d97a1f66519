//! The backend several daemons share: PostgreSQL. Inputs: a `postgres://` URL; outputs:
//! connections for [`SqlStore`]'s queries. Versioned migrations run in one transaction under an
//! advisory lock, so daemons starting together never race; a few pooled connections serve
//! concurrent callers.
//!
//! Concurrency, kept equal to SQLite's single writer where it matters: a write that reads
//! before it writes across records (broadcast–stream links and the revisions they move, an
//! overlay count checked against its maximum) runs as [`Tx::Serial`], taking one
//! transaction-scoped advisory lock, so such writes run one at a time across every daemon;
//! single-statement writes (compare-and-set updates, inserts) need no lock, as PostgreSQL
//! re-checks an `UPDATE … WHERE revision = $n` against the row a concurrent writer committed.
//! Reads of several statements ([`Tx::Snapshot`]) see one snapshot. An acknowledged write is
//! durable by PostgreSQL's default `synchronous_commit = on`, which nothing here lowers.

use std::str::FromStr;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use postgres::{Client, IsolationLevel};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::conn::{Backend, Conn, Pg, Pool, Tx};
use super::dialect::Dialect;
use super::pg_tls::{self, TlsSettings};
use super::{schema, SqlStore, StoreError};

/// The PostgreSQL [`super::Store`].
pub type PostgresStore = SqlStore<Postgres>;

pub struct Postgres {
    pool: Connections,
    /// Heartbeats, leases and the node list only ([`CLUSTER_POOL_SIZE`]).
    cluster: Connections,
}

/// Advisory lock keys (`pg_advisory_xact_lock`, per database): ASCII "livepack" and the next.
const MIGRATION_LOCK: i64 = 0x6c69_7665_7061_636b;
const WRITE_LOCK: i64 = MIGRATION_LOCK + 1;

/// Connections per store: enough that API calls, the recorder and the statistics sampler do
/// not queue behind one another, few enough for many daemons on one server's default 100.
const POOL_SIZE: usize = 4;
/// Connections of the cluster's own pool (heartbeats, leases, the node list), apart from
/// [`POOL_SIZE`]: however many requests wait for a connection there, a heartbeat never queues
/// behind them, or a flood of requests could silence a node until it fences itself.
const CLUSTER_POOL_SIZE: usize = 2;
/// A pooled connection is checked with a round trip before use; a dead one is replaced.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// When the URL sets none: an unreachable server fails the start instead of hanging.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A server that vanished without closing its connections (a partition, a host that died) is
/// noticed in about this long, not at the kernel's retransmission limit a quarter of an hour
/// later: data unacknowledged this long closes the connection (`tcp_user_timeout`), and an idle
/// one is probed after this long (keepalives, 3 probes 2 s apart). A statement waiting on a
/// lock is not affected: the server has acknowledged it.
const DEFAULT_DEAD_SERVER_AFTER: Duration = Duration::from_secs(10);
/// Session settings added to the URL's own `options`: a daemon frozen mid-transaction (a
/// partition, a stopped process) would hold the write lock until the server noticed, so the
/// server ends such a session after 30 s, and no statement waits longer than that for a lock.
const SESSION_OPTIONS: &str = "-c idle_in_transaction_session_timeout=30000 -c lock_timeout=30000";

/// Whether `url` is a PostgreSQL URL this store can use (`postgres://` or `postgresql://`,
/// parsed by the client); the reason if not.
pub fn check_url(url: &str) -> Result<(), String> {
    parse_url(url).map(|_| ())
}

/// The client's configuration and what the URL asks of TLS (`sslmode`, `sslrootcert`: see
/// [`super::pg_tls`]).
pub(super) fn parse_url(url: &str) -> Result<(postgres::Config, TlsSettings), String> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
        return Err("expected a postgres:// or postgresql:// URL".into());
    }
    let (url, tls) = pg_tls::split(url).map_err(|e| e.to_string())?;
    let config =
        postgres::Config::from_str(&url).map_err(|e| match std::error::Error::source(&e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        })?;
    Ok((config, tls))
}

impl SqlStore<Postgres> {
    /// Connects to the database at `url` and brings its schema up to date.
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let (mut config, tls) = parse_url(url).map_err(StoreError::BadUrl)?;
        // TLS is not spoken over a Unix socket (the server answers no): there, as in libpq,
        // the mode is ignored.
        let unix_only = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, postgres::config::Host::Unix(_)));
        if unix_only {
            config.ssl_mode(postgres::config::SslMode::Prefer);
        }
        let tls = pg_tls::connector(&tls)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(DEFAULT_DEAD_SERVER_AFTER);
        }
        if !url.contains("keepalives") {
            config
                .keepalives(true)
                .keepalives_idle(DEFAULT_DEAD_SERVER_AFTER)
                .keepalives_interval(Duration::from_secs(2))
                .keepalives_retries(3);
        }
        if config.get_application_name().is_none() {
            config.application_name("livepack");
        }
        let options = match config.get_options() {
            Some(own) => format!("{own} {SESSION_OPTIONS}"),
            None => SESSION_OPTIONS.to_owned(),
        };
        config.options(&options);
        let mut client = config.connect(tls.clone())?;
        migrate(&mut client)?;
        Ok(SqlStore::new(Postgres {
            cluster: Connections::new(config.clone(), tls.clone(), None, CLUSTER_POOL_SIZE),
            pool: Connections::new(config, tls, Some(client), POOL_SIZE),
        }))
    }
}

fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    // A second daemon starting at the same moment waits here, then finds the schema current.
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS livepack_schema (version BIGINT NOT NULL)")?;
    let found: i64 = match tx.query_opt("SELECT version FROM livepack_schema", &[])? {
        Some(row) => row.try_get(0)?,
        None => {
            tx.execute("INSERT INTO livepack_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    let known = schema::known_version();
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    let steps = schema::migrations(Dialect::Postgres).enumerate();
    for (version, sql) in steps.skip(found as usize) {
        tx.batch_execute(&sql)?;
        tx.execute(
            "UPDATE livepack_schema SET version = $1",
            &[&(version as i64 + 1)],
        )?;
    }
    tx.commit()?;
    if found < known {
        tracing::info!(from = found, to = known, "database schema migrated");
    }
    Ok(())
}

/// A few connections, opened on demand, checked before reuse, dropped when broken.
struct Connections {
    config: postgres::Config,
    tls: MakeRustlsConnect,
    size: usize,
    state: Mutex<PoolState>,
    /// Signalled when a connection comes back or a slot frees.
    returned: Condvar,
}

struct PoolState {
    idle: Vec<Client>,
    /// Connections in existence: idle plus lent out.
    open: usize,
}

impl Connections {
    fn new(
        config: postgres::Config,
        tls: MakeRustlsConnect,
        first: Option<Client>,
        size: usize,
    ) -> Connections {
        Connections {
            config,
            tls,
            size,
            state: Mutex::new(PoolState {
                open: first.iter().len(),
                idle: first.into_iter().collect(),
            }),
            returned: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // The state is two plain fields, consistent at every unlock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A live connection: an idle one that answers, a new one while under its size, or
    /// the next one returned.
    fn get(&self) -> Result<Lent<'_>, StoreError> {
        let mut state = self.lock();
        loop {
            if let Some(mut client) = state.idle.pop() {
                drop(state);
                // A connection the server closed (a restart, a terminated backend) looks open
                // until used; one round trip tells before any work is sent on it.
                if !client.is_closed() && client.is_valid(PING_TIMEOUT).is_ok() {
                    return Ok(Lent {
                        pool: self,
                        client: Some(client),
                    });
                }
                drop(client);
                state = self.lock();
                state.open -= 1;
                continue;
            }
            if state.open < self.size {
                state.open += 1;
                drop(state);
                return match self.config.connect(self.tls.clone()) {
                    Ok(client) => Ok(Lent {
                        pool: self,
                        client: Some(client),
                    }),
                    Err(e) => {
                        self.lock().open -= 1;
                        self.returned.notify_one();
                        Err(e.into())
                    }
                };
            }
            state = self.returned.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.lock().idle);
        // A `postgres::Client` closes by blocking on its own runtime, which tokio forbids on
        // an async worker, where the daemon may drop its last handle on the store.
        if !idle.is_empty() {
            let _ = std::thread::spawn(move || drop(idle)).join();
        }
    }
}

/// A connection lent by the pool; back to it on drop, unless broken.
struct Lent<'a> {
    pool: &'a Connections,
    client: Option<Client>,
}

impl std::ops::Deref for Lent<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("present until drop")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if client.is_closed() {
            self.pool.lock().open -= 1;
            drop(client);
        } else {
            self.pool.lock().idle.push(client);
        }
        self.pool.returned.notify_one();
    }
}

impl Postgres {
    fn connections(&self, pool: Pool) -> &Connections {
        match pool {
            Pool::Main => &self.pool,
            Pool::Cluster => &self.cluster,
        }
    }
}

impl Backend for Postgres {
    fn with_conn<T>(
        &self,
        pool: Pool,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.connections(pool).get()?;
        f(&mut Pg(&mut *client))
    }

    fn transaction<T, E: From<StoreError>>(
        &self,
        pool: Pool,
        tx: Tx,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut client = self.connections(pool).get()?;
        let mut t = match tx {
            Tx::Plain | Tx::Serial => client.transaction().map_err(StoreError::from)?,
            Tx::Snapshot => client
                .build_transaction()
                .isolation_level(IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()
                .map_err(StoreError::from)?,
        };
        if tx == Tx::Serial {
            t.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
                .map_err(StoreError::from)?;
        }
        // Returning without committing (an `Err`) rolls back as `t` drops.
        let out = f(&mut Pg(&mut t))?;
        t.commit().map_err(StoreError::from)?;
        Ok(out)
    }
}

/// Where the records live when not in SQLite: a PostgreSQL URL, checked when the configuration
/// is read. Shown (`Debug`, [`DatabaseUrl::redacted`]) without its credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(pub(super) String);

impl DatabaseUrl {
    /// A `postgres://` or `postgresql://` URL the client accepts; the reason if not.
    pub fn parse(url: &str) -> Result<DatabaseUrl, String> {
        let url = url.trim();
        check_url(url)?;
        Ok(DatabaseUrl(url.to_owned()))
    }

    /// Hosts (or socket directories), ports and database: no user, password or parameters.
    pub fn redacted(&self) -> String {
        let Ok((c, _)) = parse_url(&self.0) else {
            return "<invalid URL>".into();
        };
        let ports = c.get_ports();
        let hosts: Vec<String> = c
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let host = match host {
                    ::postgres::config::Host::Tcp(name) if name.contains(':') => {
                        format!("[{name}]")
                    }
                    ::postgres::config::Host::Tcp(name) => name.clone(),
                    ::postgres::config::Host::Unix(dir) => dir.display().to_string(),
                };
                // One port for every host, or one each.
                match ports.get(if ports.len() == 1 { 0 } else { i }) {
                    Some(port) => format!("{host}:{port}"),
                    None => host,
                }
            })
            .collect();
        format!(
            "postgres://{}/{}",
            hosts.join(","),
            c.get_dbname().unwrap_or_default()
        )
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({})", self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::tests::postgres_database;
    use crate::db::SettingStore;

    fn admin(url: &str) -> Client {
        Client::connect(url, postgres::NoTls).unwrap()
    }

    #[test]
    fn daemons_starting_together_migrate_once() {
        let url = postgres_database();
        let barrier = std::sync::Barrier::new(4);
        let stores: Vec<PostgresStore> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        PostgresStore::connect(&url)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        let version: i64 = admin(&url)
            .query_one("SELECT version FROM livepack_schema", &[])
            .unwrap()
            .get(0);
        assert_eq!(version, schema::known_version());
        let rows = admin(&url)
            .query("SELECT 1 FROM livepack_schema", &[])
            .unwrap();
        assert_eq!(rows.len(), 1, "one version row");
        stores[0].set_setting("k", "v").unwrap();
        assert_eq!(stores[3].get_setting("k").unwrap().as_deref(), Some("v"));
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let url = postgres_database();
        drop(PostgresStore::connect(&url).unwrap());
        admin(&url)
            .execute("UPDATE livepack_schema SET version = 99", &[])
            .unwrap();
        assert!(matches!(
            PostgresStore::connect(&url).map(|_| ()).unwrap_err(),
            StoreError::SchemaTooNew { found: 99, known } if known == schema::known_version()
        ));
    }

    #[test]
    fn broken_connections_are_replaced_before_use() {
        let url = postgres_database();
        let store = PostgresStore::connect(&url).unwrap();
        // Several connections in the pool: concurrent callers each hold one.
        let barrier = std::sync::Barrier::new(POOL_SIZE);
        std::thread::scope(|scope| {
            for _ in 0..POOL_SIZE {
                scope.spawn(|| {
                    let mut conn = store.backend().pool.get().unwrap();
                    barrier.wait();
                    conn.execute("SELECT 1", &[]).unwrap();
                });
            }
        });
        assert_eq!(store.backend().pool.lock().idle.len(), POOL_SIZE);
        // The server ends them all (as a restart or an administrator would).
        // (In the select list, not the WHERE clause, where it could run before the filter.)
        let ended = admin(&url)
            .query(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .unwrap()
            .iter()
            .filter(|r| r.get::<_, bool>(0))
            .count();
        assert_eq!(ended, POOL_SIZE);
        for i in 0..2 * POOL_SIZE {
            store.set_setting("k", &i.to_string()).unwrap();
        }
        assert_eq!(store.get_setting("k").unwrap().as_deref(), Some("7"));
    }

    #[test]
    fn a_dead_server_or_a_bad_url_is_an_error_not_a_panic() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = PostgresStore::connect(&format!("postgres://u:secret@127.0.0.1:{port}/x"))
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(e, StoreError::Postgres(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("PostgreSQL") && text.contains("connect") && !text.contains("secret"),
            "{text}"
        );
        for bad in ["mysql://h/x", "postgres://h:port/x", "host=h"] {
            assert!(check_url(bad).is_err(), "{bad}");
            assert!(matches!(
                PostgresStore::connect(bad).map(|_| ()).unwrap_err(),
                StoreError::BadUrl(_)
            ));
        }
        assert!(check_url("postgresql://u:p@h:5433/db?application_name=x").is_ok());
    }

    #[test]
    fn the_last_handle_may_drop_on_an_async_worker() {
        let store = PostgresStore::connect(&postgres_database()).unwrap();
        store.set_setting("k", "v").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // A `postgres::Client` dropped here directly would panic (a runtime inside a runtime).
        runtime.block_on(async move { drop(store) });
    }

    #[test]
    fn sessions_commit_durably_and_bound_lock_waits() {
        let url = format!(
            "{}?options=-c%20statement_timeout%3D5000",
            postgres_database()
        );
        let store = PostgresStore::connect(&url).unwrap();
        let mut conn = store.backend().pool.get().unwrap();
        let mut show =
            |name: &str| -> String { conn.query_one(&format!("SHOW {name}"), &[]).unwrap().get(0) };
        assert_eq!(show("synchronous_commit"), "on");
        assert_eq!(show("lock_timeout"), "30s");
        assert_eq!(show("idle_in_transaction_session_timeout"), "30s");
        assert_eq!(
            show("statement_timeout"),
            "5s",
            "the URL's own options stay"
        );
        assert_eq!(show("application_name"), "livepack");
    }

    #[test]
    fn a_unix_socket_serves_as_well() {
        let tcp = postgres_database();
        let server = crate::db::tests::pg_server::PgServer::shared();
        let name = tcp.rsplit('/').next().unwrap();
        let url = format!(
            "postgresql://postgres@/{name}?host={}&port={}",
            server.dir().display(),
            server.port()
        );
        let store = PostgresStore::connect(&url).unwrap();
        store.set_setting("k", "v").unwrap();
        assert_eq!(
            PostgresStore::connect(&tcp)
                .unwrap()
                .get_setting("k")
                .unwrap()
                .as_deref(),
            Some("v")
        );
    }

    #[test]
    fn errors_name_what_the_server_said() {
        let url = postgres_database();
        let store = PostgresStore::connect(&url).unwrap();
        let e: StoreError = store
            .backend()
            .pool
            .get()
            .unwrap()
            .execute("SELECT * FROM no_such_table", &[])
            .unwrap_err()
            .into();
        let text = e.to_string();
        assert!(
            text.contains("no_such_table") && text.contains("42P01"),
            "{text}"
        );
    }
}
