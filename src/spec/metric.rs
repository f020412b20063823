//! Reading a throughput figure out of an external command's output.
//!
//! There is no regex crate in the build, so `metric_regex` supports one honest subset:
//! `PREFIX(NUMBER)`, where PREFIX is literal text (a backslash makes the next character
//! literal; other regex metacharacters are refused) and NUMBER is one of a few spellings
//! of "a decimal number" such as `[0-9.]+` or `\d+(?:\.\d+)?`. Anything after the group is
//! ignored. The spec parser rejects every other pattern with this explanation, so a sweep
//! never silently fails to find its metric.

/// Spellings of the capture group accepted as "a number".
const NUMBER_GROUPS: &[&str] = &[
    "[0-9.]+",
    "[0-9]+",
    "[\\d.]+",
    "\\d+",
    "\\d+\\.\\d+",
    "\\d+(?:\\.\\d+)?",
    "[0-9]+(?:\\.[0-9]+)?",
    "[0-9.eE+-]+",
    "[-+0-9.eE]+",
];

const META: &[char] = &[
    '.', '*', '+', '?', '[', ']', '{', '}', '|', '^', '$', '(', ')',
];

/// A parsed `metric_regex`: the literal text that comes right before the number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumberPattern {
    prefix: String,
}

impl NumberPattern {
    /// The error is a sentence for the user, placed at the spec's value by the caller.
    pub fn parse(re: &str) -> Result<NumberPattern, String> {
        let unsupported = |why: &str| {
            format!(
                "metric_regex '{re}' is not supported: {why}; only `literal prefix([0-9.]+)` is \
                 understood (e.g. 'samples/s: ([0-9.]+)'), or print JSON lines and use metric_json_key"
            )
        };
        // A leading `^` anchors nothing useful per line; accept and ignore it.
        let mut i = usize::from(re.starts_with('^'));
        let mut prefix = String::new();
        while let Some(c) = re[i..].chars().next() {
            match c {
                '\\' => {
                    let n = re[i + 1..]
                        .chars()
                        .next()
                        .ok_or_else(|| unsupported("trailing backslash"))?;
                    if n.is_alphanumeric() {
                        return Err(unsupported(&format!("escape \\{n} in the prefix")));
                    }
                    prefix.push(n);
                    i += 1 + n.len_utf8();
                }
                '(' => return NumberPattern::group(re, i, prefix).map_err(|w| unsupported(&w)),
                c if META.contains(&c) => {
                    return Err(unsupported(&format!("'{c}' before the group")))
                }
                c => {
                    prefix.push(c);
                    i += c.len_utf8();
                }
            }
        }
        Err(unsupported("no capture group"))
    }

    /// Checks the group starting at byte `at` is a known number spelling.
    fn group(re: &str, at: usize, prefix: String) -> Result<NumberPattern, String> {
        let rest = &re[at + 1..];
        let inner = NUMBER_GROUPS
            .iter()
            .find(|g| rest.starts_with(*g) && rest[g.len()..].starts_with(')'));
        match inner {
            Some(_) => Ok(NumberPattern { prefix }),
            None => Err(format!(
                "the capture group must be one of {}",
                NUMBER_GROUPS.join(", ")
            )),
        }
    }

    /// The number after the first occurrence of the prefix that is followed by one.
    pub fn extract(&self, line: &str) -> Option<f64> {
        let mut from = 0;
        while let Some(pos) = line[from..].find(&self.prefix) {
            let start = from + pos + self.prefix.len();
            if let Some(v) = leading_number(&line[start..]) {
                return Some(v);
            }
            if self.prefix.is_empty() {
                // An empty prefix matches everywhere: move on one character.
                from = start + line[start..].chars().next().map_or(1, char::len_utf8);
            } else {
                from = start;
            }
            if from >= line.len() {
                break;
            }
        }
        None
    }
}

/// The longest decimal number at the start of `s`.
fn leading_number(s: &str) -> Option<f64> {
    let end = s
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || ((c == 'e' || c == 'E') && i > 0)
                || ((c == '-' || c == '+') && (i == 0 || s[..i].ends_with(['e', 'E']))))
        })
        .map_or(s.len(), |(i, _)| i);
    // Trailing punctuation such as "12.5." should still give 12.5.
    let mut cand = &s[..end];
    while !cand.is_empty() {
        if let Ok(v) = cand.parse::<f64>() {
            return v.is_finite().then_some(v);
        }
        cand = &cand[..cand.len() - 1];
    }
    None
}

/// The value of `key` in a JSON object line, when it is a number.
pub fn json_value(line: &str, key: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    v.get(key)?.as_f64().filter(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_prefix_and_number() {
        let p = NumberPattern::parse("samples/s: ([0-9.]+)").unwrap();
        assert_eq!(p.extract("epoch 1 samples/s: 123.5 loss 2"), Some(123.5));
        assert_eq!(p.extract("nothing here"), None);
        let p = NumberPattern::parse(r"thr\(x\)=(\d+(?:\.\d+)?) it/s").unwrap();
        assert_eq!(p.extract("thr(x)=42.25 it/s"), Some(42.25));
        let p = NumberPattern::parse("^rate ([0-9.]+)").unwrap();
        assert_eq!(p.extract("rate rate 7."), Some(7.0));
    }

    #[test]
    fn refuses_real_regexes() {
        for re in [
            "a.*b ([0-9.]+)",
            "x (\\w+)",
            "\\s+([0-9.]+)",
            "no group",
            "(a|b)",
        ] {
            let e = NumberPattern::parse(re).unwrap_err();
            assert!(e.contains("not supported"), "{re}: {e}");
        }
    }

    #[test]
    fn json_key() {
        assert_eq!(
            json_value(r#"{"samples_per_s": 12.5}"#, "samples_per_s"),
            Some(12.5)
        );
        assert_eq!(json_value("plain text", "samples_per_s"), None);
        assert_eq!(json_value(r#"{"x": "1"}"#, "x"), None);
    }
}
