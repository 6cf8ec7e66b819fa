//! Fuzz target: see `overlay::testbed::fuzz::packet`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| overlay::testbed::fuzz::packet(data));
