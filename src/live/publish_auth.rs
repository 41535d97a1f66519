//! The publish authorization hook (`publish_auth_url`): after the daemon's own checks (token,
//! active, not PULL), the customer's service is asked `{stream_id, protocol, slot,
//! remote_addr, query}` and only a 2xx within the timeout lets the publisher in. Fail closed:
//! no answer, an error or a redirect is a refusal. A yes is remembered briefly for the same
//! (stream, slot, protocol, address, query), so an encoder's reconnect storm costs the service
//! one call.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use url::Url;

use super::{Protocol, Slot};
use crate::url_policy::client::{self, Outbound, OutboundClient};

/// Answers remembered at most (the oldest half is dropped beyond).
const CACHE_MAX: usize = 10_000;
/// Bytes of the service's answer read before the connection is let go.
const MAX_ANSWER_BODY: usize = 16 * 1024;

/// How the hook is reached (`publish_auth_*` settings).
#[derive(Debug, Clone)]
pub struct PublishAuthConfig {
    pub url: Url,
    /// The whole call: connect, send, the answer's head.
    pub timeout: Duration,
    /// How long a yes stands for the same caller; zero: never remembered.
    pub cache: Duration,
}

/// What the publisher brings besides its token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The TCP peer (RTMP, WHIP's HTTP request) or UDP peer (SRT).
    pub remote: Option<SocketAddr>,
    /// Its parameters other than the token, `k=v&…` (RTMP: after the key's `?`; SRT: the
    /// stream id's other access-control keys; WHIP: the URL's query).
    pub query: String,
}

/// Why the hook did not let a publisher in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookRefusal {
    #[error("refused by the authorization service (HTTP {0})")]
    Refused(u16),
    #[error("authorization service unavailable: {0}")]
    Unavailable(String),
}

#[derive(Serialize)]
struct Question<'a> {
    stream_id: i64,
    protocol: Protocol,
    slot: Slot,
    remote_addr: Option<String>,
    query: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    stream_id: i64,
    slot: Slot,
    protocol: Protocol,
    ip: Option<IpAddr>,
    query: String,
}

pub struct PublishAuth {
    config: PublishAuthConfig,
    client: OutboundClient,
    allowed: Mutex<HashMap<Key, Instant>>,
}

impl std::fmt::Debug for PublishAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishAuth")
            .field("url", &crate::url_policy::redact(self.config.url.as_str()))
            .finish()
    }
}

impl PublishAuth {
    pub fn new(config: PublishAuthConfig) -> Result<PublishAuth, reqwest::Error> {
        let client = client::build(Outbound::publish_auth(), |b| {
            b.timeout(config.timeout)
                .connect_timeout(config.timeout)
                .user_agent(concat!(
                    "livepack/",
                    env!("CARGO_PKG_VERSION"),
                    " publish-auth"
                ))
        })?;
        Ok(PublishAuth {
            config,
            client,
            allowed: Mutex::new(HashMap::new()),
        })
    }

    /// Asks the service whether this publish may go ahead.
    pub async fn check(
        &self,
        stream_id: i64,
        slot: Slot,
        protocol: Protocol,
        caller: &Caller,
    ) -> Result<(), HookRefusal> {
        let key = Key {
            stream_id,
            slot,
            protocol,
            ip: caller.remote.map(|a| a.ip()),
            query: caller.query.clone(),
        };
        if self.remembered(&key) {
            return Ok(());
        }
        let question = Question {
            stream_id,
            protocol,
            slot,
            remote_addr: caller.remote.map(|a| a.to_string()),
            query: &caller.query,
        };
        let status = self.ask(&question).await?;
        if !(200..300).contains(&status) {
            return Err(HookRefusal::Refused(status));
        }
        self.remember(key);
        Ok(())
    }

    async fn ask(&self, question: &Question<'_>) -> Result<u16, HookRefusal> {
        let body = serde_json::to_vec(question).expect("the question always serializes");
        let request = self
            .client
            .request(reqwest::Method::POST, &self.config.url)
            .map_err(|e| HookRefusal::Unavailable(e.to_string()))?
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let mut answer = request
            .send()
            .await
            .map_err(|e| HookRefusal::Unavailable(crate::url_policy::describe(&e)))?;
        let status = answer.status().as_u16();
        let mut read = 0;
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, answer.chunk()).await {
            read += chunk.len();
            if read > MAX_ANSWER_BODY {
                break;
            }
        }
        Ok(status)
    }

    fn remembered(&self, key: &Key) -> bool {
        let allowed = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
        allowed
            .get(key)
            .is_some_and(|at| at.elapsed() < self.config.cache)
    }

    fn remember(&self, key: Key) {
        if self.config.cache.is_zero() {
            return;
        }
        let mut allowed = self.allowed.lock().unwrap_or_else(|p| p.into_inner());
        if allowed.len() >= CACHE_MAX {
            let ttl = self.config.cache;
            allowed.retain(|_, at| at.elapsed() < ttl);
            if allowed.len() >= CACHE_MAX {
                let mut ages: Vec<Instant> = allowed.values().copied().collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 2];
                allowed.retain(|_, at| *at > cut);
            }
        }
        allowed.insert(key, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A service on 127.0.0.1 answering by the question's `query`: `ok` 204, `no` 403,
    /// `slow` after 3 s, `moved` 302; each question's body is sent on the channel.
    async fn service() -> (Url, tokio::sync::mpsc::Receiver<serde_json::Value>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/auth", listener.local_addr().unwrap())).unwrap();
        // The test asks a handful of questions; more would wait, never pile up.
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    let body = loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                        let text = String::from_utf8_lossy(&got).into_owned();
                        if let Some((_, body)) = text.split_once("\r\n\r\n") {
                            if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
                                break v;
                            }
                        }
                    };
                    let status = match body["query"].as_str().unwrap_or("") {
                        "ok" => "204 No Content",
                        "moved" => "302 Found\r\nLocation: http://127.0.0.1:1/",
                        "slow" => {
                            tokio::time::sleep(Duration::from_secs(3)).await;
                            "204 No Content"
                        }
                        _ => "403 Forbidden",
                    };
                    let _ = tx.send(body).await;
                    let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, rx)
    }

    fn caller(query: &str) -> Caller {
        Caller {
            remote: Some("127.0.0.9:4000".parse().unwrap()),
            query: query.into(),
        }
    }

    #[tokio::test]
    async fn only_a_timely_2xx_lets_a_publish_in_and_a_yes_is_remembered_briefly() {
        let (url, mut asked) = service().await;
        let auth = PublishAuth::new(PublishAuthConfig {
            url,
            timeout: Duration::from_millis(500),
            cache: Duration::from_millis(300),
        })
        .unwrap();
        let check = |q: &'static str| {
            let auth = &auth;
            async move { auth.check(7, Slot::Backup, Protocol::Srt, &caller(q)).await }
        };
        assert_eq!(check("ok").await, Ok(()));
        let question = asked.recv().await.unwrap();
        assert_eq!(
            question,
            serde_json::json!({"stream_id": 7, "protocol": "srt", "slot": "backup",
                "remote_addr": "127.0.0.9:4000", "query": "ok"})
        );
        // Remembered: no second question within the cache time, one after it.
        assert_eq!(check("ok").await, Ok(()));
        assert!(asked.try_recv().is_err());
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(check("ok").await, Ok(()));
        assert!(asked.recv().await.is_some());
        // Refusals: a 403, a redirect (not followed), no answer in time; none remembered.
        assert_eq!(check("no").await, Err(HookRefusal::Refused(403)));
        assert_eq!(check("no").await, Err(HookRefusal::Refused(403)));
        assert_eq!(check("moved").await, Err(HookRefusal::Refused(302)));
        assert!(matches!(
            check("slow").await,
            Err(HookRefusal::Unavailable(_))
        ));
        // Nobody listening: unavailable, refused.
        let dead = PublishAuth::new(PublishAuthConfig {
            url: Url::parse("http://127.0.0.1:1/auth").unwrap(),
            timeout: Duration::from_millis(500),
            cache: Duration::from_secs(10),
        })
        .unwrap();
        let r = dead
            .check(7, Slot::Main, Protocol::Rtmp, &caller("ok"))
            .await;
        assert!(matches!(r, Err(HookRefusal::Unavailable(_))), "{r:?}");
    }
}
