#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| livepack::fuzzing::flv_stream(data));
