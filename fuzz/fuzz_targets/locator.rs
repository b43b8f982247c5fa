#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mpa::fuzz::fuzz_locator(data));
