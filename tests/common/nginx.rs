//! nginx in front of daemons with the repository's own configuration
//! (`deploy/nginx-livepack.conf`), as an operator would run it.

use std::path::Path;

use super::proc::Proc;

/// nginx with the repo's `deploy/nginx-livepack.conf`, its nodes, port, cache dir and playback
/// signing key replaced; returns it and its base URL.
pub fn in_front(dir: &Path, nodes: &[&str], playback_key: &str) -> (Proc, String) {
    let conf = std::fs::read_to_string(super::root().join("deploy/nginx-livepack.conf")).unwrap();
    let port = super::free_port(false);
    let servers: String = nodes
        .iter()
        .map(|n| {
            format!(
                "server {} max_fails=1 fail_timeout=5s;\n",
                n.trim_start_matches("http://")
            )
        })
        .collect();
    let shipped = "server 127.0.0.1:8081 max_fails=1 fail_timeout=5s;\n        server 127.0.0.1:8082 max_fails=1 fail_timeout=5s;\n";
    assert!(conf.contains(shipped) && conf.contains("listen 8080;"));
    let conf = conf
        .replace(shipped, &servers)
        .replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
        .replace(
            "/var/cache/nginx/livepack",
            &dir.join("cache").display().to_string(),
        )
        .replace("worker_processes auto;", "")
        .replace("PLAYBACK_SIGNING_KEY", playback_key);
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let p = run(dir, &path, "nginx", "nginx (installed by scripts/test)");
    super::wait_listening(port, "nginx");
    (p, format!("http://127.0.0.1:{port}"))
}

/// nginx with its RTMP module (Debian `libnginx-mod-rtmp`) as an RTMP server on `port`,
/// `live`: more directives in its `live` application (e.g. recording).
pub fn rtmp(dir: &Path, port: u16, live: &str) -> Proc {
    rtmp_with_front(dir, port, live, "")
}

/// [`rtmp`] with its stream module terminating TLS in front of it (`cert`, `key`: PEM files):
/// an RTMPS server on the port returned.
pub fn rtmps(dir: &Path, port: u16, live: &str, cert: &Path, key: &Path) -> (Proc, u16) {
    let tls_port = super::free_port(false);
    let front = format!(
        "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
         stream {{ server {{ listen 127.0.0.1:{tls_port} ssl; ssl_certificate {}; \
         ssl_certificate_key {}; proxy_pass 127.0.0.1:{port}; }} }}\n",
        cert.display(),
        key.display()
    );
    let p = rtmp_with_front(dir, port, live, &front);
    super::wait_listening(tls_port, "nginx's TLS front");
    (p, tls_port)
}

fn rtmp_with_front(dir: &Path, port: u16, live: &str, front: &str) -> Proc {
    let conf = dir.join("nginx.conf");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    std::fs::write(
        &conf,
        format!(
            "load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\n{front}\
             daemon off;\nmaster_process off;\nworker_processes 1;\n\
             pid {pid};\nerror_log {log} warn;\nevents {{ worker_connections 64; }}\n\
             rtmp {{ server {{ listen 127.0.0.1:{port}; application live {{ live on; {live} }} }} }}\n",
            pid = dir.join("nginx.pid").display(),
            log = dir.join("error.log").display(),
        ),
    )
    .unwrap();
    let p = Proc::spawn(
        std::process::Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .stdin(std::process::Stdio::null()),
        "nginx (libnginx-mod-rtmp, installed by scripts/test)",
    );
    super::wait_listening(port, "nginx-rtmp");
    p
}

/// nginx with the repo's `deploy/nginx-livepack-ingest.conf` (its stream module as the TCP load
/// balancer for encoders) in front of the RTMP addresses `nodes` (`host:port`); returns it and
/// its `host:port`.
pub fn ingest_in_front(dir: &Path, nodes: &[&str]) -> (Proc, String) {
    let conf =
        std::fs::read_to_string(super::root().join("deploy/nginx-livepack-ingest.conf")).unwrap();
    let port = super::free_port(false);
    let servers: String = nodes
        .iter()
        .map(|n| format!("server {n} max_fails=1 fail_timeout=5s;\n"))
        .collect();
    let shipped = "server 127.0.0.1:1935 max_fails=1 fail_timeout=5s;\n        server 127.0.0.1:1937 max_fails=1 fail_timeout=5s;\n";
    assert!(conf.contains(shipped) && conf.contains("listen 1934;"));
    let conf = conf
        .replace(shipped, &servers)
        .replace("listen 1934;", &format!("listen 127.0.0.1:{port};"))
        .replace("worker_processes auto;", "");
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let path = dir.join("nginx-ingest.conf");
    std::fs::write(&path, conf).unwrap();
    let p = run(
        dir,
        &path,
        "nginx-ingest",
        "nginx (libnginx-mod-stream, installed by scripts/test)",
    );
    super::wait_listening(port, "nginx's stream balancer");
    (p, format!("127.0.0.1:{port}"))
}

/// nginx in the foreground on `conf`, its pid file and error log in `dir` under `name`.
fn run(dir: &Path, conf: &Path, name: &str, what: &str) -> Proc {
    Proc::spawn(
        std::process::Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(conf)
            .arg("-g")
            .arg(format!(
                "daemon off; master_process off; worker_processes 1; pid {}; error_log {} warn;",
                dir.join(format!("{name}.pid")).display(),
                dir.join(format!("error-{name}.log")).display()
            ))
            .stdin(std::process::Stdio::null()),
        what,
    )
}

/// HAProxy with the repo's `deploy/haproxy-livepack-ingest.cfg` in front of `nodes` (each its
/// RTMP `host:port` and its HTTP port, where `/readyz` is checked); returns it and its
/// `host:port`.
pub fn haproxy_ingest_in_front(dir: &Path, nodes: &[(&str, u16)]) -> (Proc, String) {
    let conf =
        std::fs::read_to_string(super::root().join("deploy/haproxy-livepack-ingest.cfg")).unwrap();
    let port = super::free_port(false);
    let shipped = "    server node-a 127.0.0.1:19351 check port 18081\n    server node-b 127.0.0.1:19352 check port 18082\n";
    assert!(conf.contains(shipped) && conf.contains("    bind :1935\n"));
    let servers: String = nodes
        .iter()
        .enumerate()
        .map(|(i, (rtmp, http))| format!("    server node-{i} {rtmp} check port {http}\n"))
        .collect();
    let conf = conf
        .replace(shipped, &servers)
        .replace("    bind :1935\n", &format!("    bind 127.0.0.1:{port}\n"));
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, conf).unwrap();
    let p = Proc::spawn(
        std::process::Command::new("/usr/sbin/haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null()),
        "haproxy (installed by scripts/test)",
    );
    super::wait_listening(port, "haproxy");
    (p, format!("127.0.0.1:{port}"))
}
