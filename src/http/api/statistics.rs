//! `GET /streaming/statistics/ffprobe`: a stream's source as received, per time bucket — the
//! samples the input task stores every `statistics_sample_secs`, aggregated over buckets of
//! `interval` × `units`. A bucket without samples is absent, so gaps show when the stream was
//! not received.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

use super::format::iso8601;
use super::{query_int, query_pairs, Api, ApiError};
use crate::db::SourceBucket;
use crate::http::listener::{json_response, Body};

/// The most buckets one request may span (10 s buckets: a bit over a day).
pub const MAX_BUCKETS: i64 = 10_000;
const DAY_MS: i64 = 86_400_000;
/// 1970-01-01 was a Thursday: weeks start on the Monday after.
const MONDAY_OFFSET_MS: i64 = 4 * DAY_MS;

/// A bucket's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    /// Calendar months (UTC).
    Month,
}

impl Unit {
    fn parse(v: &str) -> Option<Unit> {
        Some(match v {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            _ => return None,
        })
    }

    /// The unit's length in ms (months: none, they are calendar months).
    fn ms(self) -> Option<i64> {
        Some(match self {
            Unit::Second => 1_000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            Unit::Day => DAY_MS,
            Unit::Week => 7 * DAY_MS,
            Unit::Month => return None,
        })
    }
}

/// A checked request.
#[derive(Debug, PartialEq)]
pub struct Query {
    pub stream_id: i64,
    pub from_ms: i64,
    pub to_ms: i64,
    pub interval: i64,
    pub unit: Unit,
}

#[derive(Serialize, Debug, PartialEq)]
pub struct Item {
    time: String,
    /// kbit/s, averaged over the bucket's samples.
    avg_bitrate: f64,
    sum_frames: u64,
    max_height: u32,
    max_fps: f64,
    /// Seconds.
    max_keyframe_interval: f64,
    /// The outputs: frames dropped since the stream began on its node, the mean transcoding
    /// speed (null: not transcoding), the most viewers of all outputs together.
    max_frames_dropped: u64,
    avg_transcoding_speed: Option<f64>,
    max_viewers: u64,
}

/// Parses and checks the query; every error names its parameter.
pub fn parse_query(query: Option<&str>) -> Result<Query, ApiError> {
    let (mut stream_id, mut from, mut to) = (None, None, None);
    let (mut interval, mut unit) = (10i64, Unit::Second);
    for (k, v) in query_pairs(query)? {
        match k.as_str() {
            "stream_id" => stream_id = Some(query_int("stream_id", &v, 1..=i64::MAX)?),
            "date_from" => from = Some(parse_time("date_from", &v)?),
            "date_to" => to = Some(parse_time("date_to", &v)?),
            "interval" => interval = query_int("interval", &v, 1..=1_000_000)?,
            "units" => {
                unit = Unit::parse(&v).ok_or_else(|| {
                    ApiError::invalid_query(
                        "units",
                        "`units` must be second, minute, hour, day, week or month",
                    )
                })?
            }
            _ => {}
        }
    }
    let required = |name: &str| ApiError::invalid_query(name, format!("`{name}` is required"));
    let stream_id = stream_id.ok_or_else(|| required("stream_id"))?;
    let from_ms = from.ok_or_else(|| required("date_from"))?;
    let to_ms = to.ok_or_else(|| required("date_to"))?;
    if to_ms <= from_ms {
        return Err(ApiError::invalid_query(
            "date_to",
            "`date_to` must be after `date_from`",
        ));
    }
    let buckets = match unit.ms() {
        Some(ms) => {
            let size = ms.saturating_mul(interval);
            (to_ms - from_ms + size - 1) / size
        }
        None => (month_index(to_ms - 1) - month_index(from_ms)) / interval + 1,
    };
    if buckets > MAX_BUCKETS {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "too_many_buckets",
            format!(
                "the window holds {buckets} buckets of {interval} {unit:?}; at most {MAX_BUCKETS}: \
                 raise `interval` or narrow `date_from`..`date_to`"
            ),
        )
        .at("interval"));
    }
    Ok(Query {
        stream_id,
        from_ms,
        to_ms,
        interval,
        unit,
    })
}

/// ISO 8601 / RFC 3339 (`2026-11-24T10:00:00Z`, with an offset or fractions), or without an
/// offset (UTC), or a date alone (its UTC midnight). In ms since the epoch.
fn parse_time(name: &str, v: &str) -> Result<i64, ApiError> {
    let t = OffsetDateTime::parse(v, &Rfc3339)
        .ok()
        .or_else(|| {
            let f = time::macros::format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]"
            );
            PrimitiveDateTime::parse(v, &f).ok().map(|t| t.assume_utc())
        })
        .or_else(|| {
            let f = time::macros::format_description!("[year]-[month]-[day]");
            Date::parse(v, &f)
                .ok()
                .map(|d| d.with_time(Time::MIDNIGHT).assume_utc())
        })
        .filter(|t| t.year() >= 1970)
        .ok_or_else(|| {
            ApiError::invalid_query(
                name,
                format!("`{name}` must be an ISO 8601 time after 1970, e.g. 2026-11-24T10:00:00Z"),
            )
        })?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// Months since January 1970 of a time in ms.
fn month_index(ms: i64) -> i64 {
    let t = OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    i64::from(t.year() - 1970) * 12 + i64::from(u8::from(t.month())) - 1
}

/// The first instant of month `index` (months since January 1970), in ms.
fn month_start(index: i64) -> i64 {
    let year = 1970 + (index / 12) as i32;
    let month = Month::try_from((index % 12 + 1) as u8).unwrap_or(Month::January);
    Date::from_calendar_date(year, month, 1)
        .map(|d| d.with_time(Time::MIDNIGHT).assume_utc().unix_timestamp() * 1000)
        .unwrap_or(0)
}

/// Merges day buckets into buckets of `interval` calendar months (averages weighted by their
/// sample counts).
fn into_months(days: Vec<SourceBucket>, interval: i64) -> Vec<SourceBucket> {
    let mut out: Vec<SourceBucket> = Vec::new();
    for d in days {
        let start = month_start(month_index(d.time_ms) / interval * interval);
        match out.last_mut() {
            Some(m) if m.time_ms == start => {
                let n = (m.samples + d.samples).max(1) as f64;
                m.avg_bitrate_kbps = (m.avg_bitrate_kbps * m.samples as f64
                    + d.avg_bitrate_kbps * d.samples as f64)
                    / n;
                m.avg_transcoding_speed = match (m.avg_transcoding_speed, d.avg_transcoding_speed) {
                    (Some(a), Some(b)) => Some(
                        (a * m.samples as f64 + b * d.samples as f64)
                            / (m.samples + d.samples).max(1) as f64,
                    ),
                    (a, b) => a.or(b),
                };
                m.samples += d.samples;
                m.sum_frames += d.sum_frames;
                m.max_height = m.max_height.max(d.max_height);
                m.max_fps = m.max_fps.max(d.max_fps);
                m.max_keyframe_interval = m.max_keyframe_interval.max(d.max_keyframe_interval);
                m.max_frames_dropped = m.max_frames_dropped.max(d.max_frames_dropped);
                m.max_viewers = m.max_viewers.max(d.max_viewers);
            }
            _ => out.push(SourceBucket {
                time_ms: start,
                ..d
            }),
        }
    }
    out
}

fn item(b: &SourceBucket) -> Item {
    let time = OffsetDateTime::from_unix_timestamp_nanos(i128::from(b.time_ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    Item {
        time: iso8601(time),
        avg_bitrate: (b.avg_bitrate_kbps * 10.0).round() / 10.0,
        sum_frames: b.sum_frames,
        max_height: b.max_height,
        max_fps: (b.max_fps * 100.0).round() / 100.0,
        max_keyframe_interval: (b.max_keyframe_interval * 100.0).round() / 100.0,
        max_frames_dropped: b.max_frames_dropped,
        avg_transcoding_speed: b.avg_transcoding_speed.map(|s| (s * 100.0).round() / 100.0),
        max_viewers: b.max_viewers,
    }
}

pub async fn ffprobe(api: &Arc<Api>, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let q = parse_query(query)?;
    let id = q.stream_id;
    if api.db(move |s| s.get_stream(id)).await?.is_none() {
        return Err(ApiError::not_found("stream").at("stream_id"));
    }
    let buckets = match q.unit.ms() {
        Some(ms) => {
            let size = ms * q.interval;
            let offset = if q.unit == Unit::Week {
                MONDAY_OFFSET_MS % size
            } else {
                0
            };
            api.db(move |s| s.source_buckets(id, q.from_ms, q.to_ms, size, offset))
                .await?
        }
        None => {
            let days = api
                .db(move |s| s.source_buckets(id, q.from_ms, q.to_ms, DAY_MS, 0))
                .await?;
            into_months(days, q.interval)
        }
    };
    let data: Vec<Item> = buckets.iter().map(item).collect();
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "data": data }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(q: &str) -> (String, Option<String>) {
        let e = parse_query(Some(q)).unwrap_err();
        let body = e.body();
        (
            body["error"]["code"].as_str().unwrap().to_owned(),
            body["error"]["field"].as_str().map(str::to_owned),
        )
    }

    #[test]
    fn the_query_is_checked_naming_the_parameter() {
        let ok = "stream_id=3&date_from=2026-11-24T10:00:00Z&date_to=2026-11-24T12:00:00%2B01:00";
        let q = parse_query(Some(ok)).unwrap();
        assert_eq!((q.stream_id, q.interval, q.unit), (3, 10, Unit::Second));
        assert_eq!(q.to_ms - q.from_ms, 3_600_000, "12:00+01:00 is 11:00Z");
        let from = "&date_from=2026-11-24&date_to=2026-11-24T00:10:00";
        let q = parse_query(Some(&format!("stream_id=1{from}&interval=5&units=minute"))).unwrap();
        assert_eq!((q.to_ms - q.from_ms, q.unit), (600_000, Unit::Minute));
        for (query, field, code) in [
            (
                "date_from=2026-11-24&date_to=2026-11-25",
                "stream_id",
                "invalid_query",
            ),
            (
                "stream_id=0&date_from=2026-11-24&date_to=2026-11-25",
                "stream_id",
                "invalid_query",
            ),
            (
                "stream_id=1&date_to=2026-11-25",
                "date_from",
                "invalid_query",
            ),
            (
                "stream_id=1&date_from=2026-11-24",
                "date_to",
                "invalid_query",
            ),
            (
                "stream_id=1&date_from=yesterday&date_to=2026-11-25",
                "date_from",
                "invalid_query",
            ),
            (
                "stream_id=1&date_from=2026-11-25&date_to=2026-11-24",
                "date_to",
                "invalid_query",
            ),
            (
                "stream_id=1&date_from=2026-11-24&date_to=2026-11-25&units=fortnight",
                "units",
                "invalid_query",
            ),
            (
                "stream_id=1&date_from=2026-11-24&date_to=2026-11-25&interval=0",
                "interval",
                "invalid_query",
            ),
            (
                "stream_id=1&date_from=2026-11-24&date_to=2026-11-25&interval=x",
                "interval",
                "invalid_query",
            ),
            // A day of 1 s buckets: 86 400 > 10 000.
            (
                "stream_id=1&date_from=2026-11-24&date_to=2026-11-25&interval=1",
                "interval",
                "too_many_buckets",
            ),
            (
                "stream_id=1&stream_id=2&date_from=2026-11-24&date_to=2026-11-25",
                "stream_id",
                "invalid_query",
            ),
        ] {
            assert_eq!(
                err(query),
                (code.to_owned(), Some(field.to_owned())),
                "{query}"
            );
        }
        // A day of 10 s buckets is within bounds; a year of months too.
        assert!(parse_query(Some("stream_id=1&date_from=2026-11-24&date_to=2026-11-25")).is_ok());
        let year = "stream_id=1&date_from=2020-01-01&date_to=2026-01-01&units=month";
        assert!(parse_query(Some(year)).is_ok());
    }

    fn bucket(time_ms: i64, samples: u64, bitrate: f64, frames: u64) -> SourceBucket {
        SourceBucket {
            time_ms,
            samples,
            avg_bitrate_kbps: bitrate,
            sum_frames: frames,
            max_height: 720,
            max_fps: 30.0,
            max_keyframe_interval: 2.0,
            max_frames_dropped: frames / 10,
            // Sped up by the bitrate's thousands: a weight that shows in the mean.
            avg_transcoding_speed: (bitrate >= 1000.0).then_some(bitrate / 1000.0),
            max_viewers: samples,
        }
    }

    #[test]
    fn months_are_calendar_months_weighted_by_samples() {
        let jan_31 = month_start(month_index(0)) + 30 * DAY_MS;
        let feb_1 = jan_31 + DAY_MS;
        let months = into_months(
            vec![
                bucket(0, 1, 1000.0, 10),
                bucket(jan_31, 3, 2000.0, 30),
                bucket(feb_1, 1, 500.0, 5),
            ],
            1,
        );
        assert_eq!(months.len(), 2);
        assert_eq!(months[0].time_ms, 0);
        assert_eq!((months[0].samples, months[0].sum_frames), (4, 40));
        assert_eq!(months[0].avg_bitrate_kbps, 1750.0);
        // Speeds weighted by samples: (1 × 1 + 2 × 3) / 4; the most dropped and viewers.
        assert_eq!(months[0].avg_transcoding_speed, Some(1.75));
        assert_eq!(
            (months[0].max_frames_dropped, months[0].max_viewers),
            (3, 3)
        );
        assert_eq!(months[1].avg_transcoding_speed, None, "500 kbit/s: none");
        assert_eq!(item(&months[1]).time, "1970-02-01T00:00:00Z");
        // Two-month buckets: January and February together.
        assert_eq!(
            into_months(vec![bucket(0, 1, 1.0, 1), bucket(feb_1, 1, 1.0, 1)], 2).len(),
            1
        );
    }
}
