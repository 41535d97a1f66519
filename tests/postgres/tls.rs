//! The daemon's store over TLS (`sslmode`, `sslrootcert` in `database_url`) against a
//! PostgreSQL that admits TCP clients over TLS only, with a certificate a test CA signed.

use reqwest::StatusCode;

use super::{refused_start, KEY};
use crate::common::certs::TestCa;
use crate::common::pg::PgServer;
use crate::common::{tempdir, Daemon};

#[tokio::test(flavor = "multi_thread")]
async fn the_store_is_reached_over_verified_tls_and_plaintext_is_refused() {
    let ca = TestCa::new("livepack test CA");
    let (cert, key) = ca.server(&["localhost", "127.0.0.1"]);
    let server = PgServer::start_tls(&cert, &key);
    let url = server.create_database();
    let certs = tempdir();
    let (ours, theirs) = (certs.path().join("ca.pem"), certs.path().join("other.pem"));
    std::fs::write(&ours, &ca.pem).unwrap();
    std::fs::write(&theirs, &TestCa::new("someone else's CA").pem).unwrap();

    // The right CA and the host name checked: the daemon starts and its records are there.
    let verified = format!("{url}?sslmode=verify-full&sslrootcert={}", ours.display());
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[
            ("LIVEPACK_API_KEYS", KEY),
            ("LIVEPACK_DATABASE_URL", &verified),
            ("LIVEPACK_NODE_ID", "tls"),
        ],
    );
    let listed = d.get("/streaming/streams").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    d.terminate();

    // Another CA: refused at start, saying what failed and which settings decide it.
    let err = refused_start(&format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        theirs.display()
    ));
    assert!(
        err.contains("LIVEPACK_DATABASE_URL")
            && err.contains("TLS handshake")
            && err.contains("UnknownIssuer")
            && err.contains("sslrootcert"),
        "{err}"
    );
    // Plaintext: this server refuses it.
    let err = refused_start(&format!("{url}?sslmode=disable"));
    assert!(err.contains("no encryption"), "{err}");
    // A mode libpq does not have, named.
    let err = refused_start(&format!("{url}?sslmode=always"));
    assert!(
        err.contains("sslmode") && err.contains("verify-full"),
        "{err}"
    );
}
