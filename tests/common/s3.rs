//! An S3-compatible object store on loopback for the `storage_url` tests: moto's server (PyPI
//! `moto[server]`, installed by scripts/test into target/pytools), written by nobody here. It
//! keeps its objects in memory: stopped and started again it is an empty store, its bucket made
//! again. Read back with plain HTTP (moto checks no signatures, only that one is there).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::proc::Proc;

pub const BUCKET: &str = "videos";
/// The key prefix the tests' `storage_url` names.
pub const PREFIX: &str = "livepack";

pub struct S3 {
    server: Option<Proc>,
    pub port: u16,
}

impl S3 {
    pub async fn start() -> S3 {
        let mut s3 = S3 {
            server: None,
            port: super::free_port(false),
        };
        s3.start_again().await;
        s3
    }

    /// The store's settings for a daemon talking to `endpoint` (this store, or a proxy of it).
    pub fn env(endpoint: &str) -> Vec<(&'static str, String)> {
        vec![
            ("LIVEPACK_STORAGE_URL", format!("s3://{BUCKET}/{PREFIX}")),
            ("LIVEPACK_STORAGE_ENDPOINT", endpoint.to_owned()),
            ("AWS_ACCESS_KEY_ID", "test-key".into()),
            ("AWS_SECRET_ACCESS_KEY", "test-secret".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        self.server = None;
    }

    /// Serving again on the same port, empty, with its bucket.
    pub async fn start_again(&mut self) {
        let bin = super::root().join("target/pytools/bin/moto_server");
        self.server = Some(Proc::spawn(
            std::process::Command::new(bin)
                .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
            "moto_server (moto[server], installed by scripts/test)",
        ));
        super::wait_listening(self.port, "moto_server");
        let made = reqwest::Client::new()
            .put(format!("{}/{BUCKET}", self.endpoint()))
            .send()
            .await
            .unwrap();
        assert!(made.status().is_success(), "{}", made.status());
    }

    async fn get(&self, path_and_query: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}/{BUCKET}/{path_and_query}", self.endpoint()))
            .header("authorization", "AWS4-HMAC-SHA256 Credential=test-key/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00")
            .send()
            .await
            .unwrap()
    }

    /// The names and sizes of video `id`'s objects.
    pub async fn objects(&self, id: i64) -> Vec<(String, u64)> {
        let prefix = format!("{PREFIX}/videos/{id}/");
        let xml = self
            .get(&format!("?list-type=2&prefix={prefix}"))
            .await
            .text()
            .await
            .unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let mut out = Vec::new();
        for c in doc.descendants().filter(|n| n.has_tag_name("Contents")) {
            let text = |tag: &str| {
                c.children()
                    .find(|n| n.has_tag_name(tag))
                    .and_then(|n| n.text())
                    .unwrap_or("")
                    .to_owned()
            };
            let key = text("Key");
            out.push((
                key.strip_prefix(&prefix).unwrap_or(&key).to_owned(),
                text("Size").parse().unwrap(),
            ));
        }
        out.sort();
        out
    }

    /// Object `name` of video `id`.
    pub async fn object(&self, id: i64, name: &str) -> Vec<u8> {
        let r = self.get(&format!("{PREFIX}/videos/{id}/{name}")).await;
        assert!(r.status().is_success(), "{name}: {}", r.status());
        r.bytes().await.unwrap().to_vec()
    }
}

/// A TCP forwarder to `target` that passes at most `budget` bytes towards it, then holds the
/// rest (the connection stays open, nothing more arrives): an upload stalled mid-way. A
/// negative budget passes everything.
pub async fn stalling(target: u16, budget: i64) -> (u16, Arc<AtomicI64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let left = Arc::new(AtomicI64::new(budget));
    let shared = left.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let left = shared.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let budget = left.load(Ordering::SeqCst);
                    if budget >= 0 && budget < n as i64 {
                        // Held from here on: the upload never completes through this proxy.
                        std::future::pending::<()>().await;
                    }
                    if budget >= 0 {
                        left.fetch_sub(n as i64, Ordering::SeqCst);
                    }
                    if sw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, left)
}
