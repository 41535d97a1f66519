//! The operator's console at `/console`: one page and its script and style, compiled into the
//! binary (no other origin, nothing to install). It signs in with an API key and speaks the
//! control API and the events feed like any client; nothing here needs a key itself.

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use crate::http::listener::{full, Body};

const PAGE: &str = include_str!("console.html");
const SCRIPT: &str = include_str!("console.js");
const STYLE: &str = include_str!("console.css");

/// Only this server's own scripts, styles, frames (the preview is the player page) and
/// requests; never framed elsewhere (the console acts with the operator's key).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

pub fn owns(path: &str) -> bool {
    path == "/console" || path.starts_with("/console/")
}

/// The page, its script or its style; anything else under `/console/` is 404.
pub fn handle(path: &str) -> Response<Body> {
    let (body, kind) = match path {
        "/console" | "/console/" => (PAGE, "text/html; charset=utf-8"),
        "/console/console.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/console/console.css" => (STYLE, "text/css; charset=utf-8"),
        _ => {
            return Response::builder()
                .status(StatusCode::NOT_FOUND)
                .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                .body(full(Bytes::from_static(b"not found\n")))
                .expect("static response")
        }
    };
    let mut resp = Response::new(full(Bytes::from_static(body.as_bytes())));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    // Re-validated on each load: a new daemon's page never runs an older script.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_page_its_script_and_style_and_nothing_else() {
        for (path, kind) in [
            ("/console", "text/html"),
            ("/console/", "text/html"),
            ("/console/console.js", "text/javascript"),
            ("/console/console.css", "text/css"),
        ] {
            let r = handle(path);
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            let ct = r.headers()[header::CONTENT_TYPE].to_str().unwrap();
            assert!(ct.starts_with(kind), "{path}: {ct}");
            assert!(r.headers().contains_key(header::CONTENT_SECURITY_POLICY));
        }
        assert_eq!(
            handle("/console/../etc/passwd").status(),
            StatusCode::NOT_FOUND
        );
        assert!(owns("/console") && owns("/console/x") && !owns("/consoles"));
    }

    #[test]
    fn the_page_loads_only_its_own_files() {
        // No other origin: every src/href in the page is a path of this server.
        for attr in ["src=\"", "href=\""] {
            for (i, _) in PAGE.match_indices(attr) {
                let value = &PAGE[i + attr.len()..];
                assert!(
                    value.starts_with('/') || value.starts_with('#'),
                    "{}",
                    &value[..value.find('"').unwrap_or(value.len())]
                );
            }
        }
        // The script names URL schemes (a placeholder), never a host to load from.
        for (i, _) in SCRIPT.match_indices("://") {
            let next = SCRIPT[i + 3..].chars().next().unwrap_or(' ');
            assert!(
                !next.is_alphanumeric(),
                "{}",
                &SCRIPT[i.saturating_sub(8)..i + 20]
            );
        }
    }
}
