#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mpa_stack::fuzz::fuzz_frame(data));
