//! Videos on S3-compatible object storage (`storage_url`): the client (object_store's S3, with
//! path-style requests and plain-http endpoints for S3-compatible servers), where a video's
//! objects live, uploads verified against the local file (one PUT, or a multipart upload in
//! bounded parallel parts for large files), sizes and ranged reads for delivery, deletion.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, MultipartUpload, ObjectStore, PutResult,
    RetryConfig,
};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Files up to this size go in one PUT; larger ones in parts of this size (S3's minimum part
/// is 5 MiB; 8 MiB parts keep a 10-hour recording far below S3's 10,000 parts).
pub const PART: usize = 8 << 20;
/// Parts of one file in flight at once: the memory an upload holds is about
/// `PART × (PARTS_IN_FLIGHT + 1)`.
pub const PARTS_IN_FLIGHT: usize = 4;
/// One request of an upload (a PUT, a part) that takes longer has failed.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// Object sizes remembered for delivery (objects never change; a deleted video's requests
/// stop at its record).
const SIZES_KEPT: usize = 10_000;

/// Where and how to reach the object store: `storage_url` and what the standard `AWS_*`
/// variables do not say.
#[derive(Clone, Default, PartialEq)]
pub struct StorageSettings {
    /// `s3://bucket[/prefix]`.
    pub url: String,
    /// An S3-compatible server's URL (`http://127.0.0.1:9000`); absent: AWS (or
    /// `AWS_ENDPOINT_URL`).
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

impl std::fmt::Debug for StorageSettings {
    // The secret key is never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageSettings")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("storage_url must be s3://bucket[/prefix]")]
    Url,
    #[error("object storage: {0}")]
    Store(#[from] object_store::Error),
    #[error("reading the local file: {0}")]
    Io(#[from] std::io::Error),
    #[error("the object store kept {name} with ETag {got}, not the local file's {want}")]
    Mismatch {
        name: String,
        got: String,
        want: String,
    },
    #[error("the daemon is shutting down")]
    Stopped,
}

impl StorageError {
    /// The object is not there (as opposed to the store failing).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            StorageError::Store(object_store::Error::NotFound { .. })
        )
    }
}

pub struct Storage {
    store: Arc<dyn ObjectStore>,
    reader: Arc<dyn ObjectStore>,
    prefix: Path,
    /// `s3://bucket/prefix`, for logs.
    shown: String,
    sizes: Mutex<std::collections::HashMap<(i64, String), u64>>,
    /// Set at shutdown: a multipart upload under way is aborted, not left open in the bucket.
    stopped: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Storage {
    pub fn new(settings: &StorageSettings) -> Result<Storage, StorageError> {
        let url = url::Url::parse(&settings.url).map_err(|_| StorageError::Url)?;
        let bucket = url.host_str().filter(|b| !b.is_empty());
        let (Some(bucket), "s3") = (bucket, url.scheme()) else {
            return Err(StorageError::Url);
        };
        let prefix = url.path().trim_matches('/');
        let connect = ClientOptions::new().with_connect_timeout(Duration::from_secs(5));
        Ok(Storage {
            // A store that stops answering fails an upload's request (and it is tried again)
            // rather than holding it forever.
            store: Arc::new(s3(
                settings,
                bucket,
                connect.clone().with_timeout(UPLOAD_TIMEOUT),
            )?),
            // Delivery streams large ranges to slow clients: no deadline on a whole answer.
            reader: Arc::new(s3(settings, bucket, connect.with_timeout_disabled())?),
            prefix: Path::from(prefix),
            shown: format!("s3://{bucket}/{prefix}"),
            sizes: Mutex::new(Default::default()),
            stopped: tokio::sync::watch::Sender::new(false),
        })
    }

    fn path(&self, video: i64, name: &str) -> Path {
        let mut p = self.prefix.clone();
        for part in ["videos", &video.to_string(), name] {
            p = p.child(part);
        }
        p
    }

    /// Uploads `file` as the video's object `name` and checks that the store kept what was
    /// sent (its ETag against the MD5 of the file, per part for a multipart upload). Returns
    /// the bytes uploaded.
    pub async fn upload(
        &self,
        video: i64,
        name: &str,
        file: &std::path::Path,
    ) -> Result<u64, StorageError> {
        let f = tokio::fs::File::open(file).await?;
        let len = f.metadata().await?.len();
        self.upload_from(video, name, f, len).await
    }

    /// [`Storage::upload`] of what `reader` gives (`len` bytes). A multipart upload that fails
    /// anywhere (a read, a part, its completion) is aborted, so the bucket keeps no orphaned
    /// parts: storage that is billed and listed, never seen as an object.
    async fn upload_from(
        &self,
        video: i64,
        name: &str,
        mut reader: impl AsyncRead + Unpin,
        len: u64,
    ) -> Result<u64, StorageError> {
        let path = self.path(video, name);
        let mut stopped = self.stopped.subscribe();
        let first = read_part(&mut reader).await?;
        let (etag, want) = if (first.len() as u64) == len && first.len() < PART {
            let want = hex(&Md5::digest(&first));
            let put = tokio::select! {
                put = self.store.put(&path, first.into()) => put?,
                _ = stopped.wait_for(|s| *s) => return Err(StorageError::Stopped),
            };
            (put.e_tag, want)
        } else {
            let mut upload = self.store.put_multipart(&path).await?;
            let sent = tokio::select! {
                sent = send_parts(&mut *upload, &mut reader, first) => sent,
                _ = stopped.wait_for(|s| *s) => Err(StorageError::Stopped),
            };
            match sent {
                Ok((put, want)) => (put.e_tag, want),
                Err(e) => {
                    if let Err(abort) = upload.abort().await {
                        tracing::warn!(video, name, error = %abort, "cannot abort a failed multipart upload");
                    }
                    return Err(e);
                }
            }
        };
        // An ETag that is not an MD5 (server-side encryption with KMS keys) is not checked.
        let got = etag.unwrap_or_default().trim_matches('"').to_owned();
        let checkable = got.split('-').next().is_some_and(|h| h.len() == 32);
        if checkable && got != want {
            return Err(StorageError::Mismatch {
                name: name.to_owned(),
                got,
                want,
            });
        }
        self.remember(video, name, len);
        Ok(len)
    }

    /// Shutdown: uploads under way end with [`StorageError::Stopped`], their multipart uploads
    /// aborted (the upload's journal lets the next run resume past the files confirmed).
    pub fn stop_uploads(&self) {
        self.stopped.send_replace(true);
    }

    fn remember(&self, video: i64, name: &str, size: u64) {
        let mut sizes = self.sizes.lock().unwrap_or_else(|p| p.into_inner());
        if sizes.len() >= SIZES_KEPT {
            sizes.clear();
        }
        sizes.insert((video, name.to_owned()), size);
    }

    /// The size of the video's object `name`.
    pub async fn size(&self, video: i64, name: &str) -> Result<u64, StorageError> {
        let known = self
            .sizes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(video, name.to_owned()))
            .copied();
        if let Some(size) = known {
            return Ok(size);
        }
        let meta = self.store.head(&self.path(video, name)).await?;
        self.remember(video, name, meta.size as u64);
        Ok(meta.size as u64)
    }

    /// Bytes `start..=end` of the video's object `name`, as they come.
    pub async fn read(
        &self,
        video: i64,
        name: &str,
        start: u64,
        end: u64,
    ) -> Result<BoxStream<'static, Result<Bytes, std::io::Error>>, StorageError> {
        let options = GetOptions {
            range: Some(GetRange::Bounded(start..end + 1)),
            ..GetOptions::default()
        };
        let got = self
            .reader
            .get_opts(&self.path(video, name), options)
            .await?;
        Ok(got
            .into_stream()
            .map_err(|e| std::io::Error::other(e.to_string()))
            .boxed())
    }

    /// Removes every object of the video; returns how many there were.
    pub async fn delete_video(&self, video: i64) -> Result<usize, StorageError> {
        let mut dir = self.prefix.clone();
        for part in ["videos", &video.to_string()] {
            dir = dir.child(part);
        }
        let names = self.store.list(Some(&dir)).map_ok(|m| m.location).boxed();
        let deleted: Vec<Path> = self.store.delete_stream(names).try_collect().await?;
        self.sizes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(v, _), _| *v != video);
        Ok(deleted.len())
    }
}

/// An S3 client for `settings` with `options`; the rest from the `AWS_*` variables.
fn s3(
    settings: &StorageSettings,
    bucket: &str,
    options: ClientOptions,
) -> Result<object_store::aws::AmazonS3, StorageError> {
    // Client options first: setting them replaces what `from_env` read into them.
    let mut builder = AmazonS3Builder::from_env()
        .with_client_options(options)
        .with_bucket_name(bucket)
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 3,
            retry_timeout: Duration::from_secs(30),
        });
    let endpoint = settings
        .endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
    if let Some(endpoint) = &endpoint {
        builder = builder
            .with_endpoint(endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            // S3-compatible servers (MinIO, Ceph, Garage, moto) address buckets by path.
            .with_virtual_hosted_style_request(false);
    }
    if let Some(region) = &settings.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &settings.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &settings.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    Ok(builder.build()?)
}

/// Up to [`PART`] bytes of `f` (fewer only at its end).
/// The parts of a multipart upload, `first` and what `reader` gives after it, at most
/// [`PARTS_IN_FLIGHT`] at once, then its completion; the ETag to expect (the MD5 of the parts'
/// MD5s, then their count). Fails at the first error: the caller aborts the upload.
async fn send_parts(
    upload: &mut dyn MultipartUpload,
    reader: &mut (impl AsyncRead + Unpin),
    first: Bytes,
) -> Result<(PutResult, String), StorageError> {
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut digests = Md5::new();
    let mut parts = 0;
    let mut part = first;
    while !part.is_empty() {
        digests.update(Md5::digest(&part));
        parts += 1;
        while in_flight.len() >= PARTS_IN_FLIGHT {
            if let Some(sent) = in_flight.next().await {
                sent?;
            }
        }
        in_flight.push(upload.put_part(part.into()));
        part = read_part(reader).await?;
    }
    while let Some(sent) = in_flight.next().await {
        sent?;
    }
    let put = upload.complete().await?;
    Ok((put, format!("{}-{parts}", hex(&digests.finalize()))))
}

async fn read_part(f: &mut (impl AsyncRead + Unpin)) -> Result<Bytes, std::io::Error> {
    let mut buf = Vec::with_capacity(PART);
    (&mut *f).take(PART as u64).read_to_end(&mut buf).await?;
    Ok(Bytes::from(buf))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// moto's S3 server (scripts/test installs it) on a free port, killed when dropped.
    struct Moto(std::process::Child, u16);

    impl Drop for Moto {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    async fn moto() -> Moto {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let bin =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pytools/bin/moto_server");
        let child = std::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("moto_server (moto[server], installed by scripts/test)");
        let moto = Moto(child, port);
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let made = reqwest::Client::new()
            .put(format!("http://127.0.0.1:{port}/bucket"))
            .send()
            .await
            .unwrap();
        assert!(made.status().is_success());
        moto
    }

    fn settings(port: u16) -> StorageSettings {
        StorageSettings {
            url: "s3://bucket/some/prefix".into(),
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            region: Some("us-east-1".into()),
            access_key_id: Some("key".into()),
            secret_access_key: Some("secret".into()),
        }
    }

    async fn read_all(s: &Storage, start: u64, end: u64) -> Vec<u8> {
        let mut body = s.read(7, "big.mp4", start, end).await.unwrap();
        let mut out = Vec::new();
        while let Some(chunk) = body.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }

    /// A file of three parts goes up as a multipart upload (its ETag checked against the MD5
    /// of the parts' MD5s) and comes back the same, whole and across a part boundary, through
    /// a client that knows nothing of the upload; deleting the video removes it.
    #[tokio::test]
    async fn a_large_file_goes_up_in_parts_and_comes_back_the_same() {
        let moto = moto().await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.mp4");
        let len = 2 * PART + 12_345;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4093) as u8).collect();
        std::fs::write(&file, &bytes).unwrap();
        let up = Storage::new(&settings(moto.1)).unwrap();
        assert_eq!(up.upload(7, "big.mp4", &file).await.unwrap(), len as u64);

        let down = Storage::new(&settings(moto.1)).unwrap();
        assert_eq!(down.size(7, "big.mp4").await.unwrap(), len as u64);
        assert_eq!(read_all(&down, 0, len as u64 - 1).await, bytes);
        let (a, b) = (PART as u64 - 10, PART as u64 + 10);
        assert_eq!(read_all(&down, a, b).await, &bytes[a as usize..=b as usize]);

        assert_eq!(down.delete_video(7).await.unwrap(), 1);
        let gone = Storage::new(&settings(moto.1)).unwrap();
        assert!(gone.size(7, "big.mp4").await.unwrap_err().is_not_found());
    }

    /// Which request the proxy in front of moto refuses.
    #[derive(Clone, Copy, PartialEq)]
    enum Refuse {
        Nothing,
        SecondPart,
        Completion,
    }

    /// An HTTP proxy in front of moto that refuses (400, which is not retried) the request
    /// `refuse` names: a store that fails a part or a completion. Returns its port.
    async fn refusing_proxy(moto: u16, refuse: Arc<Mutex<Refuse>>) -> u16 {
        use http_body_util::{BodyExt, Full};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                let (client, refuse) = (client.clone(), refuse.clone());
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (client, refuse) = (client.clone(), refuse.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await?.to_bytes();
                            let query = parts.uri.query().unwrap_or("");
                            let refused = match *refuse.lock().unwrap() {
                                Refuse::Nothing => false,
                                Refuse::SecondPart => {
                                    parts.method == hyper::Method::PUT
                                        && query.contains("partNumber=2")
                                }
                                Refuse::Completion => {
                                    parts.method == hyper::Method::POST
                                        && query.contains("uploadId=")
                                }
                            };
                            if refused {
                                let mut r = hyper::Response::new(Full::new(Bytes::from_static(
                                    b"<Error><Code>InvalidRequest</Code></Error>",
                                )));
                                *r.status_mut() = hyper::StatusCode::BAD_REQUEST;
                                return Ok::<_, hyper::Error>(r);
                            }
                            let target = format!(
                                "http://127.0.0.1:{moto}{}",
                                parts.uri.path_and_query().map_or("/", |p| p.as_str())
                            );
                            let mut headers = parts.headers.clone();
                            headers.remove(hyper::header::HOST);
                            let answer = client
                                .request(parts.method, target)
                                .headers(headers)
                                .body(body)
                                .send()
                                .await
                                .unwrap();
                            let mut r = hyper::Response::builder().status(answer.status());
                            for (k, v) in answer.headers() {
                                if k != hyper::header::CONTENT_LENGTH
                                    && k != hyper::header::TRANSFER_ENCODING
                                {
                                    r = r.header(k, v);
                                }
                            }
                            let bytes = answer.bytes().await.unwrap();
                            Ok(r.body(Full::new(bytes)).unwrap())
                        }
                    },
                );
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(socket), service),
                );
            }
        });
        port
    }

    /// The multipart uploads moto holds open in the bucket (S3's ListMultipartUploads).
    async fn open_uploads(moto: u16) -> usize {
        let xml = reqwest::get(format!("http://127.0.0.1:{moto}/bucket?uploads"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        xml.matches("<Upload>").count()
    }

    /// Gives `n` bytes, then fails (`fail`: a disk read error in the middle of an upload) or
    /// gives nothing, ever (a file read that hangs).
    struct ShortReader {
        n: u64,
        fail: bool,
    }

    impl AsyncRead for ShortReader {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.n == 0 {
                return match self.fail {
                    true => {
                        std::task::Poll::Ready(Err(std::io::Error::other("induced read error")))
                    }
                    false => std::task::Poll::Pending,
                };
            }
            let n = (buf.remaining() as u64).min(self.n) as usize;
            buf.put_slice(&vec![7u8; n]);
            self.n -= n as u64;
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A multipart upload that fails on a read, on a part or on its completion is aborted:
    /// the bucket lists no open upload; the next try of the same file succeeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_multipart_upload_leaves_no_parts_behind() {
        let moto = moto().await;
        let refuse = Arc::new(Mutex::new(Refuse::Nothing));
        let proxy = refusing_proxy(moto.1, refuse.clone()).await;
        let store = Storage::new(&settings(proxy)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.mp4");
        let len = 2 * PART + 1000;
        std::fs::write(&file, vec![3u8; len]).unwrap();

        let len64 = len as u64;
        let read = store
            .upload_from(
                1,
                "big.mp4",
                ShortReader {
                    n: PART as u64 + 10,
                    fail: true,
                },
                len64,
            )
            .await;
        assert!(matches!(read, Err(StorageError::Io(_))), "{read:?}");
        assert_eq!(open_uploads(moto.1).await, 0, "after a read error");

        for how in [Refuse::SecondPart, Refuse::Completion] {
            *refuse.lock().unwrap() = how;
            let failed = store.upload(1, "big.mp4", &file).await;
            assert!(failed.is_err());
            assert_eq!(open_uploads(moto.1).await, 0, "after a refused request");
        }
        *refuse.lock().unwrap() = Refuse::Nothing;
        assert_eq!(store.upload(1, "big.mp4", &file).await.unwrap(), len64);
        assert_eq!(open_uploads(moto.1).await, 0);
        assert_eq!(store.size(1, "big.mp4").await.unwrap(), len64);
    }

    /// Shutdown in the middle of a multipart upload: it ends at once and is aborted, so the
    /// bucket lists no open upload.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shutdown_aborts_the_multipart_upload_under_way() {
        let moto = moto().await;
        let store = Arc::new(Storage::new(&settings(moto.1)).unwrap());
        let len = 3 * PART as u64;
        let upload = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .upload_from(
                        1,
                        "big.mp4",
                        ShortReader {
                            n: PART as u64 + 10,
                            fail: false,
                        },
                        len,
                    )
                    .await
            }
        });
        let mut open = 0;
        for _ in 0..100 {
            open = open_uploads(moto.1).await;
            if open == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(open, 1, "the multipart upload is under way");
        store.stop_uploads();
        let ended = tokio::time::timeout(Duration::from_secs(10), upload)
            .await
            .expect("the upload ends at the stop")
            .unwrap();
        assert!(matches!(ended, Err(StorageError::Stopped)), "{ended:?}");
        assert_eq!(open_uploads(moto.1).await, 0, "aborted, not left open");
    }

    #[test]
    fn only_s3_urls_with_a_bucket_are_taken() {
        for bad in ["https://bucket/x", "s3://", "bucket/prefix", "s3:///prefix"] {
            let s = StorageSettings {
                url: bad.into(),
                ..settings(1)
            };
            assert!(matches!(Storage::new(&s), Err(StorageError::Url)), "{bad}");
        }
        assert_eq!(
            format!("{:?}", Storage::new(&settings(1)).unwrap()),
            "s3://bucket/some/prefix"
        );
        assert!(!format!("{:?}", settings(1)).contains("secret"));
    }
}
