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
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, RetryConfig, WriteMultipart,
};
use tokio::io::AsyncReadExt;

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
        let path = self.path(video, name);
        let mut f = tokio::fs::File::open(file).await?;
        let len = f.metadata().await?.len();
        let first = read_part(&mut f).await?;
        let (etag, want) = if (first.len() as u64) == len && first.len() < PART {
            let want = hex(&Md5::digest(&first));
            let put = self.store.put(&path, first.into()).await?;
            (put.e_tag, want)
        } else {
            let upload = self.store.put_multipart(&path).await?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
            let mut digests = Md5::new();
            let mut parts = 0;
            let mut part = first;
            while !part.is_empty() {
                digests.update(Md5::digest(&part));
                parts += 1;
                if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
                    let _ = w.abort().await;
                    return Err(e.into());
                }
                w.put(part);
                part = read_part(&mut f).await?;
            }
            let put = w.finish().await?;
            (put.e_tag, format!("{}-{parts}", hex(&digests.finalize())))
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
async fn read_part(f: &mut tokio::fs::File) -> Result<Bytes, std::io::Error> {
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
