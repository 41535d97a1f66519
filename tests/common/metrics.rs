//! `/metrics` read by an independent parser (prometheus-parse) into `name{labels}` → value.

use std::collections::BTreeMap;

use reqwest::StatusCode;

use super::Daemon;

/// One scrape: `process_open_fds` or `livepack_stream_live{stream="7"}` (labels sorted) → value.
#[derive(Debug)]
pub struct Metrics(pub BTreeMap<String, f64>);

impl Metrics {
    /// Counters and gauges only: the daemon declares a TYPE for each family, so an untyped
    /// sample is a bug to see (a lookup of it fails), not a value to read.
    pub fn parse(text: &str) -> Result<Metrics, String> {
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
            .map_err(|e| format!("{e}: {text}"))?;
        let mut out = BTreeMap::new();
        for s in scrape.samples {
            let v = match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                _ => continue,
            };
            let mut labels: Vec<_> = s.labels.iter().collect();
            labels.sort();
            out.insert(key(&s.metric, &labels), v);
        }
        Ok(Metrics(out))
    }

    /// The value of a process-wide metric; panics when it is missing.
    pub fn value(&self, name: &str) -> f64 {
        self.get(name)
    }

    /// The value of a per-stream metric; panics when it is missing.
    pub fn stream(&self, name: &str, id: i64) -> f64 {
        self.get(&key(name, &[("stream", &id.to_string())]))
    }

    fn get(&self, key: &str) -> f64 {
        *self
            .0
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in /metrics: {:?}", self.0.keys()))
    }
}

fn key(name: &str, labels: &[(impl AsRef<str>, impl AsRef<str>)]) -> String {
    if labels.is_empty() {
        return name.to_owned();
    }
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}=\"{}\"", k.as_ref(), v.as_ref()))
        .collect();
    format!("{name}{{{}}}", labels.join(","))
}

/// `/metrics` with the daemon's key; it must answer 200 with a parsable exposition.
pub async fn scrape(d: &Daemon) -> Metrics {
    let reply = d.get("/metrics").await;
    assert_eq!(reply.status, StatusCode::OK);
    Metrics::parse(reply.body.as_str().expect("the text exposition")).unwrap()
}

/// `/metrics` from a task that holds no `Daemon`; `None` when it could not be fetched.
pub async fn try_scrape(client: &reqwest::Client, base: &str, key: &str) -> Option<Metrics> {
    let r = client
        .get(format!("{base}/metrics"))
        .header("authorization", format!("apikey {key}"))
        .send()
        .await
        .ok()?;
    if r.status() != StatusCode::OK {
        return None;
    }
    Metrics::parse(&r.text().await.ok()?).ok()
}
