//! Authentication: every API route wants `Authorization: apikey <token>`; nothing else works.

use reqwest::{Method, StatusCode};

use crate::common::{tempdir, Daemon, KEY};

#[tokio::test]
async fn every_route_refuses_without_a_valid_key() {
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[("LIVEPACK_API_KEYS", &format!("{KEY},second-key"))],
    );
    let wrong_scheme = format!("Bearer {KEY}");
    let no_space = format!("apikey{KEY}");
    let prefix = format!("apikey {}", &KEY[..KEY.len() - 1]);
    let longer = format!("apikey {KEY}x");
    let bad_headers: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![("authorization", "")],
        vec![("authorization", "apikey")],
        vec![("authorization", "apikey ")],
        vec![("authorization", &wrong_scheme)],
        vec![("authorization", &no_space)],
        vec![("authorization", &prefix)],
        vec![("authorization", &longer)],
        vec![("authorization", "apikey wrong")],
        // A key elsewhere than the Authorization header does not count.
        vec![("apikey", KEY), ("x-api-key", KEY)],
    ];
    let paths = [
        (Method::GET, "/streaming/streams"),
        (Method::POST, "/streaming/streams"),
        (Method::GET, "/streaming/streams/1"),
        (Method::PATCH, "/streaming/streams/1"),
        (Method::DELETE, "/streaming/streams/1"),
        (Method::GET, "/streaming/quality_sets"),
        (Method::PUT, "/streaming/quality_sets/default"),
        (Method::GET, "/fastedge/v1/apps"),
        (Method::POST, "/fastedge/v1/apps"),
        (Method::GET, "/security/iaas/profile-templates"),
        // Even paths that do not exist: an unauthenticated caller cannot map the routes.
        (Method::GET, "/streaming/nope"),
    ];
    for (method, path) in &paths {
        for headers in &bad_headers {
            let r = d.raw(method.clone(), path, headers, None).await;
            assert_eq!(
                (r.status, r.code()),
                (StatusCode::UNAUTHORIZED, "unauthorized"),
                "{method} {path} with {headers:?}"
            );
            assert!(r.headers.contains_key("www-authenticate"));
        }
    }
    // Key in the query string: refused, and from loopback (every test runs on 127.0.0.1).
    let r = d
        .raw(
            Method::GET,
            &format!("/streaming/streams?apikey={KEY}&token={KEY}"),
            &[],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // A refused POST created nothing.
    let listing = d.get("/streaming/streams").await;
    assert_eq!(listing.headers["x-total-count"], "0");
}

#[tokio::test]
async fn scheme_is_case_insensitive_and_every_configured_key_works() {
    let dir = tempdir();
    let d = Daemon::start_with(
        dir.path(),
        &[("LIVEPACK_API_KEYS", &format!("{KEY}, second-key"))],
    );
    for value in [
        format!("apikey {KEY}"),
        format!("APIKey {KEY}"),
        format!("APIKEY {KEY}"),
        "apiKey second-key".to_owned(),
    ] {
        let r = d
            .raw(
                Method::GET,
                "/streaming/streams",
                &[("authorization", &value)],
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{value}");
    }
}

#[tokio::test]
async fn health_and_openapi_need_no_key() {
    let dir = tempdir();
    let d = Daemon::start(dir.path());
    let r = d.raw(Method::GET, "/healthz", &[], None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["status"], "ok");
    let r = d.raw(Method::GET, "/openapi.json", &[], None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["openapi"], "3.1.0");
}

#[tokio::test]
async fn without_configured_keys_one_is_generated_into_the_data_dir_and_kept() {
    let dir = tempdir();
    let d = Daemon::start_with(dir.path(), &[]);
    let file = dir.path().join("data").join("api_key");
    let key = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    assert_eq!(d.key, key, "banner prints the generated key");
    assert!(key.len() >= 32);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "key file readable by the owner only");
    }
    assert_eq!(d.get("/streaming/streams").await.status, StatusCode::OK);
    drop(d);
    let again = Daemon::start_with(dir.path(), &[]);
    assert_eq!(again.key, key, "the same key after a restart");
    // Printed once, when generated: a restart names the file only, not the key.
    assert!(
        !again.banner.iter().any(|l| l.contains(&key)),
        "{:?}",
        again.banner
    );
    assert!(again
        .banner
        .iter()
        .any(|l| l == &format!("api_key_file: {}", file.display())));
    assert!(!again.banner.iter().any(|l| l.starts_with("api_key:")));
    // A configured key replaces the generated one and is not printed.
    drop(again);
    let configured = Daemon::start(dir.path());
    assert!(configured
        .banner
        .iter()
        .any(|l| l == "api_key: (configured)"));
    let r = configured
        .raw(
            Method::GET,
            "/streaming/streams",
            &[("authorization", &format!("apikey {key}"))],
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
