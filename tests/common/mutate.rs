//! Mutating a JSON value for property tests of tune's readers: every leaf as a path,
//! and one mutation at a time (an extreme float, a hostile string appended, an array
//! element dropped or repeated, null, a long string).
#![allow(dead_code)] // each test file uses its own subset

use serde_json::Value;

pub const EXTREMES: &[f64] = &[
    f64::MAX,
    -f64::MAX,
    f64::MIN_POSITIVE,
    5e-324,
    -0.0,
    0.0,
    1e308,
    -1.0,
    1e15,
    9007199254740993.0,
];

pub const HOSTILE: &[&str] = &[
    "",
    "<script>alert(1)</script>",
    "| a | b |\n# heading",
    "\u{1b}[2J\u{0}\u{202e}",
    "`code` *em* [link](x)",
];

/// Every leaf of the JSON tree as a path of object keys and array indices.
pub fn leaves(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                path.push(Value::String(k.clone()));
                leaves(c, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            out.push(path.clone());
            for (i, c) in a.iter().enumerate() {
                path.push(Value::from(i));
                leaves(c, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

pub fn at<'a>(v: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, seg| match seg {
        Value::String(k) => v.get_mut(k.as_str()),
        Value::Number(i) => v.get_mut(i.as_u64()? as usize),
        _ => None,
    })
}

pub fn mutate(v: &mut Value, paths: &[Vec<Value>], (which, kind, pick): (usize, u8, usize)) {
    let Some(target) = at(v, &paths[which % paths.len()]) else {
        return;
    };
    *target = match (kind % 6, &*target) {
        (0 | 1, Value::Number(_)) => {
            let x = EXTREMES[pick % EXTREMES.len()];
            serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
        }
        (0 | 1, Value::String(s)) => Value::String(format!("{s}{}", HOSTILE[pick % HOSTILE.len()])),
        (2, Value::Array(a)) if !a.is_empty() => {
            let mut a = a.clone();
            a.remove(pick % a.len());
            Value::Array(a)
        }
        (3, Value::Array(a)) if !a.is_empty() => {
            let mut a = a.clone();
            a.push(a[pick % a.len()].clone());
            Value::Array(a)
        }
        (4, _) => Value::Null,
        (5, _) => Value::String("x".repeat(pick % 5000)),
        _ => return,
    };
}
