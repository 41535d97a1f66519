//! The `livepack` binary: flags, configuration, logging, runtime, signals → graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use livepack::config::{self, Config, Layer};
use livepack::daemon::{self, KeySource};
use livepack::service_notify::Notifier;

/// Self-hosted live-media ingest and packaging daemon.
///
/// Settings come from livepack.toml, then LIVEPACK_* environment variables, then these flags.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// TOML configuration file [default: ./livepack.toml if present]
    #[arg(long, env = "LIVEPACK_CONFIG")]
    config: Option<PathBuf>,
    /// Control API and media delivery address [default: 127.0.0.1:8080]
    #[arg(long)]
    http_addr: Option<SocketAddr>,
    /// RTMP ingest address [default: 0.0.0.0:1935]
    #[arg(long)]
    rtmp_addr: Option<SocketAddr>,
    /// RTMPS ingest address [default: 0.0.0.0:1936]
    #[arg(long)]
    rtmps_addr: Option<SocketAddr>,
    /// SRT ingest address [default: 0.0.0.0:5001]
    #[arg(long)]
    srt_addr: Option<SocketAddr>,
    /// Directory for the database, keys and media [default: ./data]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Comma-separated API keys [default: one generated into DATA_DIR/api_key]
    #[arg(long)]
    api_keys: Option<String>,
    /// Base URL used in returned URLs, e.g. https://live.example.com
    #[arg(long)]
    public_url: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the configuration reference (Markdown): every setting, its variable, flag, default.
    ConfigReference,
    /// Print the manual page (roff): the flags, and where the settings are documented.
    Man,
    /// Print a livepack.toml listing every setting commented out.
    ConfigTemplate {
        /// Write `KEY = VALUE` (VALUE in TOML) uncommented, e.g. --set data_dir='"/var/lib/x"'.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// A PULL source's process, started by the daemon (its request on stdin).
    #[command(name = livepack::pull_source::COMMAND, hide = true)]
    PullSource,
}

/// The manual page: clap's rendering of the flags and subcommands, then the settings, the files
/// and where the rest is documented.
fn print_man() -> anyhow::Result<()> {
    use clap::CommandFactory;
    let command = Args::command().name("livepack").after_long_help(MAN_MORE);
    clap_mangen::Man::new(command)
        .section("8")
        .render(&mut std::io::stdout().lock())?;
    Ok(())
}

const MAN_MORE: &str = "\
Every setting is a key of the TOML file, a LIVEPACK_* environment variable (the key in capitals) \
and, for a few, a flag; later sources win: defaults, the file, the environment, the flags. \
`livepack config-reference` prints them all with their defaults and ranges; \
`livepack config-template` prints a commented livepack.toml.

Files (Debian package): /etc/livepack/livepack.toml (the settings), /var/lib/livepack (the data \
dir: the SQLite database, the API key, recordings), /usr/share/doc/livepack/book/index.html \
(the book: guides, references, troubleshooting). A running daemon serves its API reference at \
/docs/api.

Signals: SIGTERM or SIGINT stops the daemon cleanly (refuses newcomers, finishes recordings and \
webhooks, exits 0 within shutdown_timeout_secs); a second one exits at once.";

/// Each setting that has a flag, with the flag: the flags are named after the file keys.
fn flags() -> Vec<(String, String)> {
    use clap::CommandFactory;
    Args::command()
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|long| (long.replace('-', "_"), format!("--{long}")))
        .filter(|(key, _)| config::KEYS.contains(&key.as_str()))
        .collect()
}

impl Args {
    fn layer(&self) -> Layer {
        Layer {
            http_addr: self.http_addr,
            rtmp_addr: self.rtmp_addr,
            rtmps_addr: self.rtmps_addr,
            srt_addr: self.srt_addr,
            data_dir: self.data_dir.clone(),
            api_keys: self.api_keys.as_deref().map(config::split_keys),
            public_url: self.public_url.clone(),
            ..Layer::default()
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Some(Command::PullSource) => {
            // The daemon hands its format down (see `logging::FORMAT_ENV`).
            let format = std::env::var(livepack::logging::FORMAT_ENV).ok();
            livepack::logging::init(
                format
                    .as_deref()
                    .and_then(livepack::logging::LogFormat::parse)
                    .unwrap_or_default(),
            );
            std::process::exit(livepack::pull_source::run());
        }
        Some(Command::Man) => {
            print_man()?;
            return Ok(());
        }
        Some(Command::ConfigReference) => {
            print!("{}", config::reference::markdown(&flags()));
            return Ok(());
        }
        Some(Command::ConfigTemplate { set }) => {
            let set = set
                .iter()
                .map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
                        .with_context(|| format!("--set {kv}: expected KEY=VALUE"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            print!(
                "{}",
                config::reference::toml_template(&set).map_err(anyhow::Error::msg)?
            );
            return Ok(());
        }
        None => {}
    }
    reexec_with_malloc_tunables();
    // Before any thread: the service manager's variables are taken out of the environment.
    let notifier = livepack::service_notify::Notifier::from_env();
    livepack::heap::on_release(trim_heap);
    software_gl_for_overlays();
    // WebKit's processes inherit the proxy variables, so they are set before any thread exists.
    let page_proxy =
        livepack::page_proxy::install().context("cannot bind the overlay page proxy")?;
    let (path, required) = match &args.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_CONFIG_FILE), false),
    };
    let file = Layer::from_file(&path, required)?;
    let env = Layer::from_env(|k| std::env::var(k).ok())?;
    let config = Config::from_layer(args.layer().over(env.over(file)))?;
    livepack::logging::init(config.log_format);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run(config, page_proxy, notifier))
}

async fn run(
    config: Config,
    page_proxy: Option<std::net::TcpListener>,
    notifier: Option<Arc<Notifier>>,
) -> anyhow::Result<()> {
    let shutdown_timeout = config.shutdown_timeout;
    let running = daemon::start(config, page_proxy).await?;
    // The banner is the contract with scripts/run and the tests: one `key: value` per line.
    println!("livepack {} ready", env!("CARGO_PKG_VERSION"));
    println!("http: {}", running.http_addr);
    if let Some(addr) = running.https_addr {
        println!("https: {addr}");
    }
    println!("rtmp: {}", running.rtmp_addr);
    println!("rtmps: {}", running.rtmps_addr);
    println!("srt: {}", running.srt_addr);
    // One line per shared WHIP ICE address; `off` when that mux is disabled.
    let udp: Vec<String> = running
        .whip_udp_addrs
        .iter()
        .map(ToString::to_string)
        .collect();
    println!(
        "whip_udp: {}",
        if udp.is_empty() {
            "off".to_owned()
        } else {
            udp.join(",")
        }
    );
    println!(
        "whip_tcp: {}",
        running
            .whip_tcp_addr
            .map_or("off".to_owned(), |a| a.to_string())
    );
    println!("public_url: {}", running.public_url);
    match &running.key_source {
        KeySource::Configured => println!("api_key: (configured)"),
        // The key is shown once, when generated; after that it is in the file (0600) only.
        KeySource::Generated { path, key } => {
            println!("api_key: {key}");
            println!("api_key_file: {}", path.display());
        }
        KeySource::DataDir { path } => println!("api_key_file: {}", path.display()),
    }
    println!(
        "try: curl -H 'Authorization: apikey <key>' {}/streaming/streams",
        running.public_url.as_str().trim_end_matches('/')
    );

    let mut signals = Signals::new()?;
    if let Some(n) = &notifier {
        n.ready(&format!("serving at {}", running.public_url));
        livepack::service_notify::spawn_watchdog(n);
    }
    signals.next().await;
    if let Some(n) = &notifier {
        n.stopping();
    }
    tracing::info!(within = ?shutdown_timeout, "shutting down");
    // Bounded, and a second signal cuts it short: an operator's second Ctrl-C, or a service
    // manager's stop that escalates, means now.
    tokio::select! {
        _ = running.shutdown() => {
            tracing::info!("stopped");
            return Ok(());
        }
        _ = tokio::time::sleep(shutdown_timeout) => {
            tracing::warn!("shutdown not finished within shutdown_timeout_secs; exiting");
        }
        _ = signals.next() => tracing::warn!("second signal; exiting now"),
    }
    // Not finished: a failure to the service manager. Now, as the runtime's drop would wait
    // for blocking tasks still running.
    std::process::exit(1)
}

/// SIGTERM and SIGINT, either.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// HTML overlays render with WPE WebKit on Mesa's software GL (no GPU needed). Set while the
/// process is still single-threaded. `1`, not `true`: GStreamer 1.22's `wpevideosrc` treats
/// the exact string `true` as a cue to fix its output at 1920×1080, 30 fps, whatever is asked;
/// Mesa reads both as true.
fn software_gl_for_overlays() {
    const VAR: &str = "LIBGL_ALWAYS_SOFTWARE";
    match std::env::var(VAR).as_deref() {
        Ok("0") | Ok("false") => {} // the operator wants the GPU
        Ok("1") => {}
        _ => std::env::set_var(VAR, "1"),
    }
}

/// glibc's mmap threshold follows the largest block freed, so after the first decoded frame
/// (1.4 MB at 720p) every frame and encoder buffer comes from the per-thread arenas, which keep
/// what a torn-down pipeline freed: `scripts/soak`'s churn of 8 streams peaked at 1.6 GB and kept
/// 1.1 GB resident once every stream had ended. A fixed 256 KiB threshold maps big buffers and
/// returns them on free: 650 MB peak, 250 MB after. glibc reads it only at process start, hence
/// the re-exec (before any thread exists); an operator's own setting is respected.
fn reexec_with_malloc_tunables() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        const VAR: &str = "MALLOC_MMAP_THRESHOLD_";
        let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        if std::env::var_os(VAR).is_some() || tunables.contains("glibc.malloc.mmap_threshold") {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut argv = std::env::args_os();
        let error = std::process::Command::new(exe)
            .arg0(argv.next().unwrap_or_default())
            .args(argv)
            .env(VAR, "262144")
            .exec();
        eprintln!("warning: could not re-exec with {VAR} set ({error}); continuing without");
    }
}

/// Gives the heap a finished stream freed back to the system. glibc keeps freed memory in its
/// per-thread arenas (the streaming threads' many small and medium blocks, below the mmap
/// threshold) until asked: 300 publish/unpublish cycles left 461 MiB resident with every
/// stream gone, 109 MiB after one `malloc_trim(0)` (gdb, same process). A trim walks the
/// arenas for a few milliseconds, once per pipeline, per forgotten stream and per PULL attempt,
/// on a blocking thread.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim takes no pointers and locks each arena it walks; it is
        // safe to call from any thread at any time.
        unsafe {
            malloc_trim(0);
        }
    }
}
