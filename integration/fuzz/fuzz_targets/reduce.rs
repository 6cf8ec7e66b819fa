//! Fuzz target: see `overlay::testbed::fuzz::reduce`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| overlay::testbed::fuzz::reduce(data));
