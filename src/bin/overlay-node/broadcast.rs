//! `overlay-node broadcast`: broadcast a text or a file from a running node along its tree.
//! A file larger than the piece size goes as a sequence of broadcasts, one piece each,
//! read from disk one at a time (see `overlay::admin::pieces`), so any size can be sent.

use anyhow::{Context, bail};
use overlay::admin::broadcast;
use overlay::admin::pieces::{DEFAULT_PIECE, HEADER_LEN, MIN_PIECE, PieceHeader};
use overlay::proto::NodeId;
use overlay::proto::collective::MAX_STREAM_PAYLOAD;
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options of `broadcast`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["file", "text"])))]
pub struct BroadcastArgs {
    #[command(flatten)]
    dir: crate::dirs::DataDirArg,
    /// Broadcast this file's bytes, of any size: up to the piece size in one broadcast
    /// (striped over several trees when large), above it piece by piece (`listen
    /// --out-dir` puts the file together).
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Broadcast this text.
    #[arg(long, value_name = "TEXT")]
    text: Option<String>,
    /// Largest piece of a file, bytes [default: 16 MiB; at most 1 GiB]
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(MIN_PIECE..))]
    piece_size: Option<u64>,
    /// Print one JSON object: op, bytes, delivered, missing, elapsed_ms, mbit_per_s (and
    /// pieces, for a file sent piece by piece).
    #[arg(long)]
    json: bool,
}

/// What a broadcast, or all the pieces of a file, achieved.
struct Outcome {
    op: u64,
    bytes: u64,
    pieces: Option<u32>,
    delivered: Vec<NodeId>,
    missing: Vec<NodeId>,
    elapsed: Duration,
}

pub async fn run(args: BroadcastArgs) -> anyhow::Result<()> {
    let dir = args.dir.resolve()?;
    let piece = args
        .piece_size
        .unwrap_or(DEFAULT_PIECE)
        .min(MAX_STREAM_PAYLOAD - HEADER_LEN as u64);
    let outcome = match (&args.file, &args.text) {
        (Some(f), _) => {
            let len = std::fs::metadata(f)
                .with_context(|| format!("cannot read {}", f.display()))?
                .len();
            if len > piece {
                send_pieces(&dir, f, len, piece).await?
            } else {
                let payload =
                    std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?;
                send_one(&dir, &payload).await?
            }
        }
        (None, Some(t)) => {
            if t.len() as u64 > MAX_STREAM_PAYLOAD {
                bail!(
                    "a text of {} bytes exceeds the limit of {MAX_STREAM_PAYLOAD} bytes (give it as --file)",
                    t.len()
                );
            }
            send_one(&dir, t.as_bytes()).await?
        }
        (None, None) => bail!("give --file or --text"),
    };
    print(&outcome, args.json);
    Ok(())
}

async fn send_one(dir: &Path, payload: &[u8]) -> anyhow::Result<Outcome> {
    let r = broadcast(dir, payload).await?;
    Ok(Outcome {
        op: r.op,
        bytes: payload.len() as u64,
        pieces: None,
        delivered: r.delivered,
        missing: r.missing,
        elapsed: r.elapsed,
    })
}

/// Sends `file` piece by piece; a member is delivered the file if it got every piece.
async fn send_pieces(dir: &Path, path: &Path, len: u64, piece: u64) -> anyhow::Result<Outcome> {
    let count = PieceHeader::of(0, 0, len, piece)
        .with_context(|| {
            format!("a file of {len} bytes in pieces of {piece} would be too many pieces")
        })?
        .count;
    let mut id = [0u8; 8];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id)
        .map_err(|_| anyhow::anyhow!("the system random number generator failed"))?;
    let file_id = u64::from_le_bytes(id);
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (mut delivered, mut missing) = (None::<BTreeSet<NodeId>>, BTreeSet::new());
    let started = Instant::now();
    for index in 0..count {
        let header = PieceHeader::of(file_id, index, len, piece).context("piece numbers")?;
        let size = header.data_len();
        let mut payload = header.encode();
        let at = payload.len();
        payload.resize(at + size as usize, 0);
        file.read_exact(&mut payload[at..])
            .with_context(|| format!("cannot read {} (did it shrink?)", path.display()))?;
        let r = broadcast(dir, &payload)
            .await
            .with_context(|| format!("piece {} of {count}", index + 1))?;
        let got: BTreeSet<NodeId> = r.delivered.into_iter().collect();
        delivered = Some(match delivered {
            None => got,
            Some(before) => before.intersection(&got).copied().collect(),
        });
        missing.extend(r.missing);
        eprintln!("piece {} of {count} sent ({} bytes)", index + 1, size);
    }
    let delivered: Vec<NodeId> = delivered
        .unwrap_or_default()
        .into_iter()
        .filter(|m| !missing.contains(m))
        .collect();
    Ok(Outcome {
        op: file_id,
        bytes: len,
        pieces: Some(count),
        delivered,
        missing: missing.into_iter().collect(),
        elapsed: started.elapsed(),
    })
}

fn print(r: &Outcome, json: bool) {
    let elapsed_ms = r.elapsed.as_secs_f64() * 1e3;
    let mbit_per_s = r.bytes as f64 * 8.0 / r.elapsed.as_secs_f64().max(1e-9) / 1e6;
    if json {
        let mut out = serde_json::json!({
            "op": format!("{:016x}", r.op),
            "bytes": r.bytes,
            "mbit_per_s": mbit_per_s,
            "delivered": r.delivered,
            "missing": r.missing,
            "elapsed_ms": elapsed_ms,
        });
        if let Some(p) = r.pieces {
            out["pieces"] = p.into();
        }
        println!("{}", crate::json::tidy(out));
        return;
    }
    let what = match r.pieces {
        Some(p) => format!("file {:016x}: {} bytes in {p} pieces", r.op, r.bytes),
        None => format!("broadcast {:016x}: {} bytes", r.op, r.bytes),
    };
    println!(
        "{what} delivered to {} members in {elapsed_ms:.1} ms ({mbit_per_s:.2} Mbit/s)",
        r.delivered.len()
    );
    if !r.missing.is_empty() {
        let ids: Vec<String> = r.missing.iter().map(|m| m.short()).collect();
        println!("missing: {}", ids.join(" "));
    }
}
