//! (in progress)
/// State of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberState { Alive, Left, Dead }
