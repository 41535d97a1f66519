//! The webhook outbox's rules, on both backends (run from `db::tests`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use time::OffsetDateTime;

use super::Backend;
use crate::db::{Attempt, DeliveryStatus, Store, StreamSettings, Update, WebhookSpec};
use crate::events::{Event, Protocol, Slot};

const LEASE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

fn hook(store: &dyn Store, events: Option<&[&str]>, active: bool) -> i64 {
    let spec = WebhookSpec {
        url: "http://127.0.0.1:9/hook".into(),
        events: events.map(|e| e.iter().map(|s| s.to_string()).collect()),
        active,
    };
    store
        .create_webhook(&spec, "whsec_x", OffsetDateTime::now_utc())
        .unwrap()
        .id
}

fn started(stream_id: i64) -> Event {
    Event::PublishStarted {
        stream_id,
        slot: Slot::Main,
        protocol: Protocol::Rtmp,
    }
}

/// Claims everything due for `node` and marks it delivered; returns (webhook, event type,
/// stream) in claim order.
fn drain(store: &dyn Store, node: &str) -> Vec<(i64, String, i64)> {
    let mut got = Vec::new();
    loop {
        let due = store.claim_deliveries(node, LEASE, 100).unwrap();
        if due.is_empty() {
            return got;
        }
        for d in due {
            got.push((d.webhook_id, d.event.kind.clone(), d.event.stream_id));
            store
                .finish_delivery(d.id, node, &Attempt::Delivered { status: 200 }, DAY)
                .unwrap();
        }
    }
}

pub(super) fn record_changes_write_their_events_in_their_own_transaction(store: &Backend) {
    let store: &dyn Store = &**store;
    let now = OffsetDateTime::now_utc();
    // No webhook: nothing is written, nothing is due.
    let before = store
        .create_stream(&StreamSettings::default(), "t0", now)
        .unwrap();
    assert!(store.claim_deliveries("n", LEASE, 10).unwrap().is_empty());
    let all = hook(store, None, true);
    let only_deletes = hook(store, Some(&["stream_deleted"]), true);
    let _inactive = hook(store, None, false);
    let s = store
        .create_stream(&StreamSettings::default(), "t1", now)
        .unwrap();
    let Update::Done(_) = store.update_stream(s.id, s.revision, &s.settings).unwrap() else {
        panic!("update")
    };
    // A stale update writes no event.
    let Update::Stale = store.update_stream(s.id, s.revision, &s.settings).unwrap() else {
        panic!("stale")
    };
    assert!(store.delete_stream(s.id).unwrap());
    assert!(!store.delete_stream(s.id).unwrap());
    assert!(store.delete_stream(before.id).unwrap());
    let got = drain(store, "n");
    // Per webhook and stream in order: `all` sees the three of `s` and the deletion of
    // `before`, the other only the deletions.
    assert_eq!(got.len(), 6, "{got:?}");
    let of = |webhook: i64, stream: i64| -> Vec<&str> {
        got.iter()
            .filter(|(w, _, s)| (*w, *s) == (webhook, stream))
            .map(|(_, k, _)| k.as_str())
            .collect()
    };
    assert_eq!(
        of(all, s.id),
        ["stream_created", "stream_updated", "stream_deleted"],
        "{got:?}"
    );
    assert_eq!(of(only_deletes, s.id), ["stream_deleted"]);
    assert_eq!(of(all, before.id), ["stream_deleted"]);
    assert_eq!(of(only_deletes, before.id), ["stream_deleted"]);
    let (list, total) = store.list_deliveries(only_deletes, None, 0, 10).unwrap();
    assert_eq!(total, 2);
    assert!(list.iter().all(|d| d.event_type == "stream_deleted"
        && d.status == DeliveryStatus::Delivered
        && d.attempts == 1
        && d.last_status == Some(200)));
    let (_, total) = store
        .list_deliveries(all, Some(DeliveryStatus::Pending), 0, 10)
        .unwrap();
    assert_eq!(total, 0);
}

pub(super) fn a_stream_s_deliveries_go_one_at_a_time_in_order_and_fail_after_the_window(
    backend: &Backend,
) {
    let store: &dyn Store = &**backend;
    let id = hook(store, Some(&["publish_started", "live_ended"]), true);
    for stream in [1, 2] {
        store
            .append_events(&[(&started(stream), Some("node-a"))])
            .unwrap();
        store
            .append_events(&[(&Event::LiveEnded { stream_id: stream }, None)])
            .unwrap();
    }
    // Unwanted: nothing written.
    assert_eq!(
        store
            .append_events(&[(&Event::InputsGone { stream_id: 1 }, None)])
            .unwrap(),
        0
    );
    // The head of each stream only, and not twice while claimed.
    let first = store.claim_deliveries("a", LEASE, 10).unwrap();
    assert_eq!(first.len(), 2);
    assert!(first.iter().all(|d| d.event.kind == "publish_started"));
    let data: serde_json::Value = serde_json::from_str(&first[0].event.data).unwrap();
    assert_eq!(
        data,
        serde_json::json!({"slot": "main", "protocol": "rtmp", "node": "node-a"})
    );
    assert!(store.claim_deliveries("b", LEASE, 10).unwrap().is_empty());
    // A failure puts the head back with a delay; the stream's next event still waits.
    let failed = Attempt::Failed {
        status: Some(500),
        error: "HTTP 500".into(),
        retry_in: Duration::from_secs(3600),
    };
    store
        .finish_delivery(first[0].id, "a", &failed, DAY)
        .unwrap();
    store
        .finish_delivery(first[1].id, "a", &Attempt::Delivered { status: 204 }, DAY)
        .unwrap();
    let next = store.claim_deliveries("b", LEASE, 10).unwrap();
    assert_eq!(next.len(), 1, "only stream 2's second event is due");
    assert_eq!(
        (next[0].event.stream_id, next[0].event.kind.as_str()),
        (2, "live_ended")
    );
    // A finish by a node that does not hold the claim changes nothing.
    store
        .finish_delivery(next[0].id, "a", &Attempt::Delivered { status: 200 }, DAY)
        .unwrap();
    let (pending, _) = store
        .list_deliveries(id, Some(DeliveryStatus::Pending), 0, 10)
        .unwrap();
    assert_eq!(pending.len(), 3, "stream 1's two and stream 2's second");
    let backlog = store.backlog().unwrap();
    assert_eq!((backlog.webhooks_pending, backlog.webhooks_failed), (3, 0));
    store
        .finish_delivery(next[0].id, "b", &Attempt::Delivered { status: 200 }, DAY)
        .unwrap();
    // A retry past the window fails the delivery at once; the stream moves on.
    store.release_claims("a").unwrap();
    backend.exec("UPDATE webhook_deliveries SET next_attempt_ms = 0 WHERE status = 'pending'");
    let again = store.claim_deliveries("a", LEASE, 10).unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempts, 1);
    store
        .finish_delivery(again[0].id, "a", &failed, Duration::from_secs(60))
        .unwrap();
    let (failed_list, _) = store
        .list_deliveries(id, Some(DeliveryStatus::Failed), 0, 10)
        .unwrap();
    assert_eq!(failed_list.len(), 1);
    assert_eq!(failed_list[0].attempts, 2);
    assert_eq!(failed_list[0].last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(failed_list[0].last_status, Some(500));
    let backlog = store.backlog().unwrap();
    assert_eq!((backlog.webhooks_pending, backlog.webhooks_failed), (1, 1));
    assert!(failed_list[0].finished_at.is_some() && failed_list[0].next_attempt_at.is_none());
    let last = store.claim_deliveries("a", LEASE, 10).unwrap();
    assert_eq!((last.len(), last[0].event.kind.as_str()), (1, "live_ended"));
    // Deleting the webhook deletes its deliveries; pruning then drops the orphaned events.
    assert!(store.delete_webhook(id).unwrap());
    assert_eq!(store.list_deliveries(id, None, 0, 10).unwrap().1, 0);
    store.prune_deliveries(DAY, DAY).unwrap();
}

pub(super) fn of_nodes_claiming_at_once_each_delivery_goes_to_one(store: &Backend) {
    let store: &dyn Store = &**store;
    hook(store, None, true);
    for stream in 1..=40 {
        store.append_events(&[(&started(stream), None)]).unwrap();
    }
    // Each node claims until nothing is left for it; a claim that lost every row to another
    // node comes back empty, so the last node standing picks up the rest.
    let claimed = std::sync::Mutex::new(Vec::new());
    let rounds = AtomicUsize::new(0);
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for n in ["n0", "n1", "n2", "n3"] {
            let (barrier, claimed, rounds) = (&barrier, &claimed, &rounds);
            s.spawn(move || {
                barrier.wait();
                loop {
                    let got = store.claim_deliveries(n, LEASE, 15).unwrap();
                    rounds.fetch_add(1, Ordering::SeqCst);
                    if got.is_empty() {
                        return;
                    }
                    claimed.lock().unwrap().extend(got.iter().map(|d| d.id));
                }
            });
        }
    });
    let mut ids = claimed.into_inner().unwrap();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((n, ids.len()), (40, 40), "each delivery claimed once");
    assert!(store.claim_deliveries("n4", LEASE, 100).unwrap().is_empty());
}
