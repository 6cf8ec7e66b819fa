//! Files of any size as a sequence of broadcasts: `overlay-node broadcast --file` cuts a
//! file larger than its piece size into pieces, each one broadcast (and so striped,
//! reported and exactly-once) on its own, and `overlay-node listen --out-dir` writes the
//! pieces at their offsets and reports the file once every piece is in. Neither side
//! holds more than one piece in memory, so a file is not bounded by the largest
//! broadcast ([`crate::proto::collective::MAX_STREAM_PAYLOAD`]) nor by memory.
//!
//! A piece is a broadcast payload starting with [`MAGIC`], then a fixed header (version,
//! file id, index, count, offset, total length, piece size, all little-endian), then the
//! bytes. Other payloads never start with the magic unless an application sends it on
//! purpose. A header whose numbers do not fit together (any member can broadcast one) is
//! not a piece, so a listener never allocates or writes by numbers it cannot check.

use crate::proto::NodeId;
use std::collections::HashMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// What every piece starts with.
pub const MAGIC: &[u8; 8] = b"OVLPIECE";
/// The header version this code writes and reads.
const VERSION: u8 = 1;
/// Bytes before a piece's data.
pub const HEADER_LEN: usize = MAGIC.len() + 1 + 8 + 4 + 4 + 8 + 8 + 8;
/// The piece size `broadcast --file` uses by default: a quarter of a node's default
/// delivery buffer, so a listener that falls a little behind loses no piece.
pub const DEFAULT_PIECE: u64 = 16 << 20;
/// The smallest piece size.
pub const MIN_PIECE: u64 = 1024;
/// Most pieces of one file (16 TiB at the default piece size).
pub const MAX_PIECES: u32 = 1 << 20;
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
    /// The size of every piece but the last.
    pub stride: u64,
}

impl PieceHeader {
    /// The header of piece `index` of a file of `total` bytes cut into pieces of
    /// `stride` bytes (`None` if the numbers do not fit: see [`PieceHeader::parse`]).
    pub fn of(file: u64, index: u32, total: u64, stride: u64) -> Option<PieceHeader> {
        let count = u32::try_from(total.div_ceil(stride.max(1))).ok()?;
        let h = PieceHeader {
            file,
            index,
            count,
            offset: u64::from(index).checked_mul(stride)?,
            total,
            stride,
        };
        h.valid().then_some(h)
    }

    /// The length of this piece's data.
    pub fn data_len(&self) -> u64 {
        self.stride.min(self.total.saturating_sub(self.offset))
    }

    /// Whether the numbers fit together: a size of at least [`MIN_PIECE`], at most
    /// [`MAX_PIECES`] pieces, the count the sizes give, the offset the index gives.
    fn valid(&self) -> bool {
        self.stride >= MIN_PIECE
            && self.total > 0
            && self.count <= MAX_PIECES
            && u64::from(self.count) == self.total.div_ceil(self.stride)
            && self.index < self.count
            && u64::from(self.index).checked_mul(self.stride) == Some(self.offset)
    }
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
        out.extend_from_slice(&self.stride.to_le_bytes());
        out
    }

    /// The header and data of a piece; `None` for any other payload, or a piece whose
    /// numbers do not fit together (see [`PieceHeader::of`]) or whose data is not the
    /// length they give.
    ///
    /// ```
    /// use overlay::admin::pieces::PieceHeader;
    /// let h = PieceHeader::of(9, 1, 1500, 1024).unwrap();
    /// let mut payload = h.encode();
    /// payload.extend_from_slice(&[7; 476]);
    /// assert_eq!(PieceHeader::parse(&payload), Some((h, &[7u8; 476][..])));
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
            stride: u64_at(32),
        };
        let data = &rest[40..];
        (h.valid() && data.len() as u64 == h.data_len()).then_some((h, data))
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

    /// Takes one piece from `root`; returns the file once its last piece is in. An I/O
    /// error drops that file (its part file too) and is returned; other files go on.
    pub fn add(
        &mut self,
        root: NodeId,
        h: &PieceHeader,
        data: &[u8],
    ) -> std::io::Result<Option<Assembled>> {
        let result = self.try_add(root, h, data);
        if result.is_err() {
            self.drop_file(&(root, h.file));
        }
        result
    }

    /// Drops every file in progress (a listener that fell behind lost some of their
    /// pieces); returns how many there were.
    pub fn drop_all(&mut self) -> usize {
        let keys: Vec<_> = self.open.keys().copied().collect();
        for key in &keys {
            self.drop_file(key);
        }
        keys.len()
    }

    fn drop_file(&mut self, key: &(NodeId, u64)) {
        if let Some(Open {
            part: Some((_, path)),
            ..
        }) = self.open.remove(key)
        {
            let _ = std::fs::remove_file(path);
        }
    }

    fn try_add(
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
        if let Some(key) = oldest {
            self.drop_file(&key);
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

    /// Piece `index` of `data` cut into pieces of `stride` bytes, as a payload.
    fn piece(file: u64, index: u32, stride: u64, data: &[u8]) -> Vec<u8> {
        let h = PieceHeader::of(file, index, data.len() as u64, stride).expect("valid");
        let mut p = h.encode();
        let at = h.offset as usize;
        p.extend_from_slice(&data[at..at + h.data_len() as usize]);
        p
    }

    fn raw(h: PieceHeader, data: &[u8]) -> Vec<u8> {
        let mut p = h.encode();
        p.extend_from_slice(data);
        p
    }

    #[test]
    fn bad_headers_are_not_pieces() {
        let good = PieceHeader::of(1, 1, 2500, 1024).unwrap();
        assert_eq!(good.count, 3);
        assert!(PieceHeader::parse(&raw(good, &[0; 1024])).is_some());
        let bad = |f: &dyn Fn(&mut PieceHeader)| {
            let mut h = good;
            f(&mut h);
            PieceHeader::parse(&raw(h, &[0; 1024])).map(|(h, _)| h)
        };
        assert_eq!(bad(&|h| h.index = 3), None, "index past count");
        assert_eq!(
            bad(&|h| h.count = u32::MAX),
            None,
            "count the sizes do not give"
        );
        assert_eq!(
            bad(&|h| h.offset = 7),
            None,
            "offset the index does not give"
        );
        assert_eq!(bad(&|h| h.stride = 10), None, "pieces too small");
        assert_eq!(
            bad(&|h| {
                h.total = u64::MAX;
                h.stride = 1 << 20;
            }),
            None,
            "too many pieces"
        );
        assert_eq!(
            PieceHeader::parse(&raw(good, &[0; 1000])),
            None,
            "short data"
        );
        let mut wrong_version = raw(good, &[0; 1024]);
        wrong_version[MAGIC.len()] = 9;
        assert_eq!(PieceHeader::parse(&wrong_version), None);
        assert_eq!(PieceHeader::parse(&raw(good, &[0; 1024])[..20]), None);
        assert_eq!(
            PieceHeader::of(1, 0, 0, 1024),
            None,
            "an empty file has no pieces"
        );
    }

    #[test]
    fn pieces_in_any_order_and_twice_make_the_file_once() {
        let dir = std::env::temp_dir().join(format!("pieces-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = NodeId::from_seed(3, 1);
        let data: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
        let mut a = Assembler::new(Some(dir.clone()));
        let mut done = None;
        for i in [2, 0, 0, 1] {
            let p = piece(77, i, 1024, &data);
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
        // A file that cannot be written is dropped with an error; the listener goes on.
        let gone = Assembler::new(Some(dir.join("no-such-dir"))).add(
            root,
            &PieceHeader::of(78, 0, 2500, 1024).unwrap(),
            &data[..1024],
        );
        assert!(gone.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_oldest_file_gives_way_when_too_many_are_open() {
        let mut a = Assembler::new(None);
        let root = NodeId::from_seed(3, 2);
        for f in 0..=MAX_OPEN_FILES as u64 {
            let h = PieceHeader::of(f, 0, 2048, 1024).unwrap();
            assert_eq!(a.add(root, &h, &[0; 1024]).unwrap(), None);
        }
        assert_eq!(a.open.len(), MAX_OPEN_FILES);
        assert!(!a.open.contains_key(&(root, 0)), "the oldest stayed");
        assert_eq!(a.drop_all(), MAX_OPEN_FILES);
    }
}
