//! `bench soak`: real `overlay-node` processes on loopback for `--minutes`, with churn and a
//! steady load, watched from outside as an operator would watch them.
//!
//! - `--nodes` stable members stay up throughout; `--churners` more are, in turn, killed
//!   (SIGKILL) or told to leave, and restarted on their data dir 5 s later, one every
//!   `--churn-every-s`.
//! - Load: a broadcast of `--broadcast-bytes` every `--broadcast-every-ms` from the stable
//!   members in turn, and every `--collective-every-s` a `reduce count` or a `gather info`
//!   (alternating). A listener on every stable member records each delivery's op.
//! - About every minute, right before a churn event (every churner up since its restart, so
//!   every sample sees the same membership), per stable member: RSS and open descriptors
//!   (from `/proc`), tokio tasks and bytes sent and received (from its status).
//!
//! The report: per node, those figures in the first and the last minute (growth in %), and
//! for the members alive throughout, broadcasts lost (reported missing, or reported
//! delivered but never seen by the listener) and duplicated (seen twice), and collectives
//! that missed one of them. The node processes are the release `overlay-node` next to this
//! example (`cargo build --release` first).

use anyhow::{Context, bail};
use overlay::admin::{self, AdminRequest, AdminResponse};
use overlay::api::NodeStatus;
use overlay::proto::NodeId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod report;

pub use report::{Sample, SoakReport};

/// Options of `soak`.
#[derive(clap::Args, Debug, Clone)]
pub struct SoakArgs {
    /// How long the load runs.
    #[arg(long, default_value_t = 5)]
    pub minutes: u64,
    /// Members that stay up throughout (the figures are theirs).
    #[arg(long, default_value_t = 8)]
    pub nodes: usize,
    /// Members that are killed or leave, and come back, in turn.
    #[arg(long, default_value_t = 2)]
    pub churners: usize,
    /// Seconds between two churn events.
    #[arg(long, default_value_t = 20)]
    pub churn_every_s: u64,
    /// Milliseconds between two broadcasts.
    #[arg(long, default_value_t = 1000)]
    pub broadcast_every_ms: u64,
    /// Bytes per broadcast.
    #[arg(long, default_value_t = 4096)]
    pub broadcast_bytes: usize,
    /// Seconds between two collectives (reduce count, gather info in turn).
    #[arg(long, default_value_t = 5)]
    pub collective_every_s: u64,
}

/// One `overlay-node` process and its data directory.
struct NodeProc {
    name: String,
    dir: PathBuf,
    child: Child,
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The release `overlay-node` beside this example's binary.
fn node_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("overlay-node"))
        .context("no directory above this binary")?;
    if !bin.is_file() {
        bail!(
            "{} is not built: run `cargo build --release` first (soak runs the real daemon)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Starts `overlay-node ARGS --data-dir BASE/NAME`, its log in `BASE/NAME.log`.
fn spawn(bin: &Path, base: &Path, name: &str, args: &[String]) -> anyhow::Result<NodeProc> {
    let dir = base.join(name);
    let log = std::fs::File::create(base.join(format!("{name}.log")))?;
    let child = Command::new(bin)
        .args(args)
        .arg("--data-dir")
        .arg(&dir)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    Ok(NodeProc {
        name: name.into(),
        dir,
        child,
    })
}

async fn status(dir: &Path) -> anyhow::Result<NodeStatus> {
    match admin::request(dir, &AdminRequest::Status).await? {
        AdminResponse::Status(s) => Ok(*s),
        other => bail!("unexpected answer to status: {other:?}"),
    }
}

/// Waits until the node at `dir` answers its status (30 s at most).
async fn answering(dir: &Path) -> anyhow::Result<NodeStatus> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match status(dir).await {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!("{} did not answer within 30 s", dir.display())));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// RSS in bytes and open descriptors of a process, from `/proc`.
fn proc_figures(pid: u32) -> (u64, u64) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (rss, fds)
}

/// A broadcast: the member that sent it and its op number there.
type OpKey = (NodeId, u64);

/// What each stable member's listener saw, in order.
type Seen = Arc<Mutex<BTreeMap<NodeId, Vec<OpKey>>>>;

/// What the load loops recorded.
#[derive(Default)]
struct Record {
    /// Per broadcast: its root and op, delivered to, reported missing.
    broadcasts: Vec<(OpKey, Vec<NodeId>, Vec<NodeId>)>,
    broadcast_errors: Vec<String>,
    collectives: u64,
    /// Collectives that left out a stable member, or failed.
    collective_misses: Vec<String>,
    churn_events: u64,
}

/// Runs the soak; prints progress on stderr.
pub fn soak(args: &SoakArgs) -> anyhow::Result<SoakReport> {
    if args.nodes < 2 {
        bail!("--nodes must be at least 2");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run(args.clone()))
}

async fn run(args: SoakArgs) -> anyhow::Result<SoakReport> {
    let bin = node_binary()?;
    let base = std::env::temp_dir().join(format!("ovsoak-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let result = run_in(&args, &bin, &base).await;
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&base);
    } else {
        eprintln!("soak: logs kept in {}", base.display());
    }
    result
}

async fn run_in(args: &SoakArgs, bin: &Path, base: &Path) -> anyhow::Result<SoakReport> {
    let t0 = Instant::now();
    let listen = ["--listen".to_string(), "127.0.0.1:0".to_string()];
    let first = spawn(
        bin,
        base,
        "s0",
        &[&listen[..], &["--name".into(), "s0".into()]].concat(),
    )?;
    let seed = answering(&first.dir).await?;
    let join: Vec<String> = [
        "--join".to_string(),
        seed.addr.to_string(),
        "--token-file".into(),
        first.dir.join("token").display().to_string(),
    ]
    .to_vec();
    let mut stable = vec![first];
    for i in 1..args.nodes {
        let name = format!("s{i}");
        let flags = [&listen[..], &join[..], &["--name".into(), name.clone()]].concat();
        stable.push(spawn(bin, base, &name, &flags)?);
    }
    let mut churners = Vec::new();
    for i in 0..args.churners {
        let name = format!("c{i}");
        let flags = [&listen[..], &join[..], &["--name".into(), name.clone()]].concat();
        churners.push(spawn(bin, base, &name, &flags)?);
    }
    let total = args.nodes + args.churners;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = status(&stable[0].dir).await?;
        let alive = s
            .members
            .iter()
            .filter(|m| m.state == overlay::proto::Liveness::Alive)
            .count();
        if alive == total {
            break;
        }
        if Instant::now() > deadline {
            bail!("{alive} of {total} members alive after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut ids = Vec::new();
    for n in &stable {
        ids.push(answering(&n.dir).await?.id);
    }
    eprintln!(
        "soak: {total} nodes up in {:.1} s ({} stable, {} churning); load for {} min",
        t0.elapsed().as_secs_f64(),
        args.nodes,
        args.churners,
        args.minutes
    );

    // Listeners on the stable members: the op of every delivery, per member.
    let seen: Seen = Arc::default();
    let mut listeners = Vec::new();
    for (n, &id) in stable.iter().zip(&ids) {
        let (dir, seen) = (n.dir.clone(), seen.clone());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        listeners.push(tokio::spawn(async move {
            admin::listen(
                &dir,
                || {
                    let _ = ready_tx.send(());
                },
                |h, _| {
                    seen.lock()
                        .expect("seen")
                        .entry(id)
                        .or_default()
                        .push((h.root, h.op));
                    true
                },
            )
            .await
        }));
        tokio::time::timeout(Duration::from_secs(20), ready_rx)
            .await
            .context("a listener did not start within 20 s")??;
    }

    let record: Arc<Mutex<Record>> = Arc::default();
    let end = Instant::now() + Duration::from_secs(args.minutes * 60);
    let dirs: Vec<PathBuf> = stable.iter().map(|n| n.dir.clone()).collect();
    let load = tokio::spawn(load(
        args.clone(),
        dirs.clone(),
        ids.clone(),
        end,
        record.clone(),
    ));
    let samples = churn(args, bin, base, &stable, &mut churners, end, record.clone()).await?;
    load.await??;
    // Deliveries still on their way when the last report came in reach the listeners.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for l in &listeners {
        l.abort();
    }
    let seen = seen.lock().expect("seen").clone();
    let record = std::mem::take(&mut *record.lock().expect("record"));
    drop(churners);
    drop(stable);
    Ok(report::build(args, &ids, samples, &seen, record))
}

/// Broadcasts and collectives from the stable members until `end`.
async fn load(
    args: SoakArgs,
    dirs: Vec<PathBuf>,
    ids: Vec<NodeId>,
    end: Instant,
    record: Arc<Mutex<Record>>,
) -> anyhow::Result<()> {
    let mut broadcast_tick = tokio::time::interval(Duration::from_millis(args.broadcast_every_ms));
    let mut collective_tick = tokio::time::interval(Duration::from_secs(args.collective_every_s));
    let (mut b, mut c) = (0usize, 0usize);
    while Instant::now() < end {
        tokio::select! {
            _ = broadcast_tick.tick() => {
                let (dir, root) = (&dirs[b % dirs.len()], ids[b % dirs.len()]);
                let mut payload = vec![0u8; args.broadcast_bytes];
                payload[..8.min(args.broadcast_bytes)]
                    .copy_from_slice(&(b as u64).to_le_bytes()[..8.min(args.broadcast_bytes)]);
                b += 1;
                let r = admin::broadcast(dir, &payload).await;
                let mut rec = record.lock().expect("record");
                match r {
                    Ok(r) => rec.broadcasts.push(((root, r.op), r.delivered, r.missing)),
                    Err(e) => rec.broadcast_errors.push(e.to_string()),
                }
            }
            _ = collective_tick.tick() => {
                let dir = &dirs[c % dirs.len()];
                let req = if c.is_multiple_of(2) { AdminRequest::ReduceCount } else { AdminRequest::GatherInfo };
                c += 1;
                let answer = admin::request(dir, &req).await;
                let who: Result<Vec<NodeId>, String> = match answer {
                    Ok(AdminResponse::Count(r)) => Ok(r.contributors),
                    Ok(AdminResponse::Info(r)) => Ok(r.nodes.iter().map(|n| n.id).collect()),
                    Ok(other) => Err(format!("unexpected answer {other:?}")),
                    Err(e) => Err(e.to_string()),
                };
                let mut rec = record.lock().expect("record");
                rec.collectives += 1;
                match who {
                    Ok(who) => {
                        let left_out: Vec<String> =
                            ids.iter().filter(|id| !who.contains(id)).map(|id| id.short()).collect();
                        if !left_out.is_empty() {
                            rec.collective_misses.push(format!("{req:?} left out {left_out:?}"));
                        }
                    }
                    Err(e) => rec.collective_misses.push(format!("{req:?}: {e}")),
                }
            }
        }
    }
    Ok(())
}

/// Kills or stops (leave) a churner in turn, and restarts it 5 s later, until `end`.
/// Samples the stable members when a minute has passed since the last sample, right before
/// a churn event (every churner has then been up since its restart, so every sample is
/// taken in the same state), at the start and at the end.
async fn churn(
    args: &SoakArgs,
    bin: &Path,
    base: &Path,
    stable: &[NodeProc],
    churners: &mut [NodeProc],
    end: Instant,
    record: Arc<Mutex<Record>>,
) -> anyhow::Result<Vec<Sample>> {
    let start = Instant::now();
    let mut samples = sample(stable, start).await?;
    let mut sampled = start;
    let every = Duration::from_secs(if churners.is_empty() {
        60
    } else {
        args.churn_every_s
    });
    let mut k = 0usize;
    loop {
        let next = Instant::now() + every;
        if next + Duration::from_secs(5) > end {
            tokio::time::sleep_until(end.into()).await;
            samples.extend(sample(stable, start).await?);
            return Ok(samples);
        }
        tokio::time::sleep_until(next.into()).await;
        if sampled.elapsed() >= Duration::from_secs(60) {
            samples.extend(sample(stable, start).await?);
            sampled = Instant::now();
        }
        if churners.is_empty() {
            continue;
        }
        let i = k % churners.len();
        let c = &mut churners[i];
        if k.is_multiple_of(2) {
            let _ = c.child.kill();
        } else {
            let _ = admin::request(&c.dir, &AdminRequest::Leave).await;
        }
        let _ = tokio::task::block_in_place(|| c.child.wait());
        tokio::time::sleep(Duration::from_secs(5)).await;
        match spawn(bin, base, &c.name.clone(), &[]) {
            Ok(p) => *c = p,
            Err(e) => eprintln!("soak: restarting {}: {e:#}", c.name),
        }
        k += 1;
        record.lock().expect("record").churn_events += 1;
    }
}

/// The stable members' figures now.
async fn sample(stable: &[NodeProc], start: Instant) -> anyhow::Result<Vec<Sample>> {
    let minute = start.elapsed().as_secs_f64() / 60.0;
    let mut out = Vec::new();
    for n in stable {
        let s = status(&n.dir).await?;
        let (rss, fds) = proc_figures(n.child.id());
        out.push(Sample {
            node: n.name.clone(),
            minute,
            rss,
            fds,
            tasks: s.tasks,
            bytes: s.bytes_in + s.bytes_out,
        });
    }
    Ok(out)
}
