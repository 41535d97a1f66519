//! Recorded videos: the owner's fields (compare-and-set), the recorder's state (its only
//! writer), and the filtered, paged list.

use time::OffsetDateTime;

use crate::events::Event;

use super::codec::{client_key, fold, to_json, to_ms, video_from_row, VIDEO_COLUMNS};
use super::conn::{args, exists, sql_offset, Backend, Pool, Tx, Value};
use super::webhooks::append_in;
use super::{
    SqlStore, StoreError, Update, VideoFilter, VideoRow, VideoSettings, VideoState, VideoStatus,
};

pub trait VideoStore {
    /// A new video of `stream_id` (pending, as its recording starts).
    fn create_video(
        &self,
        stream_id: i64,
        slug: &str,
        settings: &VideoSettings,
        state: &VideoState,
        started_at: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<VideoRow, StoreError>;
    fn get_video(&self, id: i64) -> Result<Option<VideoRow>, StoreError>;
    /// Newest first; returns the page and the number matching the filter before paging.
    fn list_videos(&self, filter: &VideoFilter) -> Result<(Vec<VideoRow>, u64), StoreError>;
    /// Replaces the owner's fields if the record is still at `revision`.
    fn update_video(
        &self,
        id: i64,
        revision: i64,
        settings: &VideoSettings,
        now: OffsetDateTime,
    ) -> Result<Update<VideoRow>, StoreError>;
    /// Replaces the recorder's fields (it is their only writer); `false` if the video is gone.
    fn set_video_state(
        &self,
        id: i64,
        state: &VideoState,
        now: OffsetDateTime,
    ) -> Result<bool, StoreError>;
    /// Removes the record; returns it (its media is removed by the caller).
    fn delete_video(&self, id: i64) -> Result<Option<VideoRow>, StoreError>;
}

impl<B: Backend> VideoStore for SqlStore<B> {
    fn create_video(
        &self,
        stream_id: i64,
        slug: &str,
        settings: &VideoSettings,
        state: &VideoState,
        started_at: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Result<VideoRow, StoreError> {
        let row = self.backend().with_conn(Pool::Main, |c| {
            c.query_one(
                &format!(
                    "INSERT INTO videos (revision, stream_id, slug, created_at_ms, updated_at_ms, \
                       started_at_ms, name_folded, status, client_user_id, settings, state) \
                     VALUES (1, $1, $2, $3, $3, $4, $5, $6, $7, $8, $9) RETURNING {VIDEO_COLUMNS}"
                ),
                &args![
                    stream_id,
                    slug,
                    to_ms(now),
                    to_ms(started_at),
                    Value::ByteText(fold(&settings.name)),
                    state.status.as_str(),
                    client_key(&settings.client_user_id),
                    to_json(settings),
                    to_json(state)
                ],
            )
        })?;
        video_from_row(&row)
    }

    fn get_video(&self, id: i64) -> Result<Option<VideoRow>, StoreError> {
        let sql = format!("SELECT {VIDEO_COLUMNS} FROM videos WHERE id = $1");
        self.backend()
            .with_conn(Pool::Main, |c| c.query_opt(&sql, &args![id]))?
            .map(|r| video_from_row(&r))
            .transpose()
    }

    fn list_videos(&self, f: &VideoFilter) -> Result<(Vec<VideoRow>, u64), StoreError> {
        let search = f.search.as_deref().map(|s| Value::ByteText(fold(s)));
        let filter = args![
            f.stream_id,
            f.status.map(VideoStatus::as_str),
            search,
            client_key(&f.client_user_id),
            f.created_before.map(to_ms),
        ];
        let mut page = filter.to_vec();
        page.extend(args![f.limit, sql_offset(f.offset)]);
        self.backend().transaction(Pool::Main, Tx::Snapshot, |c| {
            let filter_sql = format!(
                "WHERE ($1::BIGINT IS NULL OR stream_id = $1) \
                 AND ($2::TEXT IS NULL OR status = $2) \
                 AND ($3::BYTEA IS NULL OR {}) \
                 AND ($4::TEXT IS NULL OR client_user_id = $4) \
                 AND ($5::BIGINT IS NULL OR created_at_ms < $5)",
                c.dialect().contains("name_folded", 3)
            );
            let total = c
                .query_one(
                    &format!("SELECT COUNT(*) FROM videos {filter_sql}"),
                    &filter,
                )?
                .i64(0)?;
            let rows = c.query(
                &format!(
                    "SELECT {VIDEO_COLUMNS} FROM videos {filter_sql} \
                     ORDER BY id DESC LIMIT $6 OFFSET $7"
                ),
                &page,
            )?;
            let rows = rows.iter().map(video_from_row).collect::<Result<_, _>>()?;
            Ok((rows, total as u64))
        })
    }

    fn update_video(
        &self,
        id: i64,
        revision: i64,
        settings: &VideoSettings,
        now: OffsetDateTime,
    ) -> Result<Update<VideoRow>, StoreError> {
        self.backend().with_conn(Pool::Main, |c| {
            let updated = c.query_opt(
                &format!(
                    "UPDATE videos SET settings = $1, name_folded = $2, client_user_id = $3, \
                       updated_at_ms = $4, revision = revision + 1 \
                     WHERE id = $5 AND revision = $6 RETURNING {VIDEO_COLUMNS}"
                ),
                &args![
                    to_json(settings),
                    Value::ByteText(fold(&settings.name)),
                    client_key(&settings.client_user_id),
                    to_ms(now),
                    id,
                    revision
                ],
            )?;
            Ok(match updated {
                Some(row) => Update::Done(video_from_row(&row)?),
                None if exists(c, "videos", id)? => Update::Stale,
                None => Update::NotFound,
            })
        })
    }

    fn set_video_state(
        &self,
        id: i64,
        state: &VideoState,
        now: OffsetDateTime,
    ) -> Result<bool, StoreError> {
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            let Some(before) = c.query_opt(
                "SELECT stream_id, status FROM videos WHERE id = $1",
                &args![id],
            )?
            else {
                return Ok(false);
            };
            c.execute(
                "UPDATE videos SET state = $1, status = $2, updated_at_ms = $3 WHERE id = $4",
                &args![to_json(state), state.status.as_str(), to_ms(now), id],
            )?;
            // The video's outcome is written with it: ready or failed, once, as it turns so.
            let stream_id = before.i64(0)?;
            // Ready once: when it first plays (`uploading` on its way to the object store
            // already does); the upload's own steps are in the status.
            let was = VideoStatus::parse(&before.string(1)?);
            let outcome = match state.status {
                s if s.playable() && was.is_some_and(VideoStatus::playable) => return Ok(true),
                s if s.playable() => Event::VideoReady {
                    stream_id,
                    video_id: id,
                    duration_ms: state.duration_ms,
                },
                VideoStatus::Error => Event::VideoFailed {
                    stream_id,
                    video_id: id,
                    error: state.error.clone().unwrap_or_default(),
                },
                _ => return Ok(true),
            };
            if was != Some(state.status) {
                append_in(c, &outcome, None)?;
            }
            Ok(true)
        })
    }

    fn delete_video(&self, id: i64) -> Result<Option<VideoRow>, StoreError> {
        let sql = format!("DELETE FROM videos WHERE id = $1 RETURNING {VIDEO_COLUMNS}");
        // A record that cannot be read stays: the caller removes the media only of the record
        // it gets back, so deleting one it cannot describe would orphan its files.
        self.backend().transaction(Pool::Main, Tx::Plain, |c| {
            let row = c
                .query_opt(&sql, &args![id])?
                .map(|r| video_from_row(&r))
                .transpose()?;
            if let Some(row) = &row {
                let deleted = Event::VideoDeleted {
                    stream_id: row.stream_id,
                    video_id: row.id,
                };
                append_in(c, &deleted, None)?;
            }
            Ok(row)
        })
    }
}
