//! The schema, written once: each migration is a template whose `{word}`s each dialect spells
//! its own way ([`Dialect::schema_word`]), rendered to the same text each backend shipped.
//! Each backend records the version its own way (SQLite's `user_version`, PostgreSQL's
//! `livepack_schema`); a version names one schema in both.
//!
//! Types: SQLite's INTEGER is BIGINT in PostgreSQL, REAL is DOUBLE PRECISION, AUTOINCREMENT an
//! identity (ids never reused). Free text a client chose that is only compared or sorted, never
//! read back (`name_folded`, an app's `plan`), is BYTEA there: compared byte-wise like SQLite's
//! BINARY collation whatever the database's locale, and able to hold the NUL that PostgreSQL's
//! TEXT refuses. App names sort byte-wise too (`COLLATE "C"`).

use super::dialect::Dialect;

/// Each entry moves the schema from version `index` to `index + 1`. Append only: a shipped
/// migration is never edited.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE streams (
    id {id},
    revision {int} NOT NULL,
    token TEXT NOT NULL,
    created_at_ms {int} NOT NULL,
    started_at_primary_ms {int},
    started_at_backup_ms {int},
    finished_at_primary_ms {int},
    settings TEXT NOT NULL
);
CREATE TABLE apps (
    id {id},
    revision {int} NOT NULL,
    name TEXT{collate_c} NOT NULL UNIQUE,
    name_folded {folded} NOT NULL,
    status {int} NOT NULL,
    api_type TEXT NOT NULL,
    template {int},
    {binary} {int},
    plan_id {int} NOT NULL,
    plan {folded} NOT NULL,
    settings TEXT NOT NULL
);
CREATE TABLE profile_templates (
    id {int} PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"#,
    r#"
CREATE TABLE videos (
    id {id},
    revision {int} NOT NULL,
    stream_id {int} NOT NULL,
    slug TEXT NOT NULL,
    created_at_ms {int} NOT NULL,
    updated_at_ms {int} NOT NULL,
    started_at_ms {int} NOT NULL,
    name_folded {folded} NOT NULL,
    status TEXT NOT NULL,
    client_user_id TEXT,
    settings TEXT NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX videos_by_stream ON videos (stream_id, id);
"#,
    r#"
CREATE TABLE overlays (
    id {id},
    stream_id {int} NOT NULL,
    created_at_ms {int} NOT NULL,
    updated_at_ms {int} NOT NULL,
    spec TEXT NOT NULL
);
CREATE INDEX overlays_by_stream ON overlays (stream_id, id);
"#,
    r#"
CREATE TABLE source_samples (
    stream_id {int} NOT NULL,
    time_ms {int} NOT NULL,
    bitrate_kbps {real} NOT NULL,
    frames {int} NOT NULL,
    height {int} NOT NULL,
    fps {real} NOT NULL,
    keyframe_interval {real} NOT NULL
);
CREATE INDEX source_samples_by_stream ON source_samples (stream_id, time_ms);
CREATE INDEX source_samples_by_time ON source_samples (time_ms);
"#,
    // Broadcasts, and which streams belong to which: `broadcast_streams` is the one record of
    // that link, read both as a stream's `broadcast_ids` and as a broadcast's `stream_ids`.
    // Until now `broadcast_ids` sat in the stream's settings document with no broadcast behind
    // it; such ids named nothing and are dropped (no PostgreSQL store predates this step, so
    // there it finds nothing).
    r#"
CREATE TABLE broadcasts (
    id {id},
    revision {int} NOT NULL,
    created_at_ms {int} NOT NULL,
    updated_at_ms {int} NOT NULL,
    settings TEXT NOT NULL
);
CREATE TABLE broadcast_streams (
    broadcast_id {int} NOT NULL REFERENCES broadcasts (id) ON DELETE CASCADE,
    stream_id {int} NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
    PRIMARY KEY (broadcast_id, stream_id)
){without_rowid};
CREATE INDEX broadcast_streams_by_stream ON broadcast_streams (stream_id, broadcast_id);
{drop_broadcast_ids}
"#,
    // The cluster: daemons sharing the store, and which one serves each live stream. Times
    // are the store's clock (PostgreSQL's for several nodes), so nodes' clocks may differ.
    r#"
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    started_at_ms {int} NOT NULL,
    heartbeat_ms {int} NOT NULL
);
CREATE TABLE leases (
    stream_id {int} PRIMARY KEY REFERENCES streams (id) ON DELETE CASCADE,
    node_id TEXT NOT NULL,
    publishing {bool} NOT NULL,
    status TEXT NOT NULL,
    taken_at_ms {int} NOT NULL
);
CREATE INDEX leases_by_node ON leases (node_id);
"#,
    // Webhooks and their outbox: an event row per fact some webhook wanted, a delivery row per
    // (event, webhook), claimed by one node at a time (times are the store's clock).
    r#"
CREATE TABLE webhooks (
    id {id},
    url TEXT NOT NULL,
    events TEXT,
    active {bool} NOT NULL,
    secret TEXT NOT NULL,
    created_at_ms {int} NOT NULL,
    updated_at_ms {int} NOT NULL
);
CREATE TABLE webhook_events (
    id {id},
    type TEXT NOT NULL,
    stream_id {int} NOT NULL,
    created_at_ms {int} NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE webhook_deliveries (
    id {id},
    webhook_id {int} NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id {int} NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    stream_id {int} NOT NULL,
    status TEXT NOT NULL,
    attempts {int} NOT NULL,
    next_attempt_ms {int} NOT NULL,
    claimed_by TEXT,
    claimed_until_ms {int},
    last_status {int},
    last_error TEXT,
    created_at_ms {int} NOT NULL,
    finished_at_ms {int}
);
CREATE INDEX webhook_deliveries_heads ON webhook_deliveries (status, webhook_id, stream_id, id);
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);
"#,
    // 8: restreams — a live stream sent on to other servers. The target URI holds
    // the target's secret (a stream key, an SRT passphrase): the API never returns it whole.
    r#"
CREATE TABLE restreams (
    id {id},
    stream_id {int} NOT NULL REFERENCES streams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    uri TEXT NOT NULL,
    source TEXT NOT NULL,
    active {bool} NOT NULL,
    created_at_ms {int} NOT NULL,
    updated_at_ms {int} NOT NULL
);
CREATE INDEX restreams_by_stream ON restreams (stream_id, id);
"#,
    // 9: where a live stream's segment and discontinuity numbers go on, written by the node
    // serving it (heartbeat, giving it up) and read by the node taking it over, so players
    // follow the stream across nodes as one playlist.
    r#"
CREATE TABLE stream_numbering (
    stream_id {int} PRIMARY KEY REFERENCES streams (id) ON DELETE CASCADE,
    next_msn {int} NOT NULL,
    next_discontinuity {int} NOT NULL
);
"#,
    // 10: each node's spare transcoding capacity (‰, absent: not known), in its heartbeat:
    // a PULL stream is taken by the node with the most.
    r#"
ALTER TABLE nodes ADD COLUMN headroom {int};
"#,
    // 11: when a stopping node gave the stream up (cleared when a node takes it): until another
    // node serves it, the nodes hold its viewers' requests for it instead of answering 404.
    r#"
ALTER TABLE stream_numbering ADD COLUMN given_up_ms {int};
CREATE INDEX stream_numbering_given_up ON stream_numbering (given_up_ms);
"#,
    // 12: where the stopping node left its viewers (its first unused segment number and the
    // wall-clock end of its newest part): the node taking the stream over bridges from there.
    r#"
ALTER TABLE stream_numbering ADD COLUMN handover_msn {int};
ALTER TABLE stream_numbering ADD COLUMN handover_edge_ms {int};
"#,
    // 13: a stream's name folded for `GET /streaming/streams?search=`, as videos have it;
    // filled for the rows already there by the code when the store opens
    // (`StreamStore::fold_missing_names`), as every write fills it: one folding, the code's.
    r#"
ALTER TABLE streams ADD COLUMN name_folded {folded};
"#,
    // 14: the outputs beside the source in each sample (the console's graphs of the last hour);
    // null in the samples stored before.
    r#"
ALTER TABLE source_samples ADD COLUMN frames_dropped {int};
ALTER TABLE source_samples ADD COLUMN transcoding_speed {real};
ALTER TABLE source_samples ADD COLUMN viewers {int};
"#,
];

/// The schema version this build knows.
pub(super) fn known_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// The migrations in `dialect`'s SQL: entry `i` moves version `i` to `i + 1`.
pub(super) fn migrations(dialect: Dialect) -> impl Iterator<Item = String> {
    MIGRATIONS
        .iter()
        .map(move |template| render(template, dialect))
}

fn render(template: &str, dialect: Dialect) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let end = start + rest[start..].find('}').expect("closed schema word");
        out.push_str(&rest[..start]);
        out.push_str(dialect.schema_word(&rest[start + 1..end]));
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a: stable across Rust releases, unlike the std hasher.
    fn fnv(text: &str) -> u64 {
        text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// The text each backend shipped (`sqlite.rs` and `postgres.rs` before the schema was
    /// written once): a database migrated by an older build has exactly these steps behind it.
    #[test]
    fn shipped_migrations_render_unchanged() {
        let shipped: [(Dialect, [u64; 6]); 2] = [
            (
                Dialect::Sqlite,
                [
                    0xcf1a_ceeb_c3d9_4e41,
                    0x8ebf_c06a_a172_f2dc,
                    0x4e41_0b4b_da72_b2aa,
                    0xaac3_e780_0769_560d,
                    0x3cc6_fe84_e2d7_247d,
                    0x3a64_9b74_5c5a_fccc,
                ],
            ),
            (
                Dialect::Postgres,
                [
                    0xd3e2_00c9_88f7_2dad,
                    0x71ab_2ee7_b8cb_e561,
                    0x3a21_aeda_549c_e33b,
                    0xee9d_233b_30e6_767a,
                    0xb44c_a710_40a6_41aa,
                    0x7f48_6d7d_3a9f_5d5e,
                ],
            ),
        ];
        for (dialect, hashes) in shipped {
            let rendered: Vec<u64> = migrations(dialect).map(|sql| fnv(&sql)).collect();
            assert_eq!(rendered[..hashes.len()], hashes, "{dialect:?}");
        }
    }
}
