//! The one finding type: what a rule saw in a measurement, in one line, and the numbers it
//! fired on. The advisor's recommendations (report.json) and `tune watch`'s findings (its
//! report) each embed one, flattened, so both JSON shapes stay as they were.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What was seen, or what to change, in one line.
    pub title: String,
    /// The numbers it fired on, from this run.
    pub evidence: String,
}

impl Finding {
    pub fn new(title: impl Into<String>, evidence: impl Into<String>) -> Finding {
        Finding {
            title: title.into(),
            evidence: evidence.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flattening keeps a container's JSON as it was before the shared type: the two fields
    /// sit beside the container's own, not in a nested object.
    #[test]
    fn a_flattened_finding_adds_no_nesting() {
        #[derive(Serialize, Deserialize)]
        struct Outer {
            rule: String,
            #[serde(flatten)]
            finding: Finding,
            hint: String,
        }
        let json = r#"{"rule":"r","title":"t","evidence":"e","hint":"h"}"#;
        let o: Outer = serde_json::from_str(json).unwrap();
        assert_eq!(o.finding, Finding::new("t", "e"));
        assert_eq!(serde_json::to_string(&o).unwrap(), json);
    }

    /// report.json's recommendations keep `title` and `evidence` beside `rule` and `kind`,
    /// as every committed report has them; a nested `finding` object would break readers.
    #[test]
    fn a_recommendation_serialises_its_finding_inline() {
        let r = crate::results::model::Recommendation {
            rule: "data_wait".into(),
            finding: Finding::new("t", "e"),
            ..Default::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["title"], "t");
        assert_eq!(v["evidence"], "e");
        assert!(v.get("finding").is_none(), "{v}");
        let back: crate::results::model::Recommendation = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}
