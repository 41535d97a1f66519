#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| livepack::fuzzing::srt_streamid(data));
