#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| livepack::fuzzing::api_query(data));
