//! The store's behaviour stated once and run against each backend: every test here runs on
//! SQLite and on PostgreSQL (a real server: `tests/common/pg.rs`, one per test process, a
//! database per test). Tests of one backend's own machinery (SQLite's file, PostgreSQL's
//! migrations under concurrency and its pool) sit beside that backend.

use std::sync::atomic::{AtomicUsize, Ordering};

use time::OffsetDateTime;

use super::codec::to_ms;
use super::{
    ApiType, AppFilter, AppOrderKey, AppSettings, LeaseState, LeaseTake, NodeBeat, PostgresStore,
    ProfileTemplate, ProfileTemplateField, Projection, RecordType, SourceSample, SqliteStore,
    Store, StoreError, StreamSettings, Update, VideoFilter, VideoSettings, VideoState, VideoStatus,
};
use crate::overlay::OverlaySpec;
use crate::package::Numbering;

#[path = "tests_webhooks.rs"]
mod webhooks;
use webhooks::{
    a_stream_s_deliveries_go_one_at_a_time_in_order_and_fail_after_the_window,
    of_nodes_claiming_at_once_each_delivery_goes_to_one,
    record_changes_write_their_events_in_their_own_transaction,
};

#[path = "../../tests/common/pg.rs"]
#[allow(dead_code)] // shared with the end-to-end suites, which use the rest
pub(crate) mod pg_server;

/// A fresh, empty store of one backend, and a side door to its database.
pub(crate) struct Backend {
    store: Box<dyn Store>,
    /// Runs SQL on the same database through a connection of its own (to damage a record).
    exec: Box<dyn Fn(&str)>,
    _dir: Option<tempfile::TempDir>,
}

impl std::ops::Deref for Backend {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        &*self.store
    }
}

impl Backend {
    fn exec(&self, sql: &str) {
        (self.exec)(sql)
    }
}

fn sqlite_backend() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_in(dir.path()).unwrap();
    let path = store.path().to_owned();
    Backend {
        store: Box::new(store),
        exec: Box::new(move |sql| {
            rusqlite::Connection::open(&path)
                .unwrap()
                .execute_batch(sql)
                .unwrap()
        }),
        _dir: Some(dir),
    }
}

/// A new database on this process's test server.
pub(crate) fn postgres_database() -> String {
    pg_server::PgServer::shared().create_database()
}

fn postgres_backend() -> Backend {
    let url = postgres_database();
    let store = PostgresStore::connect(&url).unwrap();
    Backend {
        store: Box::new(store),
        exec: Box::new(move |sql| {
            ::postgres::Client::connect(&url, ::postgres::NoTls)
                .unwrap()
                .batch_execute(sql)
                .unwrap()
        }),
        _dir: None,
    }
}

/// Each named test, once per backend: `db::tests::sqlite::NAME`, `db::tests::postgres::NAME`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $name() { super::$name(&super::sqlite_backend()); } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(&super::postgres_backend()); } )*
        }
    };
}

on_both_backends!(
    stream_round_trip_and_compare_and_set,
    source_samples_aggregate_per_bucket_prune_and_go_with_their_stream,
    app_names_are_unique_and_filters_fold_unicode,
    apps_sort_nulls_first_text_by_bytes_and_compare_and_set,
    videos_filter_page_edit_and_delete,
    broadcast_links_are_one_fact_seen_from_both_sides,
    overlays_stay_within_their_maximum_and_change_all_or_nothing,
    settings_templates_and_stream_times,
    corrupt_documents_are_reported_as_corrupt,
    free_text_round_trips_even_with_nul,
    concurrent_updates_of_different_fields_all_land,
    a_lease_has_one_holder_and_passes_on_when_it_dies_or_idles,
    one_of_nodes_taking_a_lease_at_once_wins,
    a_setting_inserted_by_several_at_once_has_one_value,
    record_changes_write_their_events_in_their_own_transaction,
    a_stream_s_deliveries_go_one_at_a_time_in_order_and_fail_after_the_window,
    of_nodes_claiming_at_once_each_delivery_goes_to_one,
    restreams_are_capped_per_stream_edited_and_go_with_their_stream,
);

fn restreams_are_capped_per_stream_edited_and_go_with_their_stream(store: &Backend) {
    use crate::db::RestreamSpec;
    let now = OffsetDateTime::now_utc();
    let settings = StreamSettings {
        name: "out".into(),
        ..StreamSettings::default()
    };
    let stream = store.create_stream(&settings, "tok", now).unwrap().id;
    let spec = |name: &str| RestreamSpec {
        stream_id: stream,
        name: name.into(),
        uri: "rtmp://a.rtmp.youtube.com/live2/key-1".into(),
        source: "origin".into(),
        active: true,
    };
    let first = store.create_restream(&spec("yt"), 2, now).unwrap().unwrap();
    assert_eq!(first.spec, spec("yt"));
    store
        .create_restream(&spec("twitch"), 2, now)
        .unwrap()
        .unwrap();
    assert_eq!(
        store.create_restream(&spec("third"), 2, now).unwrap(),
        None,
        "the cap"
    );
    let edited = RestreamSpec {
        source: "720p".into(),
        active: false,
        ..spec("yt renamed")
    };
    let later = now + time::Duration::seconds(5);
    let row = store
        .update_restream(first.id, &edited, later)
        .unwrap()
        .unwrap();
    assert_eq!(
        (row.spec, row.created_at == first.created_at),
        (edited, true)
    );
    assert_eq!(store.list_restreams(Some(stream)).unwrap().len(), 2);
    assert!(store.delete_restream(first.id).unwrap());
    assert!(!store.delete_restream(first.id).unwrap());
    assert_eq!(
        store.update_restream(first.id, &spec("x"), later).unwrap(),
        None
    );
    // The stream's deletion takes its restreams with it.
    store.delete_stream(stream).unwrap();
    assert!(store.list_restreams(None).unwrap().is_empty());
}

fn app(name: &str, status: u8, plan_id: i64) -> AppSettings {
    AppSettings {
        name: name.into(),
        status,
        binary: Some(1),
        comment: String::new(),
        api_type: ApiType::WasiHttp,
        debug_until: None,
        template: None,
        template_name: None,
        networks: vec![],
        upgradeable_to: None,
        plan_id,
        plan: "basic".into(),
    }
}

fn source_samples_aggregate_per_bucket_prune_and_go_with_their_stream(store: &Backend) {
    let now = OffsetDateTime::now_utc();
    let settings = StreamSettings {
        name: "cam".into(),
        ..StreamSettings::default()
    };
    let id = store.create_stream(&settings, "t", now).unwrap().id;
    let other = store.create_stream(&settings, "u", now).unwrap().id;
    let sample = |secs: i64, kbps: f64, height: u32| SourceSample {
        time: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(secs),
        bitrate_kbps: kbps,
        frames: 300,
        height,
        fps: 30.0,
        keyframe_interval: 2.0,
        frames_dropped: secs as u64,
        transcoding_speed: (secs < 70).then_some(1.0 + secs as f64 / 100.0),
        viewers: height as u64 / 100,
    };
    // 10 s samples at 0, 10, 20 s, then a gap, then 70 s; one of another stream.
    for (t, kbps, h) in [
        (0, 1000.0, 720),
        (10, 2000.0, 1080),
        (20, 3000.0, 720),
        (70, 500.0, 360),
    ] {
        store.add_source_sample(id, &sample(t, kbps, h)).unwrap();
    }
    store
        .add_source_sample(other, &sample(0, 9999.0, 2160))
        .unwrap();
    // 30 s buckets: [0,30) and [60,90); [30,60) is absent.
    let b = store.source_buckets(id, 0, 100_000, 30_000, 0).unwrap();
    assert_eq!(b.iter().map(|b| b.time_ms).collect::<Vec<_>>(), [0, 60_000]);
    assert_eq!(
        (b[0].samples, b[0].sum_frames, b[0].max_height),
        (3, 900, 1080)
    );
    assert_eq!(b[0].avg_bitrate_kbps, 2000.0);
    assert_eq!((b[0].max_frames_dropped, b[0].max_viewers), (20, 10));
    assert!((b[0].avg_transcoding_speed.unwrap() - 1.1).abs() < 1e-9);
    assert_eq!((b[1].samples, b[1].max_height), (1, 360));
    assert_eq!(b[1].avg_transcoding_speed, None, "no sample with a speed");
    // The window is half-open and buckets may start at an offset.
    let b = store
        .source_buckets(id, 10_000, 70_000, 30_000, 5_000)
        .unwrap();
    assert_eq!(
        b.iter().map(|b| (b.time_ms, b.samples)).collect::<Vec<_>>(),
        [(5_000, 2)]
    );
    assert_eq!(
        store.prune_source_samples(15_000).unwrap(),
        3,
        "two of ours, one other"
    );
    assert!(store.delete_stream(id).unwrap());
    assert!(store
        .source_buckets(id, 0, 100_000, 30_000, 0)
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .source_buckets(other, 0, 100_000, 30_000, 0)
            .unwrap()
            .len(),
        0
    );
}

fn stream_round_trip_and_compare_and_set(store: &Backend) {
    let mut s = StreamSettings {
        name: "a".into(),
        projection: Projection::Vr180,
        ..StreamSettings::default()
    };
    let now = OffsetDateTime::now_utc();
    let row = store.create_stream(&s, "tok", now).unwrap();
    assert_eq!(row.settings, s);
    assert_eq!(to_ms(row.created_at), to_ms(now));
    s.name = "b".into();
    let Update::Done(updated) = store.update_stream(row.id, row.revision, &s).unwrap() else {
        panic!("first update must apply")
    };
    assert_eq!(updated.revision, row.revision + 1);
    assert!(matches!(
        store.update_stream(row.id, row.revision, &s).unwrap(),
        Update::Stale
    ));
    assert!(matches!(
        store.update_stream(999, 1, &s).unwrap(),
        Update::NotFound
    ));
    assert!(store.delete_stream(row.id).unwrap());
    assert!(!store.delete_stream(row.id).unwrap());
}

fn app_names_are_unique_and_filters_fold_unicode(store: &Backend) {
    assert!(matches!(
        store.create_app(&app("straße-1", 1, 1)).unwrap(),
        Update::Done(_)
    ));
    assert!(matches!(
        store.create_app(&app("straße-1", 1, 1)).unwrap(),
        Update::NameTaken
    ));
    store.create_app(&app("other", 2, 2)).unwrap();
    let filter = AppFilter {
        name: Some("STRASSE".into()),
        limit: 10,
        ..AppFilter::default()
    };
    // to_lowercase does not map ß to ss: only a case fold, not full normalisation.
    assert_eq!(store.list_apps(&filter).unwrap().1, 0);
    let filter = AppFilter {
        name: Some("STRAßE".into()),
        limit: 10,
        ..AppFilter::default()
    };
    assert_eq!(store.list_apps(&filter).unwrap().1, 1);
    let filter = AppFilter {
        order: Some((AppOrderKey::Status, true)),
        limit: 1,
        ..AppFilter::default()
    };
    let (page, count) = store.list_apps(&filter).unwrap();
    assert_eq!(count, 2);
    assert_eq!(page[0].settings.name, "other");
}

fn videos_filter_page_edit_and_delete(store: &Backend) {
    use super::VideoRendition;
    let now = OffsetDateTime::now_utc();
    let state = |status| VideoState {
        status,
        ..VideoState::pending(RecordType::Transcoded)
    };
    let settings = |name: &str, client: Option<i64>| VideoSettings {
        name: name.into(),
        description: String::new(),
        client_user_id: client.map(serde_json::Number::from),
    };
    let a = store
        .create_video(
            1,
            "s1",
            &settings("Stream Record: Ünïcode", Some(7)),
            &state(VideoStatus::Pending),
            now,
            now,
        )
        .unwrap();
    let b = store
        .create_video(
            2,
            "s2",
            &settings("other", None),
            &state(VideoStatus::Pending),
            now,
            now,
        )
        .unwrap();
    let ready = VideoState {
        duration_ms: 8000,
        size: 12345,
        renditions: vec![VideoRendition {
            name: "720p".into(),
            width: 1280,
            height: 720,
            size: 12345,
        }],
        ..state(VideoStatus::Ready)
    };
    assert!(store.set_video_state(a.id, &ready, now).unwrap());
    let list = |f: VideoFilter| {
        let (rows, total) = store.list_videos(&VideoFilter { limit: 10, ..f }).unwrap();
        (rows.iter().map(|r| r.id).collect::<Vec<_>>(), total)
    };
    assert_eq!(list(VideoFilter::default()), (vec![b.id, a.id], 2));
    assert_eq!(
        list(VideoFilter {
            stream_id: Some(1),
            ..Default::default()
        }),
        (vec![a.id], 1)
    );
    assert_eq!(
        list(VideoFilter {
            status: Some(VideoStatus::Pending),
            ..Default::default()
        }),
        (vec![b.id], 1)
    );
    assert_eq!(
        list(VideoFilter {
            search: Some("ÜNÏ".into()),
            ..Default::default()
        }),
        (vec![a.id], 1)
    );
    assert_eq!(
        list(VideoFilter {
            client_user_id: Some(7.into()),
            ..Default::default()
        }),
        (vec![a.id], 1)
    );
    let (page, total) = store
        .list_videos(&VideoFilter {
            limit: 1,
            offset: 1,
            ..Default::default()
        })
        .unwrap();
    assert_eq!((page[0].id, total), (a.id, 2));
    assert_eq!(store.get_video(a.id).unwrap().unwrap().state, ready);
    let Update::Done(edited) = store
        .update_video(a.id, a.revision, &settings("renamed", None), now)
        .unwrap()
    else {
        panic!("first edit applies")
    };
    assert_eq!(
        edited.state, ready,
        "the owner's edit keeps the recorder's fields"
    );
    assert!(matches!(
        store
            .update_video(a.id, a.revision, &settings("x", None), now)
            .unwrap(),
        Update::Stale
    ));
    assert_eq!(
        store.delete_video(a.id).unwrap().map(|r| r.slug),
        Some("s1".into())
    );
    assert!(store.get_video(a.id).unwrap().is_none());
    assert!(!store.set_video_state(a.id, &ready, now).unwrap());
}

fn broadcast_links_are_one_fact_seen_from_both_sides(store: &Backend) {
    use super::{BroadcastSettings, BroadcastStatus};
    let now = OffsetDateTime::now_utc();
    let stream = |name: &str, broadcast_ids: Vec<i64>| StreamSettings {
        name: name.into(),
        broadcast_ids,
        ..StreamSettings::default()
    };
    let s1 = store
        .create_stream(&stream("s1", vec![]), "t", now)
        .unwrap();
    let s2 = store
        .create_stream(&stream("s2", vec![]), "t", now)
        .unwrap();
    let b = store
        .create_broadcast(
            &BroadcastSettings {
                name: "b".into(),
                stream_ids: vec![s2.id, s1.id, s2.id],
                ..BroadcastSettings::default()
            },
            now,
        )
        .unwrap();
    assert_eq!(
        b.settings.stream_ids,
        vec![s1.id, s2.id],
        "a set, ascending"
    );
    assert_eq!(b.settings.status, BroadcastStatus::Pending);
    let s1_now = store.get_stream(s1.id).unwrap().unwrap();
    assert_eq!(s1_now.settings.broadcast_ids, vec![b.id]);
    assert_eq!(s1_now.revision, s1.revision + 1, "its links changed");
    // A stream PATCH read before the link changed cannot write the old links back.
    assert!(matches!(
        store
            .update_stream(s1.id, s1.revision, &s1.settings)
            .unwrap(),
        Update::Stale
    ));
    // From the stream's side: leave the broadcast.
    let Update::Done(s1_left) = store
        .update_stream(s1.id, s1_now.revision, &stream("s1", vec![]))
        .unwrap()
    else {
        panic!("current revision applies")
    };
    assert!(s1_left.settings.broadcast_ids.is_empty());
    let b_now = store.get_broadcast(b.id).unwrap().unwrap();
    assert_eq!(b_now.settings.stream_ids, vec![s2.id]);
    assert_eq!(b_now.revision, b.revision + 1);
    // Unknown ids: refused, nothing written on either side.
    let e = store
        .update_stream(s1.id, s1_left.revision, &stream("renamed", vec![b.id, 999]))
        .unwrap_err();
    assert!(matches!(
        e,
        StoreError::UnknownReference {
            field: "broadcast_ids",
            id: 999,
            ..
        }
    ));
    let s1_after = store.get_stream(s1.id).unwrap().unwrap();
    assert_eq!(
        (s1_after.settings.name.as_str(), s1_after.revision),
        ("s1", s1_left.revision)
    );
    let mut bad = b_now.settings.clone();
    bad.stream_ids = vec![12345];
    assert!(matches!(
        store
            .update_broadcast(b.id, b_now.revision, &bad, now)
            .unwrap_err(),
        StoreError::UnknownReference {
            field: "stream_ids",
            id: 12345,
            ..
        }
    ));
    assert!(store
        .create_stream(&stream("x", vec![777]), "t", now)
        .is_err());
    assert_eq!(
        store.list_streams(None, 0, 10).unwrap().1,
        2,
        "nothing created"
    );
    // Deleting a stream removes it from its broadcasts; deleting a broadcast from streams.
    assert!(store.delete_stream(s2.id).unwrap());
    assert!(store
        .get_broadcast(b.id)
        .unwrap()
        .unwrap()
        .settings
        .stream_ids
        .is_empty());
    let Update::Done(_) = store
        .update_stream(s1.id, s1_left.revision, &stream("s1", vec![b.id]))
        .unwrap()
    else {
        panic!("applies")
    };
    assert!(store.delete_broadcast(b.id).unwrap());
    assert!(!store.delete_broadcast(b.id).unwrap());
    assert!(store
        .get_stream(s1.id)
        .unwrap()
        .unwrap()
        .settings
        .broadcast_ids
        .is_empty());
    let (page, total) = store.list_broadcasts(0, 10).unwrap();
    assert_eq!((page.len(), total), (0, 0));
}

fn apps_sort_nulls_first_text_by_bytes_and_compare_and_set(store: &Backend) {
    let with = |name: &str, template: Option<i64>, plan: &str| AppSettings {
        template,
        plan: plan.into(),
        ..app(name, 1, 1)
    };
    for (name, template, plan) in [
        ("b-app", Some(2), "pro"),
        ("a-app", None, "Basic"),
        ("c-app", Some(1), "basic"),
        ("Z-app", None, "ärger"),
    ] {
        assert!(matches!(
            store.create_app(&with(name, template, plan)).unwrap(),
            Update::Done(_)
        ));
    }
    let order = |key, descending, offset| {
        let (rows, total) = store
            .list_apps(&AppFilter {
                order: Some((key, descending)),
                limit: 10,
                offset,
                ..AppFilter::default()
            })
            .unwrap();
        assert_eq!(total, 4);
        rows.into_iter()
            .map(|r| r.settings.name)
            .collect::<Vec<_>>()
    };
    // Text by its bytes (SQLite's BINARY collation), whatever the database's locale.
    assert_eq!(
        order(AppOrderKey::Name, false, 0),
        ["Z-app", "a-app", "b-app", "c-app"]
    );
    assert_eq!(
        order(AppOrderKey::Plan, false, 0),
        ["a-app", "c-app", "b-app", "Z-app"]
    );
    // NULL below every value; ties by id ascending, in both directions.
    assert_eq!(
        order(AppOrderKey::Template, false, 0),
        ["a-app", "Z-app", "c-app", "b-app"]
    );
    assert_eq!(
        order(AppOrderKey::Template, true, 0),
        ["b-app", "c-app", "a-app", "Z-app"]
    );
    assert_eq!(order(AppOrderKey::Template, false, 3), ["b-app"]);
    assert_eq!(order(AppOrderKey::Binary, true, 1).len(), 3);

    let filter = |f: AppFilter| {
        store
            .list_apps(&AppFilter { limit: 10, ..f })
            .unwrap()
            .0
            .into_iter()
            .map(|r| r.settings.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        filter(AppFilter {
            template: Some(1),
            ..AppFilter::default()
        }),
        ["c-app"]
    );
    assert_eq!(
        filter(AppFilter {
            name: Some("-APP".into()),
            api_type: Some(ApiType::WasiHttp),
            status: Some(1),
            binary: Some(1),
            plan: Some(1),
            ..AppFilter::default()
        })
        .len(),
        4
    );
    assert!(filter(AppFilter {
        api_type: Some(ApiType::ProxyWasm),
        ..AppFilter::default()
    })
    .is_empty());

    let a = store
        .list_apps(&AppFilter {
            name: Some("a-app".into()),
            limit: 1,
            ..AppFilter::default()
        })
        .unwrap()
        .0
        .remove(0);
    let Update::Done(renamed) = store
        .update_app(a.id, a.revision, &with("a-app-2", None, "Basic"))
        .unwrap()
    else {
        panic!("the current revision applies")
    };
    assert_eq!(
        (renamed.revision, renamed.settings.name.as_str()),
        (a.revision + 1, "a-app-2")
    );
    assert!(matches!(
        store
            .update_app(a.id, a.revision, &with("x", None, "x"))
            .unwrap(),
        Update::Stale
    ));
    assert!(matches!(
        store
            .update_app(a.id, renamed.revision, &with("b-app", None, "x"))
            .unwrap(),
        Update::NameTaken
    ));
    assert!(matches!(
        store.update_app(999, 1, &with("y", None, "y")).unwrap(),
        Update::NotFound
    ));
    assert_eq!(store.get_app(a.id).unwrap().unwrap(), renamed);
    assert!(store.delete_app(a.id).unwrap());
    assert!(!store.delete_app(a.id).unwrap());
    assert!(store.get_app(a.id).unwrap().is_none());
    assert!(
        matches!(
            store.create_app(&with("a-app", None, "x")).unwrap(),
            Update::Done(_)
        ),
        "the name is free again"
    );
}

fn overlays_stay_within_their_maximum_and_change_all_or_nothing(store: &Backend) {
    let now = OffsetDateTime::now_utc();
    let stream = |name: &str| {
        store
            .create_stream(
                &StreamSettings {
                    name: name.into(),
                    ..StreamSettings::default()
                },
                "t",
                now,
            )
            .unwrap()
            .id
    };
    let (s, other) = (stream("s"), stream("other"));
    let spec = |x: u32| OverlaySpec {
        url: format!("https://example.com/{x}"),
        width: 100,
        height: 100,
        x,
        y: 0,
        stretch: false,
    };
    let made = store
        .create_overlays(s, &[spec(1), spec(2)], 3, now)
        .unwrap()
        .unwrap();
    assert_eq!(made.iter().map(|o| o.spec.x).collect::<Vec<_>>(), [1, 2]);
    assert!(
        store
            .create_overlays(s, &[spec(3), spec(4)], 3, now)
            .unwrap()
            .is_none(),
        "beyond the maximum: nothing added"
    );
    assert_eq!(store.list_overlays(s).unwrap(), made);
    assert!(store
        .create_overlays(999, &[spec(5)], 3, now)
        .unwrap()
        .is_none());
    let foreign = store
        .create_overlays(other, &[spec(9)], 3, now)
        .unwrap()
        .unwrap()[0]
        .id;
    // One id that is not this stream's: nothing changes.
    assert!(store
        .update_overlays(s, &[(made[0].id, spec(10)), (foreign, spec(11))], now)
        .unwrap()
        .is_none());
    assert_eq!(store.list_overlays(s).unwrap(), made);
    let later = now + time::Duration::seconds(5);
    let changed = store
        .update_overlays(s, &[(made[1].id, spec(20))], later)
        .unwrap()
        .unwrap();
    assert_eq!((changed.len(), changed[0].spec.x), (1, 20));
    assert_eq!(
        (to_ms(changed[0].created_at), to_ms(changed[0].updated_at)),
        (to_ms(now), to_ms(later))
    );
    assert!(
        !store.delete_overlay(other, made[0].id).unwrap(),
        "not that stream's"
    );
    assert!(store.delete_overlay(s, made[0].id).unwrap());
    assert_eq!(store.list_overlays(s).unwrap(), changed);
    assert!(store.delete_stream(s).unwrap());
    assert!(
        store.list_overlays(s).unwrap().is_empty(),
        "gone with their stream"
    );
    assert_eq!(store.list_overlays(other).unwrap().len(), 1);
}

fn settings_templates_and_stream_times(store: &Backend) {
    assert_eq!(store.get_setting("k").unwrap(), None);
    store.set_setting("k", "1").unwrap();
    store.set_setting("k", "2").unwrap();
    assert_eq!(store.get_setting("k").unwrap().as_deref(), Some("2"));

    let template = |id: i64, name: &str| ProfileTemplate {
        id,
        name: name.into(),
        description: String::new(),
        fields: vec![ProfileTemplateField {
            id: 1,
            name: "f".into(),
            description: "d".into(),
            field_type: "string".into(),
            required: true,
            default: Some("x".into()),
            validation_schema: serde_json::json!({"type": "string"}),
        }],
        base_template: None,
        version: "1".into(),
        created: "2024-01-01T00:00:00Z".into(),
        template_sifter: None,
    };
    store
        .upsert_profile_templates(&[template(5, "five"), template(2, "two")])
        .unwrap();
    store
        .upsert_profile_templates(&[template(5, "FIVE")])
        .unwrap();
    assert_eq!(
        store.list_profile_templates().unwrap(),
        [template(2, "two"), template(5, "FIVE")]
    );

    let now = OffsetDateTime::now_utc();
    let s = store
        .create_stream(&StreamSettings::default(), "t", now)
        .unwrap();
    assert_eq!(s.started_at_primary, None);
    let at = |secs| now + time::Duration::seconds(secs);
    assert!(store
        .set_stream_times(s.id, Some(at(1)), None, None)
        .unwrap());
    assert!(store
        .set_stream_times(s.id, None, Some(at(2)), Some(at(3)))
        .unwrap());
    let row = store.get_stream(s.id).unwrap().unwrap();
    let ms = |t: Option<OffsetDateTime>| t.map(to_ms);
    assert_eq!(
        (
            ms(row.started_at_primary),
            ms(row.started_at_backup),
            ms(row.finished_at_primary)
        ),
        (ms(Some(at(1))), ms(Some(at(2))), ms(Some(at(3))))
    );
    assert_eq!(
        row.revision, s.revision,
        "live-state times are not a settings change"
    );
    assert!(!store
        .set_stream_times(999, Some(at(1)), None, None)
        .unwrap());
}

fn corrupt_documents_are_reported_as_corrupt(store: &Backend) {
    let now = OffsetDateTime::now_utc();
    let s = store
        .create_stream(&StreamSettings::default(), "t", now)
        .unwrap();
    store.exec(&format!(
        "UPDATE streams SET settings = '{{\"name\": 5' WHERE id = {}",
        s.id
    ));
    assert!(matches!(
        store.get_stream(s.id).unwrap_err(),
        StoreError::Corrupt { kind: "stream", id, .. } if id == s.id
    ));
    assert!(matches!(
        store.list_streams(None, 0, 10).unwrap_err(),
        StoreError::Corrupt { kind: "stream", .. }
    ));
    let v = store
        .create_video(
            s.id,
            "slug",
            &VideoSettings::default(),
            &VideoState::pending(RecordType::Origin),
            now,
            now,
        )
        .unwrap();
    store.exec(&format!(
        "UPDATE videos SET state = '[]' WHERE id = {}",
        v.id
    ));
    assert!(matches!(
        store.get_video(v.id).unwrap_err(),
        StoreError::Corrupt { kind: "video", id, .. } if id == v.id
    ));
    // Not deleted: the caller would not know which media to remove with it.
    assert!(matches!(
        store.delete_video(v.id).unwrap_err(),
        StoreError::Corrupt { kind: "video", .. }
    ));
    assert!(store.get_video(v.id).is_err(), "still there, still corrupt");
    store.exec("UPDATE settings SET value = 'x'");
    store.exec("INSERT INTO profile_templates (id, body) VALUES (7, '{}')");
    assert!(matches!(
        store.list_profile_templates().unwrap_err(),
        StoreError::Corrupt {
            kind: "profile template",
            id: 7,
            ..
        }
    ));
}

/// Client text may hold any character, NUL included (JSON's `\u0000`): it is stored and read
/// back as sent. (What SQLite's `instr` does past a NUL is its own affair: searches here stop
/// before one.)
fn free_text_round_trips_even_with_nul(store: &Backend) {
    let now = OffsetDateTime::now_utc();
    let name = "Ünï a\u{0}b";
    let v = store
        .create_video(
            1,
            "s",
            &VideoSettings {
                name: name.into(),
                ..VideoSettings::default()
            },
            &VideoState::pending(RecordType::Origin),
            now,
            now,
        )
        .unwrap();
    assert_eq!(store.get_video(v.id).unwrap().unwrap().settings.name, name);
    let found = |q: &str| {
        store
            .list_videos(&VideoFilter {
                search: Some(q.into()),
                limit: 10,
                ..VideoFilter::default()
            })
            .unwrap()
            .1
    };
    assert_eq!(found("ÜNÏ A"), 1);
    assert_eq!(found("x"), 0);
    assert_eq!(found(""), 1, "an empty search matches everything");
    let plan = AppSettings {
        plan: "p\u{0}lan".into(),
        ..app("nul-plan", 1, 1)
    };
    let Update::Done(a) = store.create_app(&plan).unwrap() else {
        panic!("created")
    };
    assert_eq!(store.get_app(a.id).unwrap().unwrap().settings, plan);
    let settings = StreamSettings {
        name: "n\u{0}ul".into(),
        client_entity_data: Some("\u{0}".into()),
        ..StreamSettings::default()
    };
    let s = store.create_stream(&settings, "t", now).unwrap();
    assert_eq!(store.get_stream(s.id).unwrap().unwrap().settings, settings);
}

/// Writers changing different fields of one stream at once, each re-reading and re-applying
/// on `Stale` as the API's PATCH does: every change lands, each exactly once.
fn concurrent_updates_of_different_fields_all_land(store: &Backend) {
    const WRITERS: usize = 4;
    const ROUNDS: u32 = 10;
    let store: &dyn Store = &**store;
    let s = store
        .create_stream(
            &StreamSettings {
                name: "race".into(),
                ..StreamSettings::default()
            },
            "t",
            OffsetDateTime::now_utc(),
        )
        .unwrap();
    fn set(settings: &mut StreamSettings, writer: usize, round: u32) {
        match writer {
            0 => settings.dvr_duration = round,
            1 => settings.cdn_id = Some(round.into()),
            2 => settings.quality_set_id = Some(round.into()),
            _ => settings.client_entity_data = Some(round.to_string()),
        }
    }
    let (id, stale) = (s.id, AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let stale = &stale;
            scope.spawn(move || {
                for round in 1..=ROUNDS {
                    loop {
                        let mut row = store.get_stream(id).unwrap().unwrap();
                        set(&mut row.settings, writer, round);
                        match store
                            .update_stream(id, row.revision, &row.settings)
                            .unwrap()
                        {
                            Update::Done(_) => break,
                            Update::Stale => stale.fetch_add(1, Ordering::Relaxed),
                            other => panic!("{other:?}"),
                        };
                    }
                }
            });
        }
    });
    let row = store.get_stream(s.id).unwrap().unwrap();
    let mut want = s.settings.clone();
    for writer in 0..WRITERS {
        set(&mut want, writer, ROUNDS);
    }
    assert_eq!(row.settings, want);
    assert_eq!(
        row.revision,
        s.revision + (WRITERS as i64) * i64::from(ROUNDS),
        "one revision per landed update ({} stale attempts retried)",
        stale.load(Ordering::Relaxed)
    );
}

fn beat<'a>(id: &'a str, url: &'a str) -> NodeBeat<'a> {
    NodeBeat {
        headroom: None,
        id,
        url,
        started_at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(1_700_000_000),
    }
}

fn a_lease_has_one_holder_and_passes_on_when_it_dies_or_idles(store: &Backend) {
    let now = OffsetDateTime::now_utc();
    let id = store
        .create_stream(&StreamSettings::default(), "t", now)
        .unwrap()
        .id;
    let dead_after = std::time::Duration::from_millis(600);
    let strict = LeaseTake {
        dead_after,
        from_idle: false,
    };
    let idle_ok = LeaseTake {
        from_idle: true,
        ..strict
    };
    assert_eq!(
        store.heartbeat(&beat("a", "http://a"), &[]).unwrap(),
        Vec::<i64>::new()
    );
    store.heartbeat(&beat("b", "http://b"), &[]).unwrap();
    let nodes = store.nodes().unwrap();
    assert_eq!(
        nodes
            .iter()
            .map(|n| (n.id.as_str(), n.url.as_str()))
            .collect::<Vec<_>>(),
        [("a", "http://a"), ("b", "http://b")]
    );
    assert_eq!(nodes[0].started_at, beat("a", "").started_at);
    assert!(nodes[0].silent < dead_after);

    // A takes it, with no numbering left by anyone; B is told who holds it; A taking again
    // keeps it.
    assert_eq!(
        store.take_lease(id, "a", strict).unwrap(),
        Ok(Numbering::default())
    );
    let holder = store.take_lease(id, "b", idle_ok).unwrap().unwrap_err();
    assert_eq!(
        (holder.node_id.as_str(), holder.node_url.as_str()),
        ("a", "http://a")
    );
    assert!(holder.publishing);
    assert!(store.take_lease(id, "a", strict).unwrap().is_ok());

    // A's heartbeat writes its state and numbering; the live view shows the state.
    let left_by_a = Numbering {
        next_msn: 1_764_000_100,
        next_discontinuity: 3,
        handover: None,
    };
    let state = LeaseState {
        stream_id: id,
        publishing: true,
        status: r#"{"live":true}"#.into(),
        numbering: Some(left_by_a),
    };
    assert_eq!(
        store
            .heartbeat(&beat("a", "http://a"), std::slice::from_ref(&state))
            .unwrap(),
        [id]
    );
    let live = store.live_leases(Some(id), dead_after).unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].node_id.as_str(), live[0].status.as_str()),
        ("a", r#"{"live":true}"#)
    );
    assert_eq!(store.live_leases(None, dead_after).unwrap(), live);

    // Its publisher gone (grace period): B may take it over only when allowed to.
    let idle = LeaseState {
        publishing: false,
        ..state.clone()
    };
    store.heartbeat(&beat("a", "http://a"), &[idle]).unwrap();
    assert!(store.take_lease(id, "b", strict).unwrap().is_err());
    assert_eq!(store.take_lease(id, "b", idle_ok).unwrap(), Ok(left_by_a));
    let live = store.live_leases(Some(id), dead_after).unwrap();
    assert_eq!(live[0].node_id, "b");
    assert!(live[0].publishing);
    assert_eq!(live[0].status, "{}", "a new holder starts with no status");
    // A learns at its next heartbeat that it no longer holds it; its state and numbering are
    // not written.
    let stale = LeaseState {
        numbering: Some(Numbering::default()),
        ..state
    };
    assert_eq!(
        store.heartbeat(&beat("a", "http://a"), &[stale]).unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        store.live_leases(Some(id), dead_after).unwrap()[0].status,
        "{}"
    );

    // Only the holder releases; a plain release leaves the numbering as it was (A's stale
    // heartbeat did not overwrite it).
    assert!(!store.release_lease(id, "a").unwrap());
    assert!(store.release_lease(id, "b").unwrap());
    assert!(store.live_leases(None, dead_after).unwrap().is_empty());
    assert_eq!(store.take_lease(id, "b", strict).unwrap(), Ok(left_by_a));

    // A stopping node gives its leases up at once, leaving each one's numbering; a lease it
    // does not hold is neither released nor numbered.
    let left_by_b = Numbering {
        next_msn: 1_764_000_200,
        next_discontinuity: 5,
        handover: Some(crate::package::Handover {
            first_msn: 1_764_000_198,
            edge_ms: 1_764_000_000_123,
        }),
    };
    let other = store
        .create_stream(&StreamSettings::default(), "u", now)
        .unwrap()
        .id;
    assert!(store.take_lease(other, "a", strict).unwrap().is_ok());
    assert_eq!(
        store
            .give_up_leases(
                "b",
                &[(id, Some(left_by_b)), (other, Some(Numbering::default()))]
            )
            .unwrap(),
        [id]
    );
    // The stream it gave up is moving until a node takes it (or for as long as asked).
    let moving_for = std::time::Duration::from_secs(15);
    assert_eq!(store.moving_streams(moving_for).unwrap(), [id]);
    std::thread::sleep(std::time::Duration::from_millis(60));
    let short = std::time::Duration::from_millis(20);
    assert!(store.moving_streams(short).unwrap().is_empty());
    assert!(store.release_lease(other, "a").unwrap());
    assert_eq!(
        store.take_lease(other, "a", strict).unwrap(),
        Ok(Numbering::default())
    );
    assert!(store.release_lease(other, "a").unwrap());

    // A holder that falls silent is dead: its lease is free, and no longer shown live.
    assert_eq!(store.take_lease(id, "a", strict).unwrap(), Ok(left_by_b));
    assert!(store.moving_streams(moving_for).unwrap().is_empty());
    std::thread::sleep(dead_after + std::time::Duration::from_millis(200));
    store.heartbeat(&beat("b", "http://b"), &[]).unwrap();
    assert!(store.live_leases(Some(id), dead_after).unwrap().is_empty());
    assert!(store.nodes().unwrap()[0].silent >= dead_after);
    // The handover was for the node that took the stream just after it was given up.
    let taken_again = store.take_lease(id, "b", strict).unwrap().unwrap();
    assert_eq!(
        taken_again,
        Numbering {
            handover: None,
            ..left_by_b
        }
    );
    assert_eq!(store.heartbeat(&beat("b", "http://b"), &[]).unwrap(), [id]);
    // A handover given up longer ago than the bridge's window is not passed on; the numbers
    // are.
    assert_eq!(
        store.give_up_leases("b", &[(id, Some(left_by_b))]).unwrap(),
        [id]
    );
    store.exec("UPDATE stream_numbering SET given_up_ms = given_up_ms - 60000");
    assert_eq!(
        store.take_lease(id, "b", strict).unwrap().unwrap(),
        Numbering {
            handover: None,
            ..left_by_b
        }
    );

    // A node that leaves cleanly gives its leases up and is dead at once.
    store.heartbeat(&beat("a", "http://a"), &[]).unwrap();
    store.node_left("b").unwrap();
    assert!(store.live_leases(None, dead_after).unwrap().is_empty());
    assert!(store.nodes().unwrap()[1].silent > dead_after);
    assert!(store.take_lease(id, "a", strict).unwrap().is_ok());
    store.heartbeat(&beat("b", "http://b"), &[]).unwrap();
    assert_eq!(store.heartbeat(&beat("a", "http://a"), &[]).unwrap(), [id]);

    // The lease goes with its stream.
    assert!(store.delete_stream(id).unwrap());
    assert_eq!(
        store.heartbeat(&beat("b", "http://b"), &[]).unwrap(),
        Vec::<i64>::new()
    );
}

fn one_of_nodes_taking_a_lease_at_once_wins(store: &Backend) {
    let store: &dyn Store = &**store;
    let now = OffsetDateTime::now_utc();
    let take = LeaseTake {
        dead_after: std::time::Duration::from_secs(10),
        from_idle: true,
    };
    let nodes = ["n0", "n1", "n2", "n3"];
    for n in nodes {
        store.heartbeat(&beat(n, "http://n"), &[]).unwrap();
    }
    for round in 0..5 {
        let id = store
            .create_stream(&StreamSettings::default(), &format!("t{round}"), now)
            .unwrap()
            .id;
        let barrier = std::sync::Barrier::new(nodes.len());
        let won = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for n in nodes {
                let (barrier, won) = (&barrier, &won);
                s.spawn(move || {
                    barrier.wait();
                    if store.take_lease(id, n, take).unwrap().is_ok() {
                        won.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(won.load(Ordering::SeqCst), 1, "round {round}");
    }
}

fn a_setting_inserted_by_several_at_once_has_one_value(store: &Backend) {
    let store: &dyn Store = &**store;
    for round in 0..5 {
        let key = format!("shared{round}");
        let barrier = std::sync::Barrier::new(4);
        let got: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let (barrier, key) = (&barrier, &key);
                    s.spawn(move || {
                        barrier.wait();
                        store.setting_or_insert(key, &format!("v{i}")).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|v| *v == got[0]), "round {round}: {got:?}");
        assert_eq!(store.get_setting(&key).unwrap(), Some(got[0].clone()));
    }
    // A stored value is kept.
    store.set_setting("kept", "old").unwrap();
    assert_eq!(store.setting_or_insert("kept", "new").unwrap(), "old");
}
