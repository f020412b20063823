//! `tune watch` of a DDP job launched with torchrun (PyPI's torch, CPU, gloo): the hooks
//! run in every rank, the report shows each rank's step time and phase shares, and a rank
//! that does more work per step gets an imbalance finding. nn.DataParallel without a GPU
//! is named at run time as unmeasurable per device.

#[path = "pytorch/support.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn watch(py: &Path, out: &Path, args: &[&str]) -> (Output, Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("watch")
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(py)
        .args(args)
        .env("TUNE_CACHE_DIR", out.join("cache"))
        .output()
        .unwrap();
    let text = std::fs::read_to_string(out.join("report.json")).unwrap_or_default();
    (o, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ddp(py: &Path, out: &Path, slow_ms: &str) -> (Output, Value) {
    let script = support::script("ranks.py");
    watch(
        py,
        out,
        &[
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            script.to_str().unwrap(),
            "--steps",
            "20",
            "--slow-ms",
            slow_ms,
        ],
    )
}

fn imbalance(r: &Value) -> Vec<&Value> {
    r["findings"]
        .as_array()
        .map(|f| f.iter().filter(|x| x["kind"] == "imbalance").collect())
        .unwrap_or_default()
}

#[test]
fn torchrun_ranks_report_their_steps_and_a_slow_rank_is_found() {
    let _serial = support::serial();
    let Some(py) = support::python("torchrun_ranks_report_their_steps_and_a_slow_rank_is_found")
    else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (o, r) = ddp(&py, &d.path().join("slow"), "30");
    assert!(o.status.success(), "{}", show(&o));
    let ranks = r["python"]["ranks"]
        .as_array()
        .unwrap_or_else(|| panic!("{}\n{}", r["python"], show(&o)));
    let ids: Vec<u64> = ranks.iter().map(|x| x["rank"].as_u64().unwrap()).collect();
    assert_eq!(ids, [0, 1], "{r}");
    for k in ranks {
        assert!(k["steady_steps"].as_u64().unwrap() >= 15, "{k}");
        assert!(k["phase_share"]["backward"].as_f64().unwrap() > 0.0, "{k}");
    }
    // Rank 1's 30 ms sleep is its own work; rank 0 waits for it inside backward.
    let outside = |i: usize| ranks[i]["outside_backward_ms"].as_f64().unwrap();
    assert!(outside(1) > outside(0) + 20.0, "{ranks:?}");
    let f = imbalance(&r);
    assert_eq!(f.len(), 1, "{}\n{}", r["python"], show(&o));
    assert_eq!(f[0]["device"], "rank1", "{}", f[0]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("rank 1: "), "{stderr}");
    assert!(
        stderr.contains("rank 1 is slower than the other ranks"),
        "{stderr}"
    );

    // The same job with no slow rank: both ranks reported, no imbalance.
    let (o, r) = ddp(&py, &d.path().join("even"), "0");
    assert!(o.status.success(), "{}", show(&o));
    let p = &r["python"];
    assert_eq!(p["ranks"].as_array().map(Vec::len), Some(2), "{p}");
    assert!(imbalance(&r).is_empty(), "{:?}\n{p}", imbalance(&r));
}

#[test]
fn data_parallel_without_a_gpu_is_named_at_run_time() {
    let _serial = support::serial();
    let Some(py) = support::python("data_parallel_without_a_gpu_is_named_at_run_time") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let script = "import torch\n\
        m = torch.nn.DataParallel(torch.nn.Linear(4, 1))\n\
        opt = torch.optim.SGD(m.parameters(), lr=0.1)\n\
        for _ in range(8):\n    opt.zero_grad(); m(torch.randn(8, 4)).sum().backward(); opt.step()\n";
    let (o, r) = watch(&py, &d.path().join("dp"), &["-c", script]);
    assert!(o.status.success(), "{}", show(&o));
    let line = "per-device DP phases cannot be measured (no GPU)";
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(stderr.matches(line).count(), 1, "{stderr}");
    let notes = r["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n.as_str().unwrap().contains(line)),
        "{notes:?}"
    );
}
