//! What a subtree's answers add up to: the nodes reached, the values gathered, the partial
//! reduction, with the rule that keeps anyone from being counted twice.

use super::reduce::Reducers;
use crate::proto::id::NodeId;
use crate::proto::message::{Reducer, UpPart};
use std::collections::{BTreeMap, BTreeSet};

/// Answers merged so far (at a relay for its subtree, at the root for the operation).
#[derive(Clone, Debug, Default)]
pub(crate) struct Acc {
    pub reached: BTreeSet<NodeId>,
    pub declined: BTreeSet<NodeId>,
    pub items: BTreeMap<NodeId, Vec<u8>>,
    pub contributors: BTreeSet<NodeId>,
    pub value: Option<Vec<u8>>,
    pub exits: BTreeSet<(NodeId, NodeId)>,
}

/// What merging one part did, for the root's bookkeeping.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Merged {
    /// Contributors of a partial result that was refused because some of them were already
    /// counted (the root asks those not counted yet again, directly).
    pub refused: Vec<NodeId>,
}

impl Acc {
    /// Whether `id` has answered (contributed or declined) a gather or reduce.
    pub fn answered(&self, id: &NodeId) -> bool {
        self.contributors.contains(id) || self.items.contains_key(id) || self.declined.contains(id)
    }

    /// Adds this node's own contribution to a gather (`reducer` is `None`) or reduce.
    pub fn add_own(
        &mut self,
        me: NodeId,
        value: Option<&Vec<u8>>,
        reducer: Option<&Reducer>,
        reducers: &Reducers,
    ) {
        let part = own_part(me, value, reducer, reducers);
        self.merge(part, reducer, reducers);
    }

    /// Merges one part. A reduce partial whose contributors overlap those already counted is
    /// refused whole (a value cannot be split); its contributors are returned so the root can
    /// ask them again. Gathered items are keyed by contributor, so a repeat changes nothing.
    pub fn merge(
        &mut self,
        part: UpPart,
        reducer: Option<&Reducer>,
        reducers: &Reducers,
    ) -> Merged {
        let mut out = Merged::default();
        self.reached.extend(part.reached);
        self.exits.extend(part.exits);
        for (id, v) in part.items {
            if !self.declined.contains(&id) {
                self.items.entry(id).or_insert(v);
            }
        }
        if let (Some(reducer), Some(value)) = (reducer, part.value) {
            if part
                .contributors
                .iter()
                .any(|c| self.contributors.contains(c))
            {
                out.refused = part
                    .contributors
                    .into_iter()
                    .filter(|c| !self.contributors.contains(c))
                    .collect();
            } else {
                let combined = match self.value.take() {
                    None => Ok(value),
                    Some(mine) => reducers
                        .combine(reducer, &mine, &value)
                        .map_err(|e| (e, mine)),
                };
                match combined {
                    Ok(v) => {
                        self.value = Some(v);
                        self.contributors.extend(part.contributors);
                    }
                    Err((e, mine)) => {
                        tracing::debug!(error = %e, "partial result refused");
                        self.value = Some(mine);
                        self.declined.extend(part.contributors);
                    }
                }
            }
        }
        for d in part.declined {
            if !self.contributors.contains(&d) && !self.items.contains_key(&d) {
                self.declined.insert(d);
            }
        }
        out
    }

    /// The answer to send up: everything merged so far.
    pub fn to_part(&self) -> UpPart {
        UpPart {
            reached: self.reached.iter().copied().collect(),
            declined: self.declined.iter().copied().collect(),
            items: self.items.iter().map(|(k, v)| (*k, v.clone())).collect(),
            contributors: self.contributors.iter().copied().collect(),
            value: self.value.clone(),
            exits: self.exits.iter().copied().collect(),
        }
    }
}

/// One node's own answer to a gather (`reducer` is `None`) or reduce.
pub(crate) fn own_part(
    me: NodeId,
    value: Option<&Vec<u8>>,
    reducer: Option<&Reducer>,
    reducers: &Reducers,
) -> UpPart {
    let mut part = UpPart {
        reached: vec![me],
        ..UpPart::default()
    };
    match (value, reducer) {
        (None, _) => part.declined.push(me),
        (Some(v), None) => part.items.push((me, v.clone())),
        (Some(v), Some(r)) => match reducers.validate(r, v) {
            Ok(()) => {
                part.contributors.push(me);
                part.value = Some(v.clone());
            }
            Err(e) => {
                tracing::warn!(error = %e, "own contribution cannot be reduced; declined");
                part.declined.push(me);
            }
        },
    }
    part
}

/// Splits a part into pieces whose items and value stay under `limit` bytes each (only a
/// gather's items can grow large; everything else goes with the first piece).
pub(crate) fn split_part(mut part: UpPart, limit: usize) -> Vec<UpPart> {
    let size: usize = part.items.iter().map(|(_, v)| v.len() + 24).sum();
    if size <= limit {
        return vec![part];
    }
    let items = std::mem::take(&mut part.items);
    let mut pieces = vec![part];
    let mut cur: Vec<(NodeId, Vec<u8>)> = Vec::new();
    let mut cur_size = 0;
    for (id, v) in items {
        if cur_size + v.len() + 24 > limit && !cur.is_empty() {
            pieces.push(UpPart {
                items: std::mem::take(&mut cur),
                ..UpPart::default()
            });
            cur_size = 0;
        }
        cur_size += v.len() + 24;
        cur.push((id, v));
    }
    pieces.push(UpPart {
        items: cur,
        ..UpPart::default()
    });
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::message::NumKind;

    fn id(n: u64) -> NodeId {
        NodeId::from_seed(3, n)
    }

    fn val(x: u64) -> Vec<u8> {
        postcard::to_allocvec(&vec![x]).unwrap()
    }

    #[test]
    fn overlapping_partials_are_refused_never_double_counted() {
        let r = Reducers::default();
        let sum = Reducer::Sum(NumKind::U64);
        let mut acc = Acc::default();
        acc.add_own(id(1), Some(&val(1)), Some(&sum), &r);
        let p = UpPart {
            reached: vec![id(2), id(3)],
            contributors: vec![id(2), id(3)],
            value: Some(val(5)),
            ..UpPart::default()
        };
        assert_eq!(acc.merge(p.clone(), Some(&sum), &r), Merged::default());
        // The same partial again, or one overlapping it: refused.
        let again = acc.merge(p, Some(&sum), &r);
        assert!(again.refused.is_empty());
        let overlap = UpPart {
            contributors: vec![id(3), id(4)],
            value: Some(val(100)),
            ..UpPart::default()
        };
        assert_eq!(acc.merge(overlap, Some(&sum), &r).refused, vec![id(4)]);
        assert_eq!(acc.value, Some(val(6)));
        assert_eq!(acc.contributors.len(), 3);
    }

    #[test]
    fn big_gathers_split_into_bounded_pieces() {
        let part = UpPart {
            reached: vec![id(1)],
            items: (0..10).map(|i| (id(i), vec![0u8; 100])).collect(),
            ..UpPart::default()
        };
        let pieces = split_part(part, 300);
        assert!(pieces.len() > 3);
        assert_eq!(pieces.iter().map(|p| p.items.len()).sum::<usize>(), 10);
        assert_eq!(pieces[0].reached, vec![id(1)]);
    }
}
