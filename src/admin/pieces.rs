//! Files of any size as a sequence of broadcasts: `overlay-node broadcast --file` cuts a
//! file larger than its piece size into pieces, each one broadcast (and so striped,
//! reported and exactly-once) on its own, and `overlay-node listen --out-dir` writes the
//! pieces at their offsets and reports the file once every piece is in. Neither side
//! holds more than one piece in memory, so a file is not bounded by the largest
//! broadcast ([`crate::proto::collective::MAX_STREAM_PAYLOAD`]) nor by memory.
//!
//! A piece is a broadcast payload starting with [`MAGIC`], then a fixed header (version,
//! file id, index, count, offset, total length, all little-endian), then the bytes. Other
//! payloads never start with the magic unless an application sends it on purpose.

use crate::proto::NodeId;
use std::collections::HashMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// What every piece starts with.
pub const MAGIC: &[u8; 8] = b"OVLPIECE";
/// The header version this code writes and reads.
const VERSION: u8 = 1;
/// Bytes before a piece's data.
pub const HEADER_LEN: usize = MAGIC.len() + 1 + 8 + 4 + 4 + 8 + 8;
/// The piece size `broadcast --file` uses by default.
pub const DEFAULT_PIECE: u64 = 64 << 20;
/// Files a listener assembles at once; the oldest is dropped past it.
const MAX_OPEN_FILES: usize = 16;

/// Where one piece belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PieceHeader {
    /// Names the file among the root's transfers (random, chosen by the sender).
    pub file: u64,
    /// The piece's position, from 0.
    pub index: u32,
    /// Pieces in the file.
    pub count: u32,
    /// Where the piece's bytes go in the file.
    pub offset: u64,
    /// The file's length.
    pub total: u64,
}

impl PieceHeader {
    /// The header's bytes, to be followed by the piece's data.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.file.to_le_bytes());
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.total.to_le_bytes());
        out
    }

    /// The header and data of a piece; `None` for any other payload, or a piece whose
    /// numbers do not fit together (index past count, data past the file's end).
    ///
    /// ```
    /// use overlay::admin::pieces::PieceHeader;
    /// let h = PieceHeader { file: 9, index: 1, count: 2, offset: 3, total: 5 };
    /// let mut payload = h.encode();
    /// payload.extend_from_slice(b"de");
    /// assert_eq!(PieceHeader::parse(&payload), Some((h, &b"de"[..])));
    /// assert_eq!(PieceHeader::parse(b"hello"), None);
    /// ```
    pub fn parse(payload: &[u8]) -> Option<(PieceHeader, &[u8])> {
        let rest = payload.strip_prefix(MAGIC.as_slice())?;
        let (&version, rest) = rest.split_first()?;
        if version != VERSION || rest.len() < HEADER_LEN - MAGIC.len() - 1 {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(rest[at..at + 8].try_into().expect("8"));
        let u32_at = |at: usize| u32::from_le_bytes(rest[at..at + 4].try_into().expect("4"));
        let h = PieceHeader {
            file: u64_at(0),
            index: u32_at(8),
            count: u32_at(12),
            offset: u64_at(16),
            total: u64_at(24),
        };
        let data = &rest[32..];
        let end = h.offset.checked_add(data.len() as u64)?;
        (h.index < h.count && end <= h.total).then_some((h, data))
    }
}

/// A file whose pieces all arrived.
#[derive(Debug, PartialEq, Eq)]
pub struct Assembled {
    /// The member that broadcast it.
    pub root: NodeId,
    /// Its id.
    pub file: u64,
    /// Its length.
    pub total: u64,
    /// Its pieces.
    pub pieces: u32,
    /// Where it was written (`None` when the listener keeps no files).
    pub path: Option<PathBuf>,
}

/// One file being put together.
struct Open {
    received: Vec<bool>,
    left: u32,
    total: u64,
    /// The part file, while pieces are written to a directory.
    part: Option<(std::fs::File, PathBuf)>,
    /// Order of opening, to drop the oldest.
    opened: u64,
}

/// Puts files together from their pieces, in any order; a piece that arrives twice is
/// written once.
pub struct Assembler {
    dir: Option<PathBuf>,
    open: HashMap<(NodeId, u64), Open>,
    opened: u64,
}

impl Assembler {
    /// Writes files to `dir` (as `ROOT-FILE.part`, renamed `ROOT-FILE.bin` once whole);
    /// with `None`, only counts the pieces.
    pub fn new(dir: Option<PathBuf>) -> Assembler {
        Assembler {
            dir,
            open: HashMap::new(),
            opened: 0,
        }
    }

    /// Takes one piece from `root`; returns the file once its last piece is in.
    pub fn add(
        &mut self,
        root: NodeId,
        h: &PieceHeader,
        data: &[u8],
    ) -> std::io::Result<Option<Assembled>> {
        let key = (root, h.file);
        if !self.open.contains_key(&key) {
            self.evict_oldest();
            let part = match &self.dir {
                Some(dir) => {
                    let path = dir.join(format!("{}-{:016x}.part", root.short(), h.file));
                    let file = std::fs::File::create(&path)?;
                    file.set_len(h.total)?;
                    Some((file, path))
                }
                None => None,
            };
            self.opened += 1;
            let open = Open {
                received: vec![false; h.count as usize],
                left: h.count,
                total: h.total,
                part,
                opened: self.opened,
            };
            self.open.insert(key, open);
        }
        let open = self.open.get_mut(&key).expect("just inserted");
        // A piece that disagrees with the file's first piece is not this file's.
        let fits = open.total == h.total && open.received.len() == h.count as usize;
        if !fits || open.received[h.index as usize] {
            return Ok(None);
        }
        if let Some((file, _)) = &mut open.part {
            file.seek(SeekFrom::Start(h.offset))?;
            file.write_all(data)?;
        }
        open.received[h.index as usize] = true;
        open.left -= 1;
        if open.left > 0 {
            return Ok(None);
        }
        let open = self.open.remove(&key).expect("present");
        let path = match open.part {
            Some((file, part)) => {
                file.sync_all()?;
                let done = part.with_extension("bin");
                std::fs::rename(&part, &done)?;
                Some(done)
            }
            None => None,
        };
        Ok(Some(Assembled {
            root,
            file: h.file,
            total: h.total,
            pieces: h.count,
            path,
        }))
    }

    /// Drops the oldest file in progress when the table is full (its part file too).
    fn evict_oldest(&mut self) {
        if self.open.len() < MAX_OPEN_FILES {
            return;
        }
        let oldest = self
            .open
            .iter()
            .min_by_key(|(_, o)| o.opened)
            .map(|(k, _)| *k);
        if let Some(key) = oldest
            && let Some(Open {
                part: Some((_, path)),
                ..
            }) = self.open.remove(&key)
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// SHA-256 of a file, read a megabyte at a time.
pub fn sha256_file(path: &Path) -> std::io::Result<[u8; 32]> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(file: u64, index: u32, count: u32, offset: u64, total: u64, data: &[u8]) -> Vec<u8> {
        let h = PieceHeader {
            file,
            index,
            count,
            offset,
            total,
        };
        let mut p = h.encode();
        p.extend_from_slice(data);
        p
    }

    #[test]
    fn bad_headers_are_not_pieces() {
        assert_eq!(PieceHeader::parse(&piece(1, 2, 2, 0, 10, b"x")), None);
        assert_eq!(PieceHeader::parse(&piece(1, 0, 1, 9, 10, b"xy")), None);
        assert_eq!(
            PieceHeader::parse(&piece(1, 0, 1, u64::MAX, 10, b"x")),
            None
        );
        let mut wrong_version = piece(1, 0, 1, 0, 1, b"x");
        wrong_version[MAGIC.len()] = 9;
        assert_eq!(PieceHeader::parse(&wrong_version), None);
        assert_eq!(PieceHeader::parse(&piece(1, 0, 1, 0, 1, b"x")[..20]), None);
    }

    #[test]
    fn pieces_in_any_order_and_twice_make_the_file_once() {
        let dir = std::env::temp_dir().join(format!("pieces-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = NodeId::from_seed(3, 1);
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
        let mut a = Assembler::new(Some(dir.clone()));
        let chunks: Vec<(u32, &[u8])> = (0..3u32)
            .map(|i| {
                (
                    i,
                    &data[i as usize * 1000..((i as usize + 1) * 1000).min(2500)],
                )
            })
            .collect();
        let mut done = None;
        for &(i, chunk) in [chunks[2], chunks[0], chunks[0], chunks[1]].iter() {
            let p = piece(77, i, 3, i as u64 * 1000, 2500, chunk);
            let (h, body) = PieceHeader::parse(&p).unwrap();
            if let Some(f) = a.add(root, &h, body).unwrap() {
                assert!(done.is_none(), "completed twice");
                done = Some(f);
            }
        }
        let done = done.expect("complete");
        assert_eq!((done.total, done.pieces), (2500, 3));
        let path = done.path.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let sha = sha256_file(&path).unwrap();
        assert_eq!(
            &sha[..],
            ring::digest::digest(&ring::digest::SHA256, &data).as_ref()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_oldest_file_gives_way_when_too_many_are_open() {
        let mut a = Assembler::new(None);
        let root = NodeId::from_seed(3, 2);
        for f in 0..=MAX_OPEN_FILES as u64 {
            let h = PieceHeader {
                file: f,
                index: 0,
                count: 2,
                offset: 0,
                total: 2,
            };
            assert_eq!(a.add(root, &h, b"a").unwrap(), None);
        }
        assert_eq!(a.open.len(), MAX_OPEN_FILES);
        assert!(!a.open.contains_key(&(root, 0)), "the oldest stayed");
    }
}
