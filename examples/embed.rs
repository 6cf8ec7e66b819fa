//! Embedding the overlay in an application: start three nodes in one process on loopback,
//! watch membership and tree events, print each node's view, and leave.
//!
//!     cargo run --release --example embed

use futures::StreamExt;
use overlay::{Node, NodeEvent};
use std::time::Duration;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // The first node creates the overlay and its join token.
    let first = Node::builder().name("first").start().await?;
    println!(
        "overlay started; others join with: {}",
        first.join_command()
    );

    let mut events = Box::pin(first.events());
    let mut others = Vec::new();
    for name in ["second", "third"] {
        let node = Node::builder()
            .name(name)
            .join(first.local_addr())
            .token(first.token())
            .start()
            .await?;
        others.push(node);
    }

    // Events arrive as members come and trees change.
    let deadline = tokio::time::sleep(Duration::from_secs(3));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            Some(event) = events.next() => match event {
                NodeEvent::MemberUp(m) => println!("first sees {} ({}) join", m.name, m.id),
                NodeEvent::ParentChanged { root, parent } => {
                    let parent = parent.map_or("-".to_string(), |p| p.short());
                    println!("first: parent in {root}'s tree is now {parent}")
                }
                _ => {}
            },
            _ = &mut deadline => break,
        }
    }

    for node in std::iter::once(&first).chain(&others) {
        let status = node.status().await?;
        println!("\n{} ({}):", status.name, status.id);
        for t in &status.trees {
            let parent = t.parent.map_or("-".to_string(), |p| p.short());
            println!(
                "  tree of {}: parent {parent}, {} children, {:.2} ms to the root",
                t.root,
                t.children.len(),
                t.dist_ms
            );
        }
        for m in status.members.iter().filter(|m| m.id != node.id()) {
            let rtt = m.rtt_ms.map_or("-".to_string(), |r| format!("{r:.3}"));
            println!("  member {} rtt {rtt} ms", m.name);
        }
    }

    for node in others.iter().chain(std::iter::once(&first)) {
        node.leave().await;
    }
    Ok(())
}
