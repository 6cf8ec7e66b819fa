//! Fuzz target: see `overlay::testbed::fuzz::frame`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| overlay::testbed::fuzz::frame(data));
