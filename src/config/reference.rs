//! The configuration reference and the commented `livepack.toml`, both printed from the settings
//! table itself (`livepack config-reference`, `livepack config-template`): one source of truth,
//! so the book and the package cannot list a setting the daemon lacks, or miss one it has.

use super::setting::env_name;

/// What the reference says before and after the settings.
const PREAMBLE: &str = "\
Sources, later wins field by field: built-in defaults ← `livepack.toml` (in the working
directory, or `--config FILE` / `LIVEPACK_CONFIG`) ← environment (`LIVEPACK_*`) ← command-line
flags. Unknown keys in the file and unparsable or out-of-range values are refused at start, with
the key named. The Debian package's `/etc/livepack/livepack.toml` lists every setting, commented
out (`livepack config-template` prints that file).

Ports may be 0 (an ephemeral port; the bound address is printed and logged). The host of
`public_url` is also the host in the returned `rtmp://` and `srt://` URLs.
";

const LOGGING: &str = "\
## Logging

Logging follows `RUST_LOG` (default `info`) on stderr. The WebRTC stack's crates (`rtc*`,
`webrtc`) and srt-protocol log only errors unless the filter names them (the former warn about
start-up races, the latter once per queued packet when a peer closes; the listeners log each
close in one line). `RUST_LOG=info,livepack::events=debug` adds one line per domain event with
its JSON body (`{\"seq\":3,\"at\":\"…Z\",\"node\":\"n1\",\"type\":\"publish_started\",\"stream_id\":1,\"slot\":\"main\",\"protocol\":\"rtmp\"}`):
the facts webhooks carry.
";

/// The reference page (Markdown): an index, then one section per setting whose anchor is its
/// file key. `flags` pairs a file key with its command-line flag.
pub fn markdown(flags: &[(String, String)]) -> String {
    let settings = super::documented();
    let mut out = String::from("# Configuration reference\n\n");
    out.push_str(
        "<!-- Printed by `livepack config-reference` from the settings table in \
         src/config/table.rs: edit it there. -->\n\n",
    );
    out.push_str(PREAMBLE);
    out.push_str("\n| setting | default |\n|---|---|\n");
    for s in &settings {
        let default = s.default.as_deref().map_or("absent".to_owned(), quoted);
        out.push_str(&format!("| [`{0}`](#{0}) | {default} |\n", s.key));
    }
    out.push_str("\n## Settings\n");
    for s in &settings {
        out.push_str(&format!("\n### `{}`\n\n", s.key));
        out.push_str(&format!("- environment: `{}`\n", env_name(s.key)));
        if let Some((_, flag)) = flags.iter().find(|(k, _)| k == s.key) {
            out.push_str(&format!("- flag: `{flag}`\n"));
        }
        out.push_str(&format!("- value: {}\n", s.kind));
        match &s.default {
            Some(d) => out.push_str(&format!("- default: {}\n", quoted(d))),
            None => out.push_str("- default: absent (see below)\n"),
        }
        if let Some(allowed) = &s.allowed {
            out.push_str(&format!("- allowed: {allowed}\n"));
        }
        out.push_str(&format!("\n{}\n", s.doc));
    }
    out.push('\n');
    out.push_str(LOGGING);
    out
}

/// A default in code type; an empty list reads "none".
fn quoted(default: &str) -> String {
    match or_none(default) {
        "none" if default.is_empty() => "none".to_owned(),
        value => format!("`{value}`"),
    }
}

/// A `livepack.toml` that lists every setting commented out, with its meaning and default;
/// each `(key, toml value)` of `set` is written as a live line under its entry.
pub fn toml_template(set: &[(String, String)]) -> Result<String, String> {
    let settings = super::documented();
    if let Some((key, _)) = set
        .iter()
        .find(|(k, _)| !settings.iter().any(|s| s.key == k))
    {
        return Err(format!(
            "{key} is not a setting (see `livepack config-reference`)"
        ));
    }
    let mut out = String::from(
        "# livepack's settings (TOML). Each is listed with its meaning and default; set one with a\n\
         # line `key = value` under its entry, then `systemctl restart livepack`. An environment\n\
         # variable (LIVEPACK_*, set with `systemctl edit livepack`) wins over this file.\n\
         # Unknown keys and unparsable values are refused at start, with the key named.\n\
         # Reference: `livepack config-reference`, or the book's \"Configuration reference\".\n\n",
    );
    for s in &settings {
        out.push_str(&format!("# {} — environment: {}\n", s.key, env_name(s.key)));
        for line in wrap(&s.doc, 90) {
            out.push_str(&format!("#   {line}\n"));
        }
        match (&s.default, &s.allowed) {
            (Some(d), Some(a)) => {
                out.push_str(&format!("#   Default: {} (allowed: {a}).\n", or_none(d)))
            }
            (Some(d), None) => out.push_str(&format!("#   Default: {}.\n", or_none(d))),
            (None, Some(a)) => out.push_str(&format!("#   Absent by default (allowed: {a}).\n")),
            (None, None) => {}
        }
        for (_, value) in set.iter().filter(|(k, _)| k == s.key) {
            out.push_str(&format!("{} = {value}\n", s.key));
        }
        out.push('\n');
    }
    // A value given badly (unquoted, of the wrong type) fails here, not at the daemon's start.
    toml::from_str::<super::Layer>(&out).map_err(|e| format!("--set: {e}"))?;
    Ok(out)
}

fn or_none(default: &str) -> &str {
    if default.is_empty() {
        "none"
    } else {
        default
    }
}

/// Greedy word wrap: a word longer than `width` stays whole on its own line.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_setting_has_a_section_with_its_variable_and_default() {
        let page = markdown(&[("http_addr".into(), "--http-addr".into())]);
        for s in super::super::documented() {
            let section = page
                .split(&format!("\n### `{}`\n", s.key))
                .nth(1)
                .unwrap_or_else(|| panic!("no section for {}", s.key));
            let section = section.split("\n### ").next().unwrap();
            assert!(
                section.contains(&format!("`{}`", env_name(s.key))),
                "{}",
                s.key
            );
            assert!(section.contains(&s.doc), "{}", s.key);
            assert!(
                s.doc.split_whitespace().count() >= 3,
                "{} says too little",
                s.key
            );
        }
        assert!(page.contains("- flag: `--http-addr`"));
        assert!(
            page.contains("- default: `127.0.0.1:8080`"),
            "the default is the code's"
        );
        assert!(
            page.contains("- allowed: 2 to 300"),
            "node_dead_secs's range"
        );
    }

    #[test]
    fn the_template_is_a_config_file_the_daemon_takes() {
        let template = toml_template(&[("data_dir".into(), "\"/var/lib/livepack\"".into())])
            .expect("data_dir is a setting");
        let layer: super::super::Layer = toml::from_str(&template).expect("valid TOML");
        assert_eq!(
            layer.data_dir.as_deref(),
            Some(std::path::Path::new("/var/lib/livepack"))
        );
        assert!(layer.http_addr.is_none(), "everything else stays commented");
        for key in super::super::KEYS {
            assert!(
                template.contains(&format!("\n# {key} — environment: ")),
                "{key}"
            );
        }
        let err = toml_template(&[("no_such".into(), "1".into())]).unwrap_err();
        assert!(err.contains("no_such"), "{err}");
        let err = toml_template(&[("data_dir".into(), "/unquoted".into())]).unwrap_err();
        assert!(err.starts_with("--set"), "{err}");
    }
}
