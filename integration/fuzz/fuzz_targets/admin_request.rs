//! Fuzz target: see `overlay::testbed::fuzz::admin_request`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| overlay::testbed::fuzz::admin_request(data));
