//! One shape for every `--json` output: ids in full (32 hex digits) with the short form in
//! a `<field>_short` field beside them, numbers rounded to 3 decimals
//! (no `0.30000000000000004`). The schema note is in the docs (docs/CLI.md).

use serde_json::{Map, Value};

/// Fields that hold what users published or sent (gathered values, a reduced value, the
/// text of a delivery): left untouched.
const USER_DATA: &[&str] = &["value", "values", "text"];

/// Prints `value` tidied, pretty.
pub fn print_pretty(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&tidy(serde_json::to_value(value)?))?
    );
    Ok(())
}

/// Tidies a JSON value as above.
pub fn tidy(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, v) in map {
                // What users published or sent is theirs: shown exactly as it is.
                if USER_DATA.contains(&key.as_str()) {
                    out.insert(key, v);
                    continue;
                }
                if let Some(short) = v.as_str().and_then(short_of) {
                    out.insert(format!("{key}_short"), Value::String(short));
                }
                out.insert(key, tidy(v));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(tidy).collect()),
        Value::Number(n) if n.is_f64() => {
            let x = n.as_f64().unwrap_or(0.0);
            let rounded = (x * 1000.0).round() / 1000.0;
            serde_json::Number::from_f64(rounded).map_or(Value::Null, Value::Number)
        }
        other => other,
    }
}

/// The short id of a full one, if `s` is one.
fn short_of(s: &str) -> Option<String> {
    let id = overlay::proto::NodeId::from_hex(s)?;
    (s.len() == 32).then(|| id.short())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_get_a_short_form_and_floats_rounded() {
        let id = overlay::proto::NodeId([7; 16]);
        let v = serde_json::json!({
            "id": id.to_hex(),
            "name": "Alive-ish",
            "rtt_ms": 0.1 + 0.2,
            "n": 3,
            "value": 0.1 + 0.2,
        });
        let t = tidy(v);
        assert_eq!(t["id_short"], id.short());
        assert_eq!(t["name"], "Alive-ish");
        assert_eq!(t["rtt_ms"].as_f64(), Some(0.3));
        assert_eq!(t["n"], 3);
        assert_eq!(
            t["value"].as_f64(),
            Some(0.1 + 0.2),
            "user data is left as it is"
        );
    }
}
