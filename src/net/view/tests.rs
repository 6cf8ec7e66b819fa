//! Unit tests of what the driver shows the API.
use super::{MemberInfo, MemberView};
use crate::proto::{Liveness, NodeId};

fn member(n: u64, state: Liveness) -> MemberInfo {
    MemberInfo {
        id: NodeId::from_seed(3, n),
        name: format!("n{n}"),
        addr: "127.0.0.1:7400".parse().expect("address"),
        state,
        rtt_ms: None,
        groups: Vec::new(),
    }
}

#[test]
fn the_view_holds_exactly_the_last_members_written_sorted_by_id() {
    let view = MemberView::default();
    let reader = view.clone();
    view.replace([member(1, Liveness::Alive), member(2, Liveness::Alive)]);
    assert_eq!(reader.snapshot().len(), 2);
    view.replace([member(2, Liveness::Dead), member(3, Liveness::Alive)]);
    let seen = reader.snapshot();
    let mut expected = vec![member(2, Liveness::Dead), member(3, Liveness::Alive)];
    expected.sort_by_key(|m| m.id);
    assert_eq!(seen, expected, "member 1 is gone, member 2 changed");
    view.upsert(member(3, Liveness::Suspect));
    let seen = reader.snapshot();
    assert_eq!(seen.len(), 2, "an update adds no entry");
    assert!(
        seen.iter()
            .any(|m| m.name == "n3" && m.state == Liveness::Suspect),
        "one entry updated in place"
    );
}
