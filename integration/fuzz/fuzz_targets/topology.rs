//! Fuzz target: see `overlay::testbed::fuzz::topology`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| overlay::testbed::fuzz::topology(data));
