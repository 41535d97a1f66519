//! Source statistics: one sample per stream and sampling window, aggregated into time buckets
//! for `GET /streaming/statistics/ffprobe`, pruned by age.

use super::codec::to_ms;
use super::conn::{args, Backend, Pool};
use super::{SourceBucket, SourceSample, SqlStore, StoreError};

pub trait StatsStore {
    /// Adds one window's source statistics of a stream.
    fn add_source_sample(&self, stream_id: i64, sample: &SourceSample) -> Result<(), StoreError>;
    /// A stream's samples in `[from_ms, to_ms)` aggregated per bucket of `bucket_ms`, buckets
    /// starting at `offset_ms` plus a multiple of `bucket_ms`; oldest first, empty buckets
    /// absent.
    fn source_buckets(
        &self,
        stream_id: i64,
        from_ms: i64,
        to_ms: i64,
        bucket_ms: i64,
        offset_ms: i64,
    ) -> Result<Vec<SourceBucket>, StoreError>;
    /// Removes every stream's samples older than `before_ms`; returns how many.
    fn prune_source_samples(&self, before_ms: i64) -> Result<u64, StoreError>;
    /// What waits or has failed in the store's queues, for `/metrics`.
    fn backlog(&self) -> Result<Backlog, StoreError>;
}

/// Webhook deliveries and video uploads waiting or failed (all nodes').
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    pub webhooks_pending: u64,
    /// Deliveries given up on, kept until pruned (a day).
    pub webhooks_failed: u64,
    pub uploads_pending: u64,
    pub uploads_failed: u64,
}

impl<B: Backend> StatsStore for SqlStore<B> {
    fn add_source_sample(&self, stream_id: i64, sample: &SourceSample) -> Result<(), StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            c.execute(
                "INSERT INTO source_samples \
                 (stream_id, time_ms, bitrate_kbps, frames, height, fps, keyframe_interval, \
                  frames_dropped, transcoding_speed, viewers) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &args![
                    stream_id,
                    to_ms(sample.time),
                    sample.bitrate_kbps,
                    sample.frames as i64,
                    sample.height,
                    sample.fps,
                    sample.keyframe_interval,
                    sample.frames_dropped.min(i64::MAX as u64) as i64,
                    sample.transcoding_speed,
                    sample.viewers.min(i64::MAX as u64) as i64
                ],
            )
        })?;
        Ok(())
    }

    fn source_buckets(
        &self,
        stream_id: i64,
        from_ms: i64,
        to_ms: i64,
        bucket_ms: i64,
        offset_ms: i64,
    ) -> Result<Vec<SourceBucket>, StoreError> {
        // Samples are never before the epoch, so `time_ms - offset` (offset < a week) divides
        // the same way in SQLite and PostgreSQL (both truncate) only once shifted
        // non-negative: + one bucket.
        let rows = self.backend().with_conn(Pool::Main, |c| {
            c.query(
                "SELECT ((time_ms - $5::BIGINT + $4::BIGINT) / $4) * $4 + $5 - $4 AS bucket, \
                   COUNT(*), AVG(bitrate_kbps), CAST(SUM(frames) AS BIGINT), MAX(height), \
                   MAX(fps), MAX(keyframe_interval), COALESCE(MAX(frames_dropped), 0), \
                   AVG(transcoding_speed), COALESCE(MAX(viewers), 0) \
                 FROM source_samples WHERE stream_id = $1 AND time_ms >= $2 AND time_ms < $3 \
                 GROUP BY bucket ORDER BY bucket",
                &args![stream_id, from_ms, to_ms, bucket_ms.max(1), offset_ms],
            )
        })?;
        rows.iter()
            .map(|r| {
                Ok(SourceBucket {
                    time_ms: r.i64(0)?,
                    samples: r.i64(1)?.max(0) as u64,
                    avg_bitrate_kbps: r.f64(2)?,
                    sum_frames: r.i64(3)?.max(0) as u64,
                    max_height: u32::try_from(r.i64(4)?).unwrap_or(u32::MAX),
                    max_fps: r.f64(5)?,
                    max_keyframe_interval: r.f64(6)?,
                    max_frames_dropped: r.i64(7)?.max(0) as u64,
                    avg_transcoding_speed: r.opt_f64(8)?,
                    max_viewers: r.i64(9)?.max(0) as u64,
                })
            })
            .collect()
    }

    fn backlog(&self) -> Result<Backlog, StoreError> {
        let rows = self.backend().with_conn(Pool::Main, |c| {
            c.query(
                "SELECT \
                   (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending'), \
                   (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'failed'), \
                   (SELECT COUNT(*) FROM videos WHERE status = 'uploading'), \
                   (SELECT COUNT(*) FROM videos WHERE status = 'upload_failed')",
                &args![],
            )
        })?;
        let Some(r) = rows.first() else {
            return Ok(Backlog::default());
        };
        let n = |i| r.i64(i).map(|v| v.max(0) as u64);
        Ok(Backlog {
            webhooks_pending: n(0)?,
            webhooks_failed: n(1)?,
            uploads_pending: n(2)?,
            uploads_failed: n(3)?,
        })
    }

    fn prune_source_samples(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            c.execute(
                "DELETE FROM source_samples WHERE time_ms < $1",
                &args![before_ms],
            )
        })
    }
}
