//! The fuzz entry points of `overlay::testbed::fuzz` on a bounded, deterministic stream of
//! inputs, so the normal test suite (stable, no cargo-fuzz) checks that no input makes a
//! parser panic: per entry point, random bytes and mutations of its seeds (bit flips,
//! truncations, insertions, deletions, length-field tweaks, splices), from a fixed seed.
//! The entry points assert their own properties (a decoded packet re-encodes to itself),
//! so those are checked too. Inputs that once broke a parser are replayed first.
//!
//! `write_seed_corpus` (ignored) writes the same seeds as the cargo-fuzz seed corpus.

use overlay::proto::rng::SplitMix64;
use overlay::testbed::fuzz::{Target, targets};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Inputs per entry point.
const INPUTS: usize = 100_000;

/// Inputs that broke an entry point once, by target.
const REGRESSIONS: &[(&str, &[u8])] = &[
    // Hex digits were read with `from_str_radix`, which takes a sign: "+a" parsed as 0a,
    // so this token parsed and printed differently (found by this test).
    (
        "token",
        b"ovl1-5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a+a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
    ),
];

/// Byte values worth trying where a length or a tag may be: varint and sign boundaries.
const INTERESTING: &[u8] = &[0x00, 0x01, 0x03, 0x10, 0x20, 0x7f, 0x80, 0xfe, 0xff];

/// Runs `target` on `input`; on a panic, fails naming the target and the input.
fn run(target: &Target, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| (target.run)(input))).is_err() {
        panic!(
            "fuzz entry point {} panicked on {} bytes: {:02x?}",
            target.name,
            input.len(),
            input
        );
    }
}

/// A mutation of one seed: one to four edits, each one of the kinds a fuzzer makes.
fn mutate(rng: &mut SplitMix64, seeds: &[Vec<u8>]) -> Vec<u8> {
    let pick = |rng: &mut SplitMix64| seeds[rng.below(seeds.len() as u64) as usize].clone();
    let mut bytes = pick(rng);
    for _ in 0..1 + rng.below(4) {
        let len = bytes.len() as u64;
        let at = |rng: &mut SplitMix64| rng.below(len.max(1)) as usize;
        match rng.below(9) {
            // Flip one bit.
            0 if len > 0 => {
                let i = at(rng);
                bytes[i] ^= 1 << rng.below(8);
            }
            // A boundary value where a length or a tag may be.
            1 if len > 0 => {
                let i = at(rng);
                bytes[i] = INTERESTING[rng.below(INTERESTING.len() as u64) as usize];
            }
            // A random byte in place, or inserted.
            2 if len > 0 => {
                let i = at(rng);
                bytes[i] = rng.next_u64() as u8;
            }
            3 => {
                let i = rng.below(len + 1) as usize;
                bytes.insert(i, rng.next_u64() as u8);
            }
            // Cut the tail, or delete a range.
            4 => bytes.truncate(rng.below(len + 1) as usize),
            5 if len > 0 => {
                let i = at(rng);
                let end = (i + 1 + rng.below(8) as usize).min(bytes.len());
                bytes.drain(i..end);
            }
            // A length field off by a little or a lot: the 4-byte big-endian frame prefix
            // where there is room, else one byte (postcard's varints).
            6 if len > 0 => {
                let i = at(rng);
                let delta = [1u32, 2, 255, 1 << 20, u32::MAX][rng.below(5) as usize];
                let up = rng.below(2) == 0;
                if let Some(field) = bytes.get_mut(i..i + 4) {
                    let v = u32::from_be_bytes(field.try_into().expect("4 bytes"));
                    let v = if up {
                        v.wrapping_add(delta)
                    } else {
                        v.wrapping_sub(delta)
                    };
                    field.copy_from_slice(&v.to_be_bytes());
                } else {
                    let d = delta as u8;
                    bytes[i] = if up {
                        bytes[i].wrapping_add(d)
                    } else {
                        bytes[i].wrapping_sub(d)
                    };
                }
            }
            // Duplicate a range in place.
            7 if len > 0 => {
                let i = at(rng);
                let end = (i + 1 + rng.below(16) as usize).min(bytes.len());
                let copy = bytes[i..end].to_vec();
                bytes.splice(i..i, copy);
            }
            // Splice: this one's head, another seed's tail.
            _ => {
                let other = pick(rng);
                let cut = rng.below(len + 1) as usize;
                let from = rng.below(other.len() as u64 + 1) as usize;
                bytes.truncate(cut);
                bytes.extend_from_slice(&other[from..]);
            }
        }
    }
    bytes
}

#[test]
fn fuzz_inputs_never_panic_a_parser() {
    let targets = targets();
    for (name, input) in REGRESSIONS {
        let target = targets.iter().find(|t| t.name == *name).expect("a target");
        run(target, input);
    }
    for (k, target) in targets.iter().enumerate() {
        let seeds = (target.seeds)();
        assert!(!seeds.is_empty(), "{} has seeds", target.name);
        let mut rng = SplitMix64::new(0x5eed_u64 ^ k as u64);
        let started = std::time::Instant::now();
        for seed in &seeds {
            run(target, seed);
        }
        for i in 0..INPUTS {
            let input = if i % 10 == 0 {
                // Plain noise, short and long.
                let len = rng.below(if i % 20 == 0 { 16 } else { 512 }) as usize;
                (0..len).map(|_| rng.next_u64() as u8).collect()
            } else {
                mutate(&mut rng, &seeds)
            };
            run(target, &input);
        }
        eprintln!(
            "{}: {} seeds, {INPUTS} inputs in {:.1?}",
            target.name,
            seeds.len(),
            started.elapsed()
        );
    }
}

/// Writes the seed corpus of `integration/fuzz` (`corpus/TARGET/seed-NNN`), replacing the
/// seeds written before and leaving what the fuzzer added. Run with `--ignored`.
#[test]
#[ignore = "writes the seed corpus; run by hand when the seeds change"]
fn write_seed_corpus() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("integration/fuzz/corpus");
    for target in targets() {
        let dir = corpus.join(target.name);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        for entry in std::fs::read_dir(&dir).expect("read corpus") {
            let path = entry.expect("entry").path();
            let is_seed = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seed-"));
            if is_seed {
                std::fs::remove_file(&path).expect("remove an old seed");
            }
        }
        for (i, seed) in (target.seeds)().iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), seed).expect("write a seed");
        }
    }
}
