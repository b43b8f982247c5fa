#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| mpa_ctl_proto::fuzz::fuzz_control(data));
