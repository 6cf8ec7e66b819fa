//! Packet loss between clusters for the userspace WAN emulator, set at run time by
//! `netns-scripts/loss` through a file.
//!
//! The file has one line per pair of clusters, `A B PERCENT` (cluster names as in the
//! topology): every packet from A to B and from B to A is dropped with that probability.
//! Pairs not listed lose nothing; a missing or empty file means no loss. The emulator
//! looks at the file's modification time at most every [`RELOAD_EVERY`] and reads it again
//! when it changed; a file it cannot parse is reported and the table in force is kept.

use overlay::proto::rng::SplitMix64;
use overlay::topology::Topology;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// How often the file's modification time is looked at (only while packets flow).
pub const RELOAD_EVERY: Duration = Duration::from_millis(100);

/// The loss probability of every ordered pair of clusters, from the file.
pub struct LossTable {
    path: Option<PathBuf>,
    names: Vec<String>,
    /// Probability in parts per 2^32, row = source cluster.
    matrix: Vec<u32>,
    modified: Option<SystemTime>,
    checked: Option<Instant>,
    rng: SplitMix64,
}

impl LossTable {
    /// No loss until `path` (if any) says otherwise.
    pub fn new(path: Option<PathBuf>, topology: &Topology) -> LossTable {
        let names: Vec<String> = topology.clusters.iter().map(|c| c.name.clone()).collect();
        let k = names.len();
        let seed = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        LossTable {
            path,
            names,
            matrix: vec![0; k * k],
            modified: None,
            checked: None,
            rng: SplitMix64::new(seed),
        }
    }

    /// Whether to drop a packet from cluster `from` to cluster `to`.
    pub fn drops(&mut self, from: usize, to: usize) -> bool {
        let p = self.matrix[from * self.names.len() + to];
        p != 0 && (self.rng.next_u64() >> 32) < u64::from(p)
    }

    /// Reads the file again if it changed since the last look (at most every
    /// [`RELOAD_EVERY`]); returns a line to log when the table changed or the file is bad.
    pub fn refresh(&mut self, now: Instant) -> Option<String> {
        let path = self.path.as_ref()?;
        if self.checked.is_some_and(|t| now - t < RELOAD_EVERY) {
            return None;
        }
        self.checked = Some(now);
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if modified == self.modified {
            return None;
        }
        self.modified = modified;
        let text = match modified {
            Some(_) => match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => return Some(format!("wan: cannot read {}: {e}", path.display())),
            },
            None => String::new(),
        };
        match self.parse(&text) {
            Ok(matrix) => {
                self.matrix = matrix;
                Some(format!("wan: loss now {}", self.describe()))
            }
            Err(e) => Some(format!(
                "wan: {}: {e}; the loss in force is kept",
                path.display()
            )),
        }
    }

    /// The matrix a file's text gives.
    fn parse(&self, text: &str) -> Result<Vec<u32>, String> {
        let k = self.names.len();
        let mut matrix = vec![0u32; k * k];
        let index = |name: &str| {
            self.names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| format!("no cluster {name:?} in the topology"))
        };
        for (no, line) in text.lines().enumerate() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.is_empty() {
                continue;
            }
            let [a, b, pct] = words[..] else {
                return Err(format!("line {}: want `A B PERCENT`", no + 1));
            };
            let (a, b) = (index(a)?, index(b)?);
            let pct: f64 = pct
                .parse()
                .ok()
                .filter(|p| (0.0..=100.0).contains(p))
                .ok_or_else(|| format!("line {}: {pct:?} is not a percentage", no + 1))?;
            let p = (pct / 100.0 * 4_294_967_295.0).round() as u32;
            matrix[a * k + b] = p;
            matrix[b * k + a] = p;
        }
        Ok(matrix)
    }

    /// `none`, or every lossy pair with its percentage.
    fn describe(&self) -> String {
        let k = self.names.len();
        let pairs: Vec<String> = (0..k)
            .flat_map(|a| (a + 1..k).map(move |b| (a, b)))
            .filter(|&(a, b)| self.matrix[a * k + b] != 0)
            .map(|(a, b)| {
                let pct = f64::from(self.matrix[a * k + b]) / 4_294_967_295.0 * 100.0;
                format!("{}<->{} {pct:.1}%", self.names[a], self.names[b])
            })
            .collect();
        if pairs.is_empty() {
            "none".into()
        } else {
            pairs.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> (LossTable, Option<String>) {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("wan-loss-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("loss");
        std::fs::write(&path, text).unwrap();
        let mut t = LossTable::new(Some(path), &Topology::builtin("das-4").unwrap());
        let line = t.refresh(Instant::now());
        std::fs::remove_dir_all(&dir).unwrap();
        (t, line)
    }

    #[test]
    fn drops_about_the_share_asked_both_ways_and_nothing_elsewhere() {
        let (mut t, line) = table("VU Leiden 20\n\n");
        assert_eq!(line.as_deref(), Some("wan: loss now VU<->Leiden 20.0%"));
        for (from, to) in [(0, 1), (1, 0)] {
            let dropped = (0..100_000).filter(|_| t.drops(from, to)).count();
            assert!((19_000..21_000).contains(&dropped), "{dropped}");
        }
        assert!((0..10_000).all(|_| !t.drops(0, 2) && !t.drops(2, 3)));
    }

    #[test]
    fn a_bad_file_keeps_the_table_and_says_why() {
        let (t, line) = table("VU Nowhere 5\n");
        assert!(line.unwrap().contains("no cluster \"Nowhere\""));
        assert_eq!(t.describe(), "none");
        for bad in ["VU Leiden 101", "VU Leiden x", "VU Leiden"] {
            let (_, line) = table(bad);
            assert!(line.unwrap().contains("line 1"), "{bad}");
        }
    }

    #[test]
    fn no_file_means_no_loss() {
        let mut t = LossTable::new(None, &Topology::builtin("das-4").unwrap());
        assert_eq!(t.refresh(Instant::now()), None);
        assert!(!t.drops(0, 1));
    }
}
