//! The checks beyond convergence: clusters discovered, a broadcast delivered, and a
//! partition and its heal.

use super::scripts::{run_script, wait_until};
use crate::common::Output;
use overlay::api::NodeStatus;
use overlay::proto::Liveness;
use overlay::testbed::{Plan, check_group};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// `Ok` if every status's level-1 groups, by member name, are the plan's clusters.
pub(super) fn clusters_verdict(plan: &Plan, ss: &[NodeStatus]) -> Result<(), String> {
    let mut want: Vec<BTreeSet<String>> = (0..plan.topology.clusters.len())
        .map(|c| {
            plan.nodes
                .iter()
                .filter(|n| n.cluster == c)
                .map(|n| n.name.clone())
                .collect()
        })
        .collect();
    want.sort();
    for s in ss {
        let mut got: Vec<BTreeSet<String>> = s
            .clusters
            .first()
            .map(|l| {
                l.groups
                    .iter()
                    .map(|g| g.names.iter().cloned().collect())
                    .collect()
            })
            .unwrap_or_default();
        got.sort();
        if got != want {
            return Err(format!("{} sees {got:?}", s.name));
        }
    }
    Ok(())
}

/// Checks `overlay-node broadcast --json` output: `{"op", "delivered": [ids], "missing":
/// [ids], "elapsed_ms"}`; every node id delivered, none missing.
pub(super) fn broadcast_verdict(out: &Output, ids: &[String]) -> Result<String, String> {
    if !out.status.success() {
        return Err(format!("exited with {}: {}", out.status, out.stderr.trim()));
    }
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
        .map_err(|e| format!("not JSON ({e}): {}", out.stdout))?;
    let list = |key: &str| -> Result<Vec<String>, String> {
        v.get(key)
            .and_then(|x| x.as_array())
            .ok_or_else(|| format!("no {key:?} list in {v}"))?
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{key}: not a string"))
            })
            .collect()
    };
    let delivered = list("delivered")?;
    let missing = list("missing")?;
    let not_delivered: Vec<&String> = ids.iter().filter(|id| !delivered.contains(id)).collect();
    if !not_delivered.is_empty() || !missing.is_empty() {
        return Err(format!(
            "not delivered to {not_delivered:?}, reported missing {missing:?}"
        ));
    }
    let op = v.get("op").and_then(|x| x.as_str()).ok_or("no \"op\"")?;
    let ms = v
        .get("elapsed_ms")
        .and_then(|x| x.as_f64())
        .ok_or("no \"elapsed_ms\"")?;
    Ok(format!(
        "broadcast {op}: delivered to all {} nodes in {ms} ms",
        ids.len()
    ))
}

/// Cuts `cluster` off from every other cluster; checks that, once each side has declared
/// the other dead, each side's trees span that side; keeps the cut for `hold` more; heals;
/// checks that every tree spans all nodes again. Returns what failed.
pub(super) fn partition_and_heal(
    plan: &Plan,
    all: &[String],
    cluster: &str,
    hold: Duration,
) -> Vec<String> {
    let mut failures = Vec::new();
    let inside: Vec<String> = plan
        .nodes
        .iter()
        .filter(|n| plan.topology.clusters[n.cluster].name == cluster)
        .map(|n| n.name.clone())
        .collect();
    let outside: Vec<String> = all
        .iter()
        .filter(|n| !inside.contains(n))
        .cloned()
        .collect();
    let out = run_script("partition", &[cluster, "all"], Duration::from_secs(30));
    eprint!("{}", out.stdout);
    let t_cut = Instant::now();
    let settled = wait_until(
        &format!(
            "partition of {cluster}: each side declares the other dead; the {} span their own \
             trees, the {} theirs",
            outside.len(),
            inside.len()
        ),
        all,
        Duration::from_secs(60),
        |ss| {
            for (group, other) in [(&outside, &inside), (&inside, &outside)] {
                let c = check_group(plan, ss, Some(group));
                if !c.spanning() {
                    return Err(format!("group of {}: {c:?}", group[0]));
                }
                // Settled: failure detection has run its course on both sides.
                for s in ss.iter().filter(|s| group.contains(&s.name)) {
                    if let Some(m) = s
                        .members
                        .iter()
                        .find(|m| other.contains(&m.name) && m.state != Liveness::Dead)
                    {
                        return Err(format!("{} lists {} as {:?}", s.name, m.name, m.state));
                    }
                }
            }
            Ok(())
        },
    );
    match settled {
        Ok(_) => eprintln!(
            "partition of {cluster}: both sides settled with trees of their own {} ms after the cut",
            t_cut.elapsed().as_millis()
        ),
        Err(e) => failures.push(e),
    }
    if !hold.is_zero() {
        eprintln!("keeping {cluster} cut off for {} s more", hold.as_secs());
        std::thread::sleep(hold);
    }
    let out = run_script("heal", &[cluster, "all"], Duration::from_secs(30));
    eprint!("{}", out.stdout);
    let healed = wait_until(
        &format!(
            "heal of {cluster} after a {} s partition: every tree spans all {} nodes again",
            t_cut.elapsed().as_secs(),
            all.len()
        ),
        all,
        Duration::from_secs(60),
        |ss| {
            let c = check_group(plan, ss, None);
            if c.spanning() {
                Ok(())
            } else {
                Err(format!("{c:?}"))
            }
        },
    );
    match healed {
        Ok((_, took)) => eprintln!(
            "heal of {cluster}: all {} trees span again {} ms after the heal",
            all.len(),
            took.as_millis()
        ),
        Err(e) => failures.push(e),
    }
    failures
}
