#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| livepack::fuzzing::pull_playlist(data));
