//! A throwaway PostgreSQL server for tests: `initdb` into a fresh temp dir, `postgres` on a
//! free loopback port (and a socket in that dir), one database per test; stopped and deleted
//! when dropped, and also when the test process dies without dropping it (a watchdog shell
//! stops the server once its stdin, held by this process, closes). As root the server runs as
//! the `postgres` user: PostgreSQL refuses to run as root.
//!
//! One implementation for both users: the lib's store tests include this file
//! (`src/db/tests.rs`), the end-to-end suites through `tests/common`. Standard library only
//! (the client tools `pg_isready` and `createdb` instead of a client crate), so async tests
//! can call it too.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// From the start of `postgres` to accepting connections (a cold start on a busy 2-core
/// machine takes a few seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// A port found free can be taken by someone else before the server binds it: try again.
const START_ATTEMPTS: usize = 3;

/// Runs the server in the background, prints its pid, then waits for EOF on stdin (this
/// process closed it, or died), stops the server (immediate shutdown: the data is thrown
/// away) and deletes its directory. `$1` postgres binary, `$2` base dir, `$3` port.
const WATCHDOG: &str = r#"
"$1" -D "$2/data" -p "$3" -k "$2" -c listen_addresses=127.0.0.1 >"$2/log" 2>&1 &
pid=$!
echo "$pid"
cat >/dev/null
kill -QUIT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$2"
"#;

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct PgServer {
    port: u16,
    bin: PathBuf,
    dir: PathBuf,
    /// The watchdog shell; closing its stdin stops everything.
    watchdog: Child,
    stdin: Option<ChildStdin>,
}

impl PgServer {
    /// A server shared by every test of this process (a database each): started on first use,
    /// stopped by the watchdog when the process exits.
    pub fn shared() -> &'static PgServer {
        static SHARED: OnceLock<PgServer> = OnceLock::new();
        SHARED.get_or_init(PgServer::start)
    }

    /// A server of its own, stopped and deleted when dropped.
    pub fn start() -> PgServer {
        PgServer::start_with(None)
    }

    /// A server of its own that speaks TLS with this certificate chain and key (PEM) and refuses
    /// unencrypted TCP connections (`hostssl` only in `pg_hba.conf`; the socket stays `trust`).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> PgServer {
        PgServer::start_with(Some((cert_pem, key_pem)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> PgServer {
        let bin = bin_dir();
        let user = server_user();
        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = std::env::temp_dir().join(format!(
                "livepack-pg-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            if let Some((uid, gid)) = user {
                std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("chown {}: {e}", dir.display()));
            }
            let initdb = as_user(Command::new(bin.join("initdb")), user)
                .current_dir(&dir)
                .arg("-D")
                .arg(dir.join("data"))
                .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
                .args(["--no-sync", "--no-instructions"])
                .output()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.join("initdb").display()));
            assert!(
                initdb.status.success(),
                "initdb failed: {}",
                String::from_utf8_lossy(&initdb.stderr)
            );
            if let Some((cert, key)) = tls {
                configure_tls(&dir.join("data"), cert, key, user);
            }
            let port = free_port();
            let mut watchdog = as_user(Command::new("/bin/sh"), user)
                .current_dir(&dir)
                .args(["-c", WATCHDOG, "sh"])
                .arg(bin.join("postgres"))
                .arg(&dir)
                .arg(port.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn the PostgreSQL watchdog: {e}"));
            let mut line = String::new();
            BufReader::new(watchdog.stdout.take().expect("piped"))
                .read_line(&mut line)
                .expect("the watchdog prints the server's pid");
            let pid: u32 = line.trim().parse().expect("a pid");
            let stdin = watchdog.stdin.take();
            let server = PgServer {
                port,
                bin: bin.clone(),
                dir: dir.clone(),
                watchdog,
                stdin,
            };
            if server.wait_ready(pid) {
                return server;
            }
            last_log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            drop(server);
        }
        panic!("PostgreSQL did not start in {START_ATTEMPTS} attempts; last log:\n{last_log}");
    }

    /// Polls (bounded) until the server accepts connections; `false` if it exited.
    fn wait_ready(&self, pid: u32) -> bool {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if !alive(pid) {
                return false;
            }
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-t", "2", "-p"])
                .arg(self.port.to_string())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory (data, log, socket).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A new empty database; returns its URL.
    pub fn create_database(&self) -> String {
        let name = format!(
            "livepack_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new(self.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(self.port.to_string())
            .arg(&name)
            .output()
            .unwrap_or_else(|e| panic!("spawn createdb: {e}"));
        assert!(
            out.status.success(),
            "createdb {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.url(&name)
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // EOF on the watchdog's stdin: it stops the server and deletes the directory.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.watchdog.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// The server's certificate and key in its data directory (the key private to the server's
/// user, or the server refuses it), TLS on, and TCP clients admitted only over TLS.
fn configure_tls(data: &Path, cert: &str, key: &str, user: Option<(u32, u32)>) {
    use std::os::unix::fs::PermissionsExt;
    for (name, pem) in [("server.crt", cert), ("server.key", key)] {
        let path = data.join(name);
        std::fs::write(&path, pem).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
        }
    }
    let conf = data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).expect("initdb wrote postgresql.conf");
    text.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
    std::fs::write(&conf, text).expect("write postgresql.conf");
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    )
    .expect("write pg_hba.conf");
}

/// Where `initdb`, `postgres`, `pg_isready` and `createdb` are: next to the `initdb` on PATH
/// (through its symlink, as `/usr/local/bin/initdb` may be one), else Debian's
/// `/usr/lib/postgresql/<newest>/bin`.
fn bin_dir() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("initdb"))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .filter(|d| d.join("postgres").is_file() && d.join("createdb").is_file());
    if let Some(dir) = on_path {
        return dir;
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by_key(|(version, _)| *version);
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL server binaries not found (no initdb on PATH or in \
             /usr/lib/postgresql/*/bin): install the `postgresql` package (scripts/test does)"
        ),
    }
}

/// The (uid, gid) to run the server as when this process is root; `None`: as ourselves.
fn server_user() -> Option<(u32, u32)> {
    // /proc/self belongs to the effective user of the process reading it.
    let euid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    if euid != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let ids = |name: &str| {
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
    };
    Some(
        ids("postgres")
            .or_else(|| ids("nobody"))
            .expect("a `postgres` or `nobody` user to run PostgreSQL as (it refuses root)"),
    )
}

/// `cmd` run as `user` (std drops root's supplementary groups when it sets the uid).
fn as_user(mut cmd: Command, user: Option<(u32, u32)>) -> Command {
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Whether process `pid` runs (a zombie, exited and waiting for its parent, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}
