use super::*;

#[test]
fn threads_beyond_the_free_cores_are_oversubscribed_and_fewer_proposed() {
    // 2 cores, one competing process: the default 2 threads have one core.
    let t = Threads::of(2, 1, 2, 50.0);
    assert!(t.oversubscribed && t.fit == 1, "{t:?}");
    assert_eq!(t.sweep_line().as_deref(), Some("num_threads = [2, 1]"));
    let f = contention(Some("others used 50%".into()), Some(t)).unwrap();
    assert!(f.finding.title.contains("oversubscribe"), "{f:?}");
    assert!(f.hint.contains("torch.set_num_threads(1)"), "{f:?}");
    assert!(f.finding.evidence.contains("2 PyTorch threads"), "{f:?}");
    // More threads than the machine has, with nothing else running.
    let t = Threads::of(8, 1, 4, 2.0);
    assert_eq!(t.sweep_line().as_deref(), Some("num_threads = [8, 4, 1]"));
    // A quiet 2-core machine's noise leaves 1.97 cores: 2 threads fit, not 1.
    let t = Threads::of(8, 1, 2, 1.5);
    assert_eq!(t.fit, 2, "{t:?}");
    assert_eq!(t.sweep_line().as_deref(), Some("num_threads = [8, 2, 1]"));
    // Half a core taken: 1.5 free cores fit one thread, as 2 are oversubscribed there.
    let t = Threads::of(2, 1, 2, 25.0);
    assert!(t.oversubscribed && t.fit == 1, "{t:?}");
}

#[test]
fn a_quiet_machine_or_a_job_that_fits_is_not_oversubscribed() {
    // A quiet machine's own few percent do not make 2 threads on 2 cores too many.
    let t = Threads::of(2, 1, 2, 5.0);
    assert!(!t.oversubscribed, "{t:?}");
    assert!(contention(None, Some(t)).is_none());
    // One thread under load: contention is said, no thread count proposed.
    let t = Threads::of(1, 1, 2, 50.0);
    assert!(!t.oversubscribed && t.sweep_line().is_none(), "{t:?}");
    let f = contention(Some("others used 50%".into()), Some(t)).unwrap();
    assert_eq!(f.finding.title, "other processes competed for the CPU");
}
pub(super) fn found(kind: FindingKind) -> WatchFinding {
    WatchFinding {
        kind,
        device: "python".into(),
        finding: Finding {
            title: String::new(),
            evidence: String::new(),
        },
        hint: String::new(),
    }
}

pub(super) fn script(pairs: &[(&str, &str)]) -> ScriptKnobs {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_data_bound_job_whose_threads_take_every_core_crosses_workers_with_fewer_threads() {
    let two = script(&[("num_threads", "2")]);
    assert_eq!(
        loader_threads_line(&two, 2, Some(0.57)).as_deref(),
        Some("num_threads = [2, 1]")
    );
    // A small wait, a thread to spare, or one core: nothing to cross.
    assert!(loader_threads_line(&two, 2, Some(0.10)).is_none());
    assert!(loader_threads_line(&two, 4, Some(0.57)).is_none());
    assert!(loader_threads_line(&script(&[("num_threads", "1")]), 1, Some(0.57)).is_none());
    let spec = sweep_spec(
        &["python".into(), "train.py".into()],
        &["num_workers = [0, 1]".into(), "num_threads = [2, 1]".into()],
        None,
        true,
    )
    .unwrap();
    assert!(spec.contains("strategy = \"grid\""), "{spec}");
    let parsed = crate::spec::Spec::parse(&spec, "sweep.toml").unwrap();
    assert_eq!(parsed.knobs.len(), 2);
}

#[test]
fn the_sweep_starts_at_the_scripts_own_values_and_skips_what_cannot_pay() {
    let opt = [found(FindingKind::Optimizer)];
    assert_eq!(
        sweep_knobs(&opt, 2, &script(&[("optim_impl", "default")]), None),
        ["optim_impl = [\"default\", \"foreach\", \"fused\"]"]
    );
    assert_eq!(
        sweep_knobs(&opt, 2, &script(&[("optim_impl", "foreach")]), None),
        ["optim_impl = [\"foreach\", \"default\", \"fused\"]"]
    );
    // Fused already: nothing left for the knob to try, and the hint says so.
    assert!(sweep_knobs(&opt, 2, &script(&[("optim_impl", "fused")]), None).is_empty());
    assert!(optimizer_hint(Some("fused"), None, &[], 5.0).contains("fused update already"));
    let both = ["foreach", "fused"];
    assert!(optimizer_hint(Some("default"), None, &both, 5.0).contains("optim_impl"));
    // The script's class where the hooks read one, never AdamW for an SGD (#31).
    let sgd = optimizer_hint(Some("forloop"), Some("torch.optim.SGD"), &both, 5.0);
    assert!(
        sgd.contains("(torch.optim.SGD(params, ..., fused=True), or"),
        "{sgd}"
    );
    let any = optimizer_hint(Some("default"), None, &both, 5.0);
    assert!(
        any.contains("your optimizer's constructor with fused=True"),
        "{any}"
    );
    assert!(!any.contains("AdamW"), "{any}");
    // Adadelta has a foreach switch and no fused one: only foreach is offered.
    let adadelta = script(&[
        ("optim_impl", "default"),
        ("optimizer", "torch.optim.Adadelta"),
        ("optim_impls", "foreach"),
    ]);
    assert_eq!(
        sweep_knobs(&opt, 2, &adadelta, None),
        ["optim_impl = [\"default\", \"foreach\"]"]
    );
    let f = findings(&summary(0.1, 0.2, 0.7), &adadelta);
    assert!(
        f[0].hint
            .contains("torch.optim.Adadelta(params, ..., foreach=True)")
            && !f[0].hint.contains("fused=True"),
        "{}",
        f[0].hint
    );
    // A class with neither switch: nothing to sweep, and no second finding.
    let neither = script(&[("optimizer", "torch.optim.LBFGS"), ("optim_impls", "")]);
    assert!(sweep_knobs(&opt, 2, &neither, None).is_empty());
    let f = findings(&summary(0.1, 0.2, 0.7), &neither);
    assert!(
        f[0].hint.contains("LBFGS has no faster implementation"),
        "{}",
        f[0].hint
    );
    assert_eq!(findings(&summary(0.31, 0.43, 0.24), &neither).len(), 1);
    let data = [found(FindingKind::DataWait)];
    // The script's 2 workers first, so fewer are measured against it too.
    assert_eq!(
        sweep_knobs(&data, 2, &script(&[("num_workers", "2")]), Some(0.07)),
        ["num_workers = [2, 0, 1]"]
    );
    // No workers and a 5.5% wait: at most 1.06x, no worker trials.
    assert!(sweep_knobs(&data, 2, &script(&[("num_workers", "0")]), Some(0.055)).is_empty());
    assert_eq!(
        sweep_knobs(&data, 2, &script(&[]), Some(0.5)),
        ["num_workers = [0, 1, 2]"]
    );
}

pub(super) fn summary(forward: f64, backward: f64, optimizer: f64) -> StepSummary {
    serde_json::from_value(serde_json::json!({
        "torch": "2.x", "steps": 200, "steady_steps": 180, "median_step_ms": 10.1,
        "samples_per_s": 3181.0,
        "phase_share": {"forward": forward, "backward": backward, "optimizer": optimizer},
    }))
    .unwrap()
}

/// A deep MLP's SGD ran its per-parameter loop at 24% of a compute-bound step, and
/// fused=True gave 1.21x by hand; only bf16 was offered.
#[test]
fn a_large_optimizer_share_beside_the_computation_is_named_and_swept_too() {
    let s = summary(0.31, 0.43, 0.24);
    let forloop = script(&[("optim_impl", "forloop")]);
    let f = findings(&s, &forloop);
    let kinds: Vec<FindingKind> = f.iter().map(|x| x.kind).collect();
    assert_eq!(kinds, [FindingKind::Compute, FindingKind::Optimizer]);
    assert!(
        f[1].finding.evidence.contains("24") && f[1].finding.evidence.contains("foreach=False"),
        "{}",
        f[1].finding.evidence
    );
    assert_eq!(
        sweep_knobs(&f, 2, &forloop, None),
        [
            "amp = [\"off\", \"bf16\"]",
            "optim_impl = [\"forloop\", \"default\", \"foreach\", \"fused\"]"
        ]
    );
    // A small update, or a fused one already: the computation alone.
    assert_eq!(findings(&summary(0.4, 0.5, 0.1), &forloop).len(), 1);
    let fused = script(&[("optim_impl", "fused")]);
    assert_eq!(findings(&s, &fused).len(), 1);
}

/// A compute-bound script that runs under its own bf16 autocast was told to try
/// bf16, and its sweep.toml measured bf16 against itself.
#[test]
fn a_script_under_its_own_autocast_is_not_offered_bf16() {
    let compute = [found(FindingKind::Compute)];
    assert_eq!(
        sweep_knobs(&compute, 2, &script(&[("amp", "off")]), None),
        ["amp = [\"off\", \"bf16\"]"]
    );
    // Under its own autocast, torch.compile is what is left; unless it compiles too.
    assert_eq!(
        sweep_knobs(&compute, 2, &script(&[("amp", "bf16")]), None),
        ["compile = [\"off\", \"default\"]"]
    );
    let both = script(&[("amp", "bf16"), ("compile", "default")]);
    assert!(sweep_knobs(&compute, 2, &both, None).is_empty());
    let own = compute_hint(Some("bf16"), None, None);
    assert!(
        own.contains("under autocast (bf16) already")
            && !own.starts_with("hypothesis")
            && own.contains("compile = [\"off\", \"default\"]"),
        "{own}"
    );
    let compiled = compute_hint(Some("bf16"), Some("default"), None);
    assert!(
        compiled.contains("compiles its model already") && !compiled.contains("compile = ["),
        "{compiled}"
    );
    let off = compute_hint(Some("off"), None, None);
    assert!(
        off.starts_with("hypothesis") && off.contains("Untested"),
        "{off}"
    );
    assert!(off.contains("with torch.autocast(device"), "{off}");
    // A Lightning script is told its Trainer's setting.
    let lightning = compute_hint(Some("off"), None, Some("lightning"));
    assert!(
        lightning.contains("L.Trainer(..., precision=\"bf16-mixed\") (amp = bf16)"),
        "{lightning}"
    );
}

/// A float64 model (time_sequence_prediction's `.double()`) was offered bf16, which
/// autocast cannot apply to it: its finding names the dtype, and no amp is swept.
#[test]
fn a_float64_model_is_not_offered_amp() {
    let s = summary(0.01, 0.96, 0.03);
    let f64_script = script(&[("amp", "off"), (PARAM_DTYPE, "float64")]);
    let f = findings(&s, &f64_script);
    assert_eq!(f[0].kind, FindingKind::Compute);
    assert!(
        f[0].hint.contains("float64") && !f[0].hint.contains("amp = bf16"),
        "{}",
        f[0].hint
    );
    assert!(sweep_knobs(&f, 2, &f64_script, None).is_empty());
    let f32_script = script(&[("amp", "off"), (PARAM_DTYPE, "float32")]);
    assert_eq!(
        sweep_knobs(&findings(&s, &f32_script), 2, &f32_script, None),
        ["amp = [\"off\", \"bf16\"]"]
    );
}

/// On a CPU without native bf16 (an Ice Lake Xeon ran bf16 at 0.32-0.61x of float32) a
/// compute-bound CPU job is not offered amp: fused kernels are the hypothesis swept, and
/// none where the script compiles already.
#[test]
fn a_cpu_without_native_bf16_is_offered_compile_not_amp() {
    let s = summary(0.01, 0.96, 0.03);
    let slow = script(&[("amp", "off"), (NO_NATIVE_BF16, "true")]);
    let f = findings(&s, &slow);
    assert_eq!(f[0].kind, FindingKind::Compute);
    assert!(
        f[0].hint.contains("without bf16 arithmetic") && !f[0].hint.contains("amp = bf16"),
        "{}",
        f[0].hint
    );
    assert_eq!(
        sweep_knobs(&f, 2, &slow, None),
        ["compile = [\"off\", \"default\"]"]
    );
    let compiled = script(&[
        ("amp", "off"),
        ("compile", "default"),
        (NO_NATIVE_BF16, "true"),
    ]);
    let f = findings(&s, &compiled);
    assert!(
        f[0].hint.contains("compiles its model already"),
        "{}",
        f[0].hint
    );
    assert!(sweep_knobs(&f, 2, &compiled, None).is_empty());
    // The same job where the CPU has it: bf16 is the hypothesis.
    let fast = script(&[("amp", "off")]);
    assert_eq!(
        sweep_knobs(&findings(&s, &fast), 2, &fast, None),
        ["amp = [\"off\", \"bf16\"]"]
    );
}

/// A script's own bf16 autocast on a CPU without bf16 arithmetic is offered float32:
/// by hand an MLP ran 3.79x faster without its autocast on such a CPU, and the watch had
/// said "no lower precision left to try". On a CPU with it, compile is what is left.
#[test]
fn a_scripts_own_bf16_on_a_cpu_without_it_is_offered_float32() {
    let s = summary(0.01, 0.96, 0.03);
    let own = script(&[("amp", "bf16"), (NO_NATIVE_BF16, "true")]);
    let f = findings(&s, &own);
    assert_eq!(f[0].kind, FindingKind::Compute);
    assert!(
        f[0].hint.contains("float32 may be faster")
            && f[0].hint.contains("amp = [\"bf16\", \"off\"]"),
        "{}",
        f[0].hint
    );
    assert_eq!(
        sweep_knobs(&f, 2, &own, None),
        [
            "amp = [\"bf16\", \"off\"]",
            "compile = [\"off\", \"default\"]"
        ]
    );
    let compiled = script(&[
        ("amp", "bf16"),
        ("compile", "default"),
        (NO_NATIVE_BF16, "true"),
    ]);
    assert_eq!(
        sweep_knobs(&findings(&s, &compiled), 2, &compiled, None),
        ["amp = [\"bf16\", \"off\"]"]
    );
    let native = script(&[("amp", "bf16")]);
    let f = findings(&s, &native);
    assert!(
        f[0].hint.contains("no lower precision left"),
        "{}",
        f[0].hint
    );
    assert_eq!(
        sweep_knobs(&f, 2, &native, None),
        ["compile = [\"off\", \"default\"]"]
    );
}

/// Recompute inside backward is named beside the computation from RECOMPUTE_SHARE on, and
/// adds the trial that runs the script's checkpoint calls plainly to the sweep.
#[test]
fn a_large_recompute_is_named_and_a_small_one_is_not() {
    let with = |r: f64| {
        let mut s = summary(0.3, 0.65, 0.05);
        s.recompute_share = Some(r);
        findings(&s, &script(&[]))
    };
    let f = with(0.2);
    let kinds: Vec<FindingKind> = f.iter().map(|x| x.kind).collect();
    assert_eq!(kinds, [FindingKind::Compute, FindingKind::Recompute]);
    assert!(f[1].hint.contains("about 1.25x"), "{}", f[1].hint);
    assert_eq!(
        sweep_knobs(&f, 2, &script(&[]), None),
        ["amp = [\"off\", \"bf16\"]", "checkpoint = [\"off\"]"]
    );
    assert_eq!(with(RECOMPUTE_SHARE * 0.9).len(), 1);
    assert!(
        f[1].hint.contains("call the checkpointed blocks directly"),
        "{}",
        f[1].hint
    );
    // A Hugging Face Trainer turns checkpointing on in its arguments: it is told there.
    let mut s = summary(0.3, 0.65, 0.05);
    s.recompute_share = Some(0.2);
    let hf = findings(&s, &script(&[(crate::knobs::FRAMEWORK, "transformers")]));
    assert!(
        hf[1]
            .hint
            .contains("TrainingArguments(..., gradient_checkpointing=False)"),
        "{}",
        hf[1].hint
    );
}

/// A frozen model's forward (a teacher's) is named beside the computation from
/// NO_GRAD_SHARE on, with what removing it could give; it adds no sweep line (no knob of
/// tune's acts on that model alone).
#[test]
fn a_large_forward_without_gradients_is_named_and_a_small_one_is_not() {
    let with = |r: f64| {
        let mut s = summary(0.8, 0.18, 0.02);
        s.no_grad_share = Some(r);
        findings(&s, &script(&[]))
    };
    let f = with(0.6);
    let kinds: Vec<FindingKind> = f.iter().map(|x| x.kind).collect();
    assert_eq!(kinds, [FindingKind::Compute, FindingKind::NoGrad]);
    assert!(
        f[1].finding.evidence.contains("60.0%"),
        "{}",
        f[1].finding.evidence
    );
    assert!(f[1].hint.contains("at most 2.50x"), "{}", f[1].hint);
    assert_eq!(
        sweep_knobs(&f, 2, &script(&[]), None),
        ["amp = [\"off\", \"bf16\"]"]
    );
    assert_eq!(with(NO_GRAD_SHARE * 0.9).len(), 1);
}

/// A compute-bound step on fewer threads than the free cores gets the finding and the
/// sweep line from the script's count to the count that fits; a step bound elsewhere, a
/// script using every free core, and an oversubscribed one do not.
#[test]
fn idle_cores_under_a_compute_bound_step_are_named_and_swept() {
    let (f, line) = idle_cores(Some(Threads::of(1, 1, 2, 1.0)), true).unwrap();
    assert_eq!(f.kind, FindingKind::IdleCores);
    assert_eq!(line, "num_threads = [1, 2]");
    assert!(f.hint.contains("torch.set_num_threads(2)"), "{}", f.hint);
    assert_eq!(
        idle_cores(Some(Threads::of(1, 1, 4, 0.0)), true).unwrap().1,
        "num_threads = [1, 4]"
    );
    assert!(idle_cores(Some(Threads::of(1, 1, 2, 1.0)), false).is_none());
    assert!(idle_cores(Some(Threads::of(2, 1, 2, 1.0)), true).is_none());
    // Another process takes a core: 1 thread on the one left is not idle capacity.
    assert!(idle_cores(Some(Threads::of(1, 1, 2, 50.0)), true).is_none());
    assert!(idle_cores(Some(Threads::of(8, 1, 2, 1.0)), true).is_none());
    assert!(idle_cores(None, true).is_none());
    // Lightning's DDP: 2 ranks of 1 thread on 2 cores leave none idle; on 8, 3 more
    // threads each fit.
    assert!(idle_cores(Some(Threads::of(1, 2, 2, 1.0)), true).is_none());
    let (f, line) = idle_cores(Some(Threads::of(1, 2, 8, 0.0)), true).unwrap();
    assert_eq!(line, "num_threads = [1, 4]");
    assert!(
        f.finding
            .title
            .contains("1 PyTorch thread in each of 2 processes with 6 more cores"),
        "{}",
        f.finding.title
    );
    // 2 ranks of 2 threads on 2 cores oversubscribe them: 1 each fits.
    let t = Threads::of(2, 2, 2, 1.0);
    assert!(t.oversubscribed && t.fit == 1, "{t:?}");
    assert_eq!(t.sweep_line().as_deref(), Some("num_threads = [2, 1]"));
}
