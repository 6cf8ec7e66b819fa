//! Combining partial results of a reduce: the built-in element-wise operations over numeric
//! vectors, and user-defined reducers registered by name.

use crate::proto::message::{NumKind, Reducer};
use std::collections::HashMap;
use std::sync::Arc;

/// A user-defined reducer: combines two encoded partial results into one. It must be
/// associative (partial results are combined in whatever order the tree delivers them) and
/// registered under the same name on every node.
pub type ReduceFn = Arc<dyn Fn(&[u8], &[u8]) -> Result<Vec<u8>, String> + Send + Sync>;

/// The reducers a node knows by name.
#[derive(Clone, Default)]
pub struct Reducers {
    named: HashMap<String, ReduceFn>,
}

impl std::fmt::Debug for Reducers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.named.keys()).finish()
    }
}

impl Reducers {
    /// Registers (or replaces) the reducer called `name`.
    pub fn register(&mut self, name: impl Into<String>, f: ReduceFn) {
        self.named.insert(name.into(), f);
    }

    /// Combines two partial results with `reducer`.
    pub fn combine(&self, reducer: &Reducer, a: &[u8], b: &[u8]) -> Result<Vec<u8>, String> {
        match reducer {
            Reducer::Sum(k) => elementwise(*k, a, b, Op::Sum),
            Reducer::Min(k) => elementwise(*k, a, b, Op::Min),
            Reducer::Max(k) => elementwise(*k, a, b, Op::Max),
            Reducer::Named(name) => match self.named.get(name) {
                Some(f) => f(a, b),
                None => Err(format!(
                    "no reducer named {name:?} is registered on this node"
                )),
            },
        }
    }

    /// Checks that `value` is acceptable input for `reducer` (built-ins: decodes it).
    pub fn validate(&self, reducer: &Reducer, value: &[u8]) -> Result<(), String> {
        match reducer {
            Reducer::Sum(k) | Reducer::Min(k) | Reducer::Max(k) => match k {
                NumKind::I64 => decode::<i64>(value).map(drop),
                NumKind::U64 => decode::<u64>(value).map(drop),
                NumKind::F64 => decode::<f64>(value).map(drop),
            },
            Reducer::Named(name) if !self.named.contains_key(name) => Err(format!(
                "no reducer named {name:?} is registered on this node"
            )),
            Reducer::Named(_) => Ok(()),
        }
    }
}

#[derive(Clone, Copy)]
enum Op {
    Sum,
    Min,
    Max,
}

fn decode<T: for<'de> serde::Deserialize<'de>>(bytes: &[u8]) -> Result<Vec<T>, String> {
    postcard::from_bytes::<Vec<T>>(bytes).map_err(|e| format!("not a numeric vector: {e}"))
}

fn encode<T: serde::Serialize>(v: &[T]) -> Result<Vec<u8>, String> {
    postcard::to_allocvec(v).map_err(|e| e.to_string())
}

fn zip<T: Copy>(a: Vec<T>, b: Vec<T>, f: impl Fn(T, T) -> T) -> Result<Vec<T>, String> {
    if a.len() != b.len() {
        return Err(format!(
            "vectors of different lengths ({} and {}) cannot be combined",
            a.len(),
            b.len()
        ));
    }
    Ok(a.into_iter().zip(b).map(|(x, y)| f(x, y)).collect())
}

fn elementwise(kind: NumKind, a: &[u8], b: &[u8], op: Op) -> Result<Vec<u8>, String> {
    match kind {
        NumKind::I64 => encode(&zip(
            decode::<i64>(a)?,
            decode::<i64>(b)?,
            |x, y| match op {
                Op::Sum => x.saturating_add(y),
                Op::Min => x.min(y),
                Op::Max => x.max(y),
            },
        )?),
        NumKind::U64 => encode(&zip(
            decode::<u64>(a)?,
            decode::<u64>(b)?,
            |x, y| match op {
                Op::Sum => x.saturating_add(y),
                Op::Min => x.min(y),
                Op::Max => x.max(y),
            },
        )?),
        NumKind::F64 => encode(&zip(
            decode::<f64>(a)?,
            decode::<f64>(b)?,
            |x, y| match op {
                Op::Sum => x + y,
                Op::Min => x.min(y),
                Op::Max => x.max(y),
            },
        )?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc<T: serde::Serialize>(v: &[T]) -> Vec<u8> {
        postcard::to_allocvec(v).unwrap()
    }

    #[test]
    fn builtins_combine_element_wise() {
        let r = Reducers::default();
        let s = r
            .combine(
                &Reducer::Sum(NumKind::U64),
                &enc(&[1u64, 2]),
                &enc(&[3u64, 4]),
            )
            .unwrap();
        assert_eq!(postcard::from_bytes::<Vec<u64>>(&s).unwrap(), vec![4, 6]);
        let m = r
            .combine(
                &Reducer::Min(NumKind::I64),
                &enc(&[-1i64, 9]),
                &enc(&[3i64, 4]),
            )
            .unwrap();
        assert_eq!(postcard::from_bytes::<Vec<i64>>(&m).unwrap(), vec![-1, 4]);
        let x = r
            .combine(
                &Reducer::Max(NumKind::F64),
                &enc(&[1.5f64]),
                &enc(&[0.5f64]),
            )
            .unwrap();
        assert_eq!(postcard::from_bytes::<Vec<f64>>(&x).unwrap(), vec![1.5]);
    }

    #[test]
    fn bad_values_and_unknown_names_are_errors() {
        let mut r = Reducers::default();
        let sum = Reducer::Sum(NumKind::U64);
        assert!(r.combine(&sum, &enc(&[1u64]), &enc(&[1u64, 2])).is_err());
        assert!(r.combine(&sum, &[0xff, 0xff], &enc(&[1u64])).is_err());
        assert!(r.validate(&sum, &[0xff]).is_err());
        let named = Reducer::Named("concat".into());
        assert!(r.combine(&named, b"a", b"b").is_err());
        r.register("concat", Arc::new(|a: &[u8], b: &[u8]| Ok([a, b].concat())));
        assert_eq!(r.combine(&named, b"a", b"b").unwrap(), b"ab");
    }
}
