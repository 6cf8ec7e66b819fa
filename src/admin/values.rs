//! Values operators publish from the command line: JSON under a key on each node, gathered
//! as they are, or reduced with the JSON reducers every `overlay-node` registers
//! (`json-sum`, `json-min`, `json-max`: numbers, or arrays of numbers element by element).

use super::AdminResponse;
use crate::api::Node;
use crate::proto::{NodeId, Reducer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How JSON values are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JsonOp {
    /// The sum.
    Sum,
    /// The smallest.
    Min,
    /// The largest.
    Max,
}

impl JsonOp {
    /// The name the reducer is registered under.
    pub fn reducer_name(self) -> &'static str {
        match self {
            JsonOp::Sum => "json-sum",
            JsonOp::Min => "json-min",
            JsonOp::Max => "json-max",
        }
    }

    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            JsonOp::Sum => a + b,
            JsonOp::Min => a.min(b),
            JsonOp::Max => a.max(b),
        }
    }
}

/// Every member's value under a key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ValuesReport {
    /// Each contributor's value (JSON; a value that is not JSON as a string).
    pub values: Vec<(NodeId, Value)>,
    /// Members that did not answer.
    pub missing: Vec<NodeId>,
    /// Members that have no value under the key.
    pub declined: Vec<NodeId>,
    /// How long it took, ms.
    pub elapsed_ms: f64,
}

/// The combined value of every member's value under a key.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReducedReport {
    /// The result (`None`: nobody had a value).
    pub value: Option<Value>,
    /// Who is counted in it, each once.
    pub contributors: Vec<NodeId>,
    /// Members that did not answer.
    pub missing: Vec<NodeId>,
    /// Members without a value, or with one that could not be combined.
    pub declined: Vec<NodeId>,
    /// How long it took, ms.
    pub elapsed_ms: f64,
}

/// Registers the JSON reducers on `node` (what `overlay-node` does at start).
pub async fn register_json_reducers(node: &Node) -> Result<(), crate::api::NodeError> {
    for op in [JsonOp::Sum, JsonOp::Min, JsonOp::Max] {
        node.register_reducer(op.reducer_name(), move |a, b| combine(op, a, b))
            .await?;
    }
    Ok(())
}

/// Combines two JSON values: numbers, or arrays of numbers of the same length.
pub fn combine(op: JsonOp, a: &[u8], b: &[u8]) -> Result<Vec<u8>, String> {
    let parse = |bytes: &[u8]| -> Result<Value, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))
    };
    let num = |v: &Value| v.as_f64().ok_or_else(|| format!("{v} is not a number"));
    let out = match (parse(a)?, parse(b)?) {
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => Value::Array(
            x.iter()
                .zip(&y)
                .map(|(p, q)| Ok(number(op.apply(num(p)?, num(q)?))))
                .collect::<Result<_, String>>()?,
        ),
        (Value::Array(x), Value::Array(y)) => {
            return Err(format!("arrays of {} and {} numbers", x.len(), y.len()));
        }
        (x, y) => number(op.apply(num(&x)?, num(&y)?)),
    };
    serde_json::to_vec(&out).map_err(|e| e.to_string())
}

/// A JSON number; whole results stay integers (a sum of counts prints as `6`, not `6.0`).
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::from(x as i64)
    } else {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

pub(super) async fn publish(node: &Node, key: String, json: String) -> AdminResponse {
    if let Err(e) = serde_json::from_str::<Value>(&json) {
        return AdminResponse::Error(format!("the value is not JSON: {e}"));
    }
    match node.publish(&key, json.into_bytes()).await {
        Ok(()) => AdminResponse::Published,
        Err(e) => AdminResponse::Error(e.to_string()),
    }
}

pub(super) async fn gather(node: &Node, key: String) -> AdminResponse {
    match node.gather(&key, Vec::new()).await {
        Ok(g) => AdminResponse::Values(ValuesReport {
            values: g
                .items
                .into_iter()
                .map(|(id, bytes)| {
                    let value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                        Value::String(String::from_utf8_lossy(&bytes).into_owned())
                    });
                    (id, value)
                })
                .collect(),
            missing: g.missing,
            declined: g.declined,
            elapsed_ms: g.elapsed.as_secs_f64() * 1e3,
        }),
        Err(e) => AdminResponse::Error(e.to_string()),
    }
}

pub(super) async fn reduce(node: &Node, key: String, op: JsonOp) -> AdminResponse {
    let reducer = Reducer::Named(op.reducer_name().to_string());
    match node.reduce(&key, reducer).await {
        Ok(r) => AdminResponse::Reduced(ReducedReport {
            value: r
                .value
                .as_deref()
                .and_then(|v| serde_json::from_slice(v).ok()),
            contributors: r.contributors,
            missing: r.missing,
            declined: r.declined,
            elapsed_ms: r.elapsed.as_secs_f64() * 1e3,
        }),
        Err(e) => AdminResponse::Error(e.to_string()),
    }
}

/// Every member's [`crate::api::NodeInfo`], sorted by name (`gather info`).
pub(super) async fn gather_info(node: &Node) -> AdminResponse {
    match node.gather(crate::api::INFO_KEY, Vec::new()).await {
        Ok(g) => {
            let mut nodes: Vec<crate::api::NodeInfo> = g
                .items
                .iter()
                .filter_map(|(_, v)| serde_json::from_slice(v).ok())
                .collect();
            nodes.sort_by(|a, b| a.name.cmp(&b.name));
            let mut missing = g.missing;
            missing.extend(g.declined);
            AdminResponse::Info(super::InfoReport {
                nodes,
                missing,
                elapsed_ms: g.elapsed.as_secs_f64() * 1e3,
            })
        }
        Err(e) => AdminResponse::Error(e.to_string()),
    }
}

/// The members counted with a reduce, each contributing 1 (`reduce count`).
pub(super) async fn reduce_count(node: &Node) -> AdminResponse {
    use crate::proto::NumKind;
    match node
        .reduce(crate::api::COUNT_KEY, Reducer::Sum(NumKind::U64))
        .await
    {
        Ok(r) => {
            let count = r
                .values::<Vec<u64>>()
                .ok()
                .flatten()
                .and_then(|v| v.first().copied());
            AdminResponse::Count(super::CountReport {
                count: count.unwrap_or(0),
                contributors: r.contributors,
                missing: r.missing,
                elapsed_ms: r.elapsed.as_secs_f64() * 1e3,
            })
        }
        Err(e) => AdminResponse::Error(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(op: JsonOp, a: &str, b: &str) -> Result<String, String> {
        combine(op, a.as_bytes(), b.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn numbers_and_arrays_combine_and_anything_else_is_refused() {
        assert_eq!(c(JsonOp::Sum, "2", "4").unwrap(), "6");
        assert_eq!(c(JsonOp::Sum, "0.5", "0.25").unwrap(), "0.75");
        assert_eq!(c(JsonOp::Max, "[1,5]", "[3,2]").unwrap(), "[3,5]");
        assert_eq!(c(JsonOp::Min, "[1,5]", "[3,2]").unwrap(), "[1,2]");
        assert!(
            c(JsonOp::Sum, "[1]", "[1,2]")
                .unwrap_err()
                .contains("arrays")
        );
        assert!(
            c(JsonOp::Sum, "\"a\"", "1")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(c(JsonOp::Sum, "{", "1").unwrap_err().contains("not JSON"));
    }
}
