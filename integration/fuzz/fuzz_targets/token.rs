//! Fuzz target: see `overlay::testbed::fuzz::token`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| overlay::testbed::fuzz::token(data));
