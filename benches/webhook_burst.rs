//! A burst of live facts through the webhook outbox: N facts emitted at once, written to the
//! store's outbox and delivered to a local receiver, with the events bus at its default size
//! (the reference) and at 16 per lossy subscriber (a bus that overflows at once: the outbox
//! must not depend on it). `cargo bench --bench webhook_burst [-- N ROUNDS]`; the last figures
//! are in benches/README.md.

use std::time::Duration;

const DEFAULT_BUS: usize = 1 << 16;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n: i64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("{n} facts per burst, {rounds} rounds; events/s and ratios to the default bus");
    for round in 1..=rounds {
        let mut rates = Vec::new();
        for bus in [DEFAULT_BUS, 16] {
            let dir = tempfile::tempdir().expect("tempdir");
            let burst = runtime.block_on(livepack::benching::webhook_burst(
                dir.path(),
                n,
                bus,
                Duration::from_secs(600),
            ));
            let exact = burst.received == (0..n).collect::<Vec<_>>();
            let lost = n - burst.received.len() as i64;
            let per_s = |d: Duration| n as f64 / d.as_secs_f64();
            let (written, delivered) = (per_s(burst.written), per_s(burst.delivered));
            rates.push((written, delivered));
            let (w0, d0) = rates[0];
            println!(
                "round {round} bus {bus:>6}: written {written:>7.0}/s ({:.2}x), delivered \
                 {delivered:>6.0}/s ({:.2}x), received {} ({}), lost {lost}",
                written / w0,
                delivered / d0,
                burst.received.len(),
                if exact { "each once" } else { "NOT each once" },
            );
        }
    }
}
