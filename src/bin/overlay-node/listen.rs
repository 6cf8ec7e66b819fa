//! `overlay-node listen`: print every delivery to the running node as it arrives, one JSON
//! line each (`root`, `root_short`, `op`, `kind`, `bytes`, `sha256`; `file` when payloads
//! go to a directory, else `text` for a payload of at most 4 KiB of UTF-8); or write the
//! payloads themselves to stdout.

use crate::dirs::DataDirArg;
use crate::json::tidy;
use anyhow::Context;
use overlay::admin::{DeliveryHeader, listen};
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
    let ready = || eprintln!("listening for deliveries");
    let on_delivery = |header: DeliveryHeader, payload: Vec<u8>| {
        seen += 1;
        if let Err(e) = report(&args, &header, &payload) {
            failure = Some(e);
            return false;
        }
        args.count.is_none_or(|n| seen < n)
    };
    listen(&dir, ready, on_delivery).await?;
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
