//! `overlay-node listen`: print every delivery to the running node as it arrives, one JSON
//! line each (`root`, `root_short`, `op`, `kind`, `bytes`, `sha256`; `file` when payloads
//! go to a directory, else `text` for a payload of at most 4 KiB of UTF-8); or write the
//! payloads themselves to stdout.
//!
//! A file that `broadcast --file` sent piece by piece is one delivery: with `--out-dir`
//! its pieces are written at their offsets and it is reported once whole (`kind` "file",
//! `pieces`, the SHA-256 of the whole file); otherwise each piece gets a line (`kind`
//! "file_piece") and `--payload` writes the pieces' bytes without their headers.

use crate::dirs::DataDirArg;
use crate::json::tidy;
use anyhow::Context;
use overlay::admin::pieces::{Assembled, Assembler, PieceHeader, sha256_file};
use overlay::admin::{DeliveryHeader, listen_with_lag};
use std::io::Write;
use std::path::PathBuf;

/// Options of `listen`.
#[derive(clap::Args, Debug)]
pub struct ListenArgs {
    #[command(flatten)]
    dir: DataDirArg,
    /// Write each payload to a file in this directory (named ROOT-OP.bin).
    #[arg(long, value_name = "DIR", conflicts_with = "payload")]
    out_dir: Option<PathBuf>,
    /// Write the payloads to stdout, one after the other, instead of JSON lines.
    #[arg(long)]
    payload: bool,
    /// Stop after this many deliveries.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

pub async fn run(args: ListenArgs) -> anyhow::Result<()> {
    let dir = args.dir.resolve()?;
    if let Some(out) = &args.out_dir {
        std::fs::create_dir_all(out)
            .with_context(|| format!("--out-dir {}: cannot create", out.display()))?;
    }
    let mut seen = 0u64;
    let mut failure: Option<anyhow::Error> = None;
    let files = std::cell::RefCell::new(Assembler::new(args.out_dir.clone()));
    let ready = || eprintln!("listening for deliveries");
    // Deliveries dropped for this listener may be pieces: the files in progress cannot
    // complete, so they are dropped and said so.
    let on_lagged = |missed: u64| {
        let dropped = files.borrow_mut().drop_all();
        eprintln!("warning: this listener fell behind: {missed} deliveries were dropped for it");
        if dropped > 0 {
            eprintln!("error: {dropped} files in progress lost pieces and were dropped");
        }
    };
    let on_delivery = |header: DeliveryHeader, payload: Vec<u8>| {
        let done = match PieceHeader::parse(&payload) {
            Some((piece, data)) => {
                report_piece(&args, &mut files.borrow_mut(), &header, &piece, data)
            }
            None => report(&args, &header, &payload).map(|()| true),
        };
        match done {
            Ok(true) => seen += 1,
            Ok(false) => {}
            Err(e) => {
                failure = Some(e);
                return false;
            }
        }
        args.count.is_none_or(|n| seen < n)
    };
    listen_with_lag(&dir, ready, on_delivery, on_lagged).await?;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(())
}

fn report(args: &ListenArgs, header: &DeliveryHeader, payload: &[u8]) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    if args.payload {
        stdout.write_all(payload)?;
        return Ok(stdout.flush()?);
    }
    let mut line = serde_json::to_value(header)?;
    // As `broadcast --json` prints it: 16 hex digits.
    line["op"] = format!("{:016x}", header.op).into();
    line["sha256"] = hex(ring::digest::digest(&ring::digest::SHA256, payload).as_ref()).into();
    if let Some(out) = &args.out_dir {
        let file = out.join(format!("{}-{:016x}.bin", header.root.short(), header.op));
        std::fs::write(&file, payload)
            .with_context(|| format!("cannot write {}", file.display()))?;
        line["file"] = file.display().to_string().into();
    } else if let Ok(text) = std::str::from_utf8(payload)
        && payload.len() <= 4096
    {
        line["text"] = text.into();
    }
    writeln!(stdout, "{}", tidy(line))?;
    Ok(stdout.flush()?)
}

/// Reports one piece of a file; true once the file is whole.
fn report_piece(
    args: &ListenArgs,
    files: &mut Assembler,
    header: &DeliveryHeader,
    piece: &PieceHeader,
    data: &[u8],
) -> anyhow::Result<bool> {
    let mut stdout = std::io::stdout().lock();
    if args.payload {
        stdout.write_all(data)?;
        stdout.flush()?;
    } else if args.out_dir.is_none() {
        let line = serde_json::json!({
            "root": header.root, "root_short": header.root.short(),
            "op": format!("{:016x}", header.op), "kind": "file_piece",
            "file": format!("{:016x}", piece.file), "index": piece.index,
            "count": piece.count, "offset": piece.offset, "total": piece.total,
            "bytes": data.len(),
            "sha256": hex(ring::digest::digest(&ring::digest::SHA256, data).as_ref()),
        });
        writeln!(stdout, "{}", tidy(line))?;
        stdout.flush()?;
    }
    let assembled = match files.add(header.root, piece, data) {
        Ok(done) => done,
        Err(e) => {
            // That file is dropped; the others and later deliveries go on.
            eprintln!(
                "error: file {:016x} from {}: cannot write a piece ({e}); the file is dropped",
                piece.file,
                header.root.short()
            );
            return Ok(false);
        }
    };
    let Some(Assembled {
        path,
        total,
        pieces,
        file,
        root,
    }) = assembled
    else {
        return Ok(false);
    };
    if let Some(path) = path {
        let sha = sha256_file(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let line = serde_json::json!({
            "root": root, "root_short": root.short(), "op": format!("{file:016x}"),
            "kind": "file", "bytes": total, "pieces": pieces, "sha256": hex(&sha),
            "file": path.display().to_string(),
        });
        writeln!(stdout, "{}", tidy(line))?;
        stdout.flush()?;
    }
    Ok(true)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
