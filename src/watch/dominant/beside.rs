//! Findings named beside a dominant computation, each a cost of its own inside it:
//! activation checkpointing's recompute, and models run without gradients (a teacher).

use super::{of_steps, ScriptKnobs};
use crate::advisor::fmt_pct;
use crate::bridge::StepSummary;
use crate::results::Finding;
use crate::watch::findings::{FindingKind, WatchFinding};

/// Checkpointed segments' forward, run again inside backward, takes at least this share of
/// the step: a cost the user chose for memory, worth naming where memory is to spare.
/// An MLP-Mixer checkpointing its 12 blocks spent 17.1% of its step there on a 2-core CPU,
/// and calling the blocks directly gave 1.19x and 1.23x by hand
/// (scripts/realistic/ckpt_mixer.py).
pub const RECOMPUTE_SHARE: f64 = 0.10;

/// The activation-checkpointing finding beside a dominant computation.
pub(super) fn recompute(s: &StepSummary, script: &ScriptKnobs) -> Option<WatchFinding> {
    let r = s.recompute_share.filter(|r| *r >= RECOMPUTE_SHARE)?;
    let backward = s.phase_share.get("backward").copied().unwrap_or(0.0);
    Some(WatchFinding {
        kind: FindingKind::Recompute,
        device: "python".into(),
        finding: Finding {
            title: "activation checkpointing runs the forward again in backward".into(),
            evidence: format!(
                "modules called inside backward (torch.utils.checkpoint's segments, recomputing \
                 what they did not keep) take {} of step time, of backward's {} {}",
                fmt_pct(r),
                fmt_pct(backward),
                of_steps(s)
            ),
        },
        // Not "at most": checkpoint's own bookkeeping comes off too. On small blocks
        // (tests/pytorch/checkpointed.py) a 17% recompute stood beside 1.47x from calling
        // them directly; on the Mixer's, 17.1% beside 1.19-1.23x.
        hint: format!(
            "if the activations fit in memory, {}: about {:.2}x from the recompute alone, \
             more where checkpoint's own bookkeeping is a cost too (small blocks), at the \
             memory the segments' activations take. sweep.toml's checkpoint = [\"off\"] \
             measures it (tune watch writes it beside this report): tune runs your \
             checkpoint calls as plain calls in that trial, and the report gives its peak \
             memory beside the baseline's",
            undo(script),
            1.0 / (1.0 - r)
        ),
    })
}

/// Models called with gradients off inside training take at least this share of the
/// step: forward-only work that no backward follows and no trained weight depends on, so
/// its own cures (reuse its outputs, a cheaper precision or a compiled copy of it alone).
/// A distillation's frozen teacher took 65% of its step by hand, and the watch said only
/// "forward 81%" (scripts/realistic/distill.py).
pub const NO_GRAD_SHARE: f64 = 0.25;

/// The forward-only finding beside a dominant computation.
pub(super) fn no_grad(s: &StepSummary) -> Option<WatchFinding> {
    let r = s.no_grad_share.filter(|r| *r >= NO_GRAD_SHARE)?;
    let forward = s.phase_share.get("forward").copied().unwrap_or(0.0);
    Some(WatchFinding {
        kind: FindingKind::NoGrad,
        device: "python".into(),
        finding: Finding {
            title: "a model that is not trained takes a large share of the step".into(),
            evidence: format!(
                "models called with gradients off inside the training step (a distillation's \
                 teacher, a target network, an EMA copy: forward only) take {} of step time, of \
                 the module calls' {} {}",
                fmt_pct(r),
                fmt_pct(forward),
                of_steps(s)
            ),
        },
        hint: format!(
            "at most {:.2}x from removing it: where its inputs repeat without random \
             augmentation, compute its outputs once and reuse them; else run it under \
             torch.inference_mode(), or compile or lower the precision of that model alone \
             (tune's compile knob compiles the trained model only; its amp knob runs every \
             model's forward under autocast, this one's included)",
            1.0 / (1.0 - r)
        ),
    })
}

/// How to stop checkpointing: the framework's setting where its loop runs the steps and
/// has one (the Hugging Face Trainer's `gradient_checkpointing`, which a fine-tune turns
/// on in its arguments), else calling the blocks directly.
fn undo(script: &ScriptKnobs) -> String {
    let framework = script.get(crate::knobs::FRAMEWORK).map(String::as_str);
    match crate::knobs::framework_setting(framework, "checkpoint", "off") {
        Some(line) => format!("turn checkpointing off where your Trainer turns it on, {line}"),
        None => "call the checkpointed blocks directly instead of through \
                 torch.utils.checkpoint.checkpoint (or checkpoint fewer of them)"
            .into(),
    }
}
