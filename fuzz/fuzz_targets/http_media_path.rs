#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| livepack::fuzzing::http_media_path(data));
