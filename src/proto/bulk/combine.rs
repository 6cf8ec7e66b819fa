//! Element types, reduction operations, and combining chunks of little-endian bytes.

use serde::{Deserialize, Serialize};

/// The element type of a vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Elem {
    F32,
    F64,
    I64,
    U64,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
        }
    }
}

/// How two values combine. Integer sums saturate (as the tree reduce does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    Sum,
    Min,
    Max,
}

/// A type a large collective carries: a number stored little-endian.
///
/// ```
/// use overlay::bulk::{Element, Elem};
/// assert_eq!(<f32 as Element>::ELEM, Elem::F32);
/// ```
pub trait Element: Copy + Send + Sync + 'static {
    /// Its [`Elem`].
    const ELEM: Elem;
    /// Appends the little-endian bytes of `values`.
    fn put(values: &[Self], out: &mut Vec<u8>);
    /// Reads `out.len()` values from little-endian `bytes`.
    fn get(bytes: &[u8], out: &mut [Self]);
    /// The little-endian bytes of `values`: borrowed where they are stored so (the
    /// built-in types on a little-endian machine), so a large collective holds no copy of
    /// the caller's vector.
    fn le_bytes(values: &[Self]) -> std::borrow::Cow<'_, [u8]> {
        let mut out = Vec::new();
        Self::put(values, &mut out);
        std::borrow::Cow::Owned(out)
    }
}

macro_rules! element {
    ($t:ty, $e:expr) => {
        impl Element for $t {
            const ELEM: Elem = $e;
            fn put(values: &[Self], out: &mut Vec<u8>) {
                out.reserve(values.len() * size_of::<$t>());
                for v in values {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            fn get(bytes: &[u8], out: &mut [Self]) {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(size_of::<$t>())) {
                    *o = <$t>::from_le_bytes(b.try_into().expect("chunks_exact"));
                }
            }
            #[cfg(target_endian = "little")]
            fn le_bytes(values: &[Self]) -> std::borrow::Cow<'_, [u8]> {
                std::borrow::Cow::Borrowed(bytemuck::cast_slice(values))
            }
        }
    };
}
element!(f32, Elem::F32);
element!(f64, Elem::F64);
element!(i64, Elem::I64);
element!(u64, Elem::U64);

/// Why two chunks cannot be combined.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("chunks of {0} and {1} bytes cannot be combined as {2:?}")]
pub struct CombineError(pub usize, pub usize, pub Elem);

/// `acc = acc op other`, element by element; both hold whole elements of `elem`.
pub fn combine(elem: Elem, op: ReduceOp, acc: &mut [u8], other: &[u8]) -> Result<(), CombineError> {
    if acc.len() != other.len() || !acc.len().is_multiple_of(elem.size()) {
        return Err(CombineError(acc.len(), other.len(), elem));
    }
    match elem {
        Elem::F32 => apply(acc, other, |a: f32, b| match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }),
        Elem::F64 => apply(acc, other, |a: f64, b| match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }),
        Elem::I64 => apply(acc, other, |a: i64, b| match op {
            ReduceOp::Sum => a.saturating_add(b),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }),
        Elem::U64 => apply(acc, other, |a: u64, b| match op {
            ReduceOp::Sum => a.saturating_add(b),
            ReduceOp::Min => a.min(b),
            ReduceOp::Max => a.max(b),
        }),
    }
    Ok(())
}

trait Le: Sized + Copy {
    const N: usize;
    fn read(b: &[u8]) -> Self;
    fn write(self, b: &mut [u8]);
}

macro_rules! le {
    ($t:ty) => {
        impl Le for $t {
            const N: usize = size_of::<$t>();
            fn read(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("exact"))
            }
            fn write(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_le_bytes());
            }
        }
    };
}
le!(f32);
le!(f64);
le!(i64);
le!(u64);

fn apply<T: Le>(acc: &mut [u8], other: &[u8], f: impl Fn(T, T) -> T) {
    for (a, b) in acc.chunks_exact_mut(T::N).zip(other.chunks_exact(T::N)) {
        f(T::read(a), T::read(b)).write(a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Element>(v: &[T]) -> Vec<u8> {
        let mut out = Vec::new();
        T::put(v, &mut out);
        out
    }

    #[test]
    fn sums_mins_and_maxes_of_every_type() {
        let mut a = bytes(&[1.5f32, -2.0]);
        combine(Elem::F32, ReduceOp::Sum, &mut a, &bytes(&[0.5f32, 4.0])).unwrap();
        let mut out = [0f32; 2];
        f32::get(&a, &mut out);
        assert_eq!(out, [2.0, 2.0]);

        let mut a = bytes(&[i64::MAX, 3]);
        combine(Elem::I64, ReduceOp::Sum, &mut a, &bytes(&[1i64, -5])).unwrap();
        let mut out = [0i64; 2];
        i64::get(&a, &mut out);
        assert_eq!(out, [i64::MAX, -2], "sums saturate");

        let mut a = bytes(&[3u64, 9]);
        combine(Elem::U64, ReduceOp::Min, &mut a, &bytes(&[5u64, 1])).unwrap();
        let mut out = [0u64; 2];
        u64::get(&a, &mut out);
        assert_eq!(out, [3, 1]);

        let mut a = bytes(&[3f64, 9.0]);
        combine(Elem::F64, ReduceOp::Max, &mut a, &bytes(&[5f64, 1.0])).unwrap();
        let mut out = [0f64; 2];
        f64::get(&a, &mut out);
        assert_eq!(out, [5.0, 9.0]);
    }

    #[test]
    fn mismatched_chunks_are_an_error_not_a_panic() {
        let mut a = vec![0u8; 8];
        assert!(combine(Elem::F32, ReduceOp::Sum, &mut a, &[0u8; 4]).is_err());
        let mut odd = vec![0u8; 6];
        assert!(combine(Elem::F32, ReduceOp::Sum, &mut odd, &[0u8; 6]).is_err());
    }
}
