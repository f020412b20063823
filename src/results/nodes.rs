//! Which node measured what, on a cluster sweep: the report's node notes. Repeats on
//! different hardware are not the same measurement: ratios against the baseline use only
//! the baseline's node type (`build::steady_on`), and these notes say where types mixed.

use std::collections::{BTreeMap, BTreeSet};

use super::model::TrialReport;
use super::record::NodeRun;

/// The node type of one run: its fingerprint's, or "unknown" when it never reported one.
pub fn node_type(n: &NodeRun) -> String {
    n.fingerprint
        .as_ref()
        .map_or_else(|| "unknown".into(), |f| f.node_type())
}

/// Remarks about the nodes of a sweep: node types mixed within the sweep, trials compared
/// with a baseline measured on another node type, and a node whose fingerprint differs
/// from every other node's. Empty for local sweeps.
pub fn notes(trials: &[TrialReport], baseline: Option<&str>) -> Vec<String> {
    let runs: Vec<(&TrialReport, &NodeRun)> = trials
        .iter()
        .flat_map(|t| t.nodes.iter().map(move |n| (t, n)))
        .filter(|(_, n)| n.fingerprint.is_some())
        .collect();
    if runs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    // Node name -> the fingerprints it reported.
    let mut by_node: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (_, n) in &runs {
        by_node
            .entry(n.node.as_str())
            .or_default()
            .insert(node_type(n));
    }
    let types: BTreeSet<&String> = by_node.values().flatten().collect();
    if types.len() > 1 {
        let listing: Vec<String> = types
            .iter()
            .map(|ty| {
                let nodes: Vec<&str> = by_node
                    .iter()
                    .filter(|(_, t)| t.contains(*ty))
                    .map(|(n, _)| *n)
                    .collect();
                format!("{ty} on {}", nodes.join(", "))
            })
            .collect();
        out.push(format!(
            "runs landed on {} node types ({}): compare configurations measured on the same node type",
            types.len(),
            listing.join("; ")
        ));
        // The node that stands alone: its fingerprint is shared with no other node, while
        // the others agree among themselves.
        if by_node.len() > 2 {
            for (node, t) in &by_node {
                let shared = by_node
                    .iter()
                    .any(|(other, ot)| other != node && !ot.is_disjoint(t));
                if !shared {
                    out.push(format!(
                        "node {node} differs from the other nodes: {}",
                        t.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    let types_of = |t: &TrialReport| -> BTreeSet<String> {
        t.nodes
            .iter()
            .filter(|n| n.fingerprint.is_some())
            .map(node_type)
            .collect()
    };
    if let Some(base) = baseline.and_then(|b| trials.iter().find(|t| t.id == b)) {
        let bt = types_of(base);
        for t in trials.iter().filter(|t| t.id != base.id) {
            let tt = types_of(t);
            if !bt.is_empty() && !tt.is_empty() && tt != bt {
                out.push(format!(
                    "'{}' ran on other node types than the baseline: its ratio compares different hardware",
                    t.label
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::record::NodeFingerprint;

    fn run(node: &str, gpu: &str) -> NodeRun {
        NodeRun {
            repeat: 0,
            job_id: "1".into(),
            node: node.into(),
            fingerprint: Some(NodeFingerprint {
                hostname: node.into(),
                cpu_model: "cpu".into(),
                cores: 8,
                gpus: vec![gpu.into()],
                driver: Some("550".into()),
                gpu_notice: None,
            }),
        }
    }

    fn trial(id: &str, nodes: Vec<NodeRun>) -> TrialReport {
        let mut t: TrialReport = serde_json::from_value(serde_json::json!({
            "id": id, "label": id, "knobs": crate::knobs::Knobs::default(), "status": "ok",
            "error": null, "round": 0, "steps": 1, "repeats": [], "samples_per_s": null,
            "ratio_vs_baseline": null, "peak_total_bytes": null, "phase_share": {},
            "accuracy": null, "final_loss": null, "noise_floor": 0.0, "not_applicable": {}
        }))
        .unwrap();
        t.nodes = nodes;
        t
    }

    #[test]
    fn one_node_type_says_nothing() {
        let t = [trial("b", vec![run("n1", "A100"), run("n2", "A100")])];
        assert!(notes(&t, Some("b")).is_empty());
    }

    #[test]
    fn mixed_types_the_odd_node_and_cross_type_ratios_are_flagged() {
        let t = [
            trial("b", vec![run("n1", "A100"), run("n2", "A100")]),
            trial("x", vec![run("n3", "H100"), run("n1", "A100")]),
            trial("y", vec![run("n2", "A100")]),
        ];
        let n = notes(&t, Some("b")).join("\n");
        assert!(n.contains("2 node types"), "{n}");
        assert!(n.contains("node n3 differs from the other nodes"), "{n}");
        assert!(
            n.contains("'x' ran on other node types than the baseline"),
            "{n}"
        );
        assert!(!n.contains("'y'"), "{n}");
    }
}
