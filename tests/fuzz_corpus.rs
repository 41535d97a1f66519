//! Replays every fuzz target's committed corpus (`fuzz/corpus/<target>/`): inputs that once
//! crashed a parser, and the seeds, must go through without a panic on every CI run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

#[test]
fn every_corpus_input_goes_through_its_target_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut failures = Vec::new();
    for (name, target) in livepack::fuzzing::TARGETS {
        let dir = root.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{name}: empty corpus");
        for path in inputs {
            let data = std::fs::read(&path).unwrap();
            if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
                failures.push(path.display().to_string());
            }
        }
    }
    // Every target has a fuzz binary and every binary a target.
    let binaries: Vec<String> = std::fs::read_dir(root.parent().unwrap().join("fuzz_targets"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            p.file_stem().unwrap().to_string_lossy().into_owned()
        })
        .collect();
    for (name, _) in livepack::fuzzing::TARGETS {
        assert!(
            binaries.contains(&name.to_string()),
            "no fuzz binary for {name}"
        );
    }
    assert_eq!(binaries.len(), livepack::fuzzing::TARGETS.len());
    assert!(failures.is_empty(), "panics on: {failures:#?}");
}
