//! The change as the script's own training framework spells it. A PyTorch Lightning
//! script whose sweep measured bf16 1.54x was told `with torch.autocast("cpu",
//! dtype=torch.bfloat16): loss = model(x)`, around a loss its Trainer computes; its line is
//! `L.Trainer(..., precision="bf16-mixed")`, and a Hugging Face Trainer's is
//! `TrainingArguments(..., bf16=True)`. The hooks name the framework whose loop ran the
//! first optimizer step (`script_knobs.framework`, `tune_optim.py`); a knob the framework
//! has no setting for keeps PyTorch's line (a DataLoader's `num_workers` in a
//! LightningDataModule is the DataLoader's).

use super::torch::{name_optimizer, torch_lines};

/// The `script_knobs` key of the framework whose training loop runs the script's steps:
/// "lightning", "transformers" (the Hugging Face Trainer), "fabric", "accelerate".
pub const FRAMEWORK: &str = "framework";

/// How a framework takes a knob's value.
enum Spelled {
    /// Arguments of the framework's one settings call.
    Arg(String),
    /// An argument with what else must change beside it, said in a comment at the end of
    /// the line (a comment inside the call would swallow the arguments after it).
    ArgNote(String, &'static str),
    /// A statement of its own.
    Line(&'static str),
}

/// Python's spelling of a switch's value.
fn py(value: &str) -> &str {
    match value {
        "true" => "True",
        "false" => "False",
        v => v,
    }
}

/// Lightning's Trainer and Fabric take the same precision names.
fn precision(value: &str) -> Option<Spelled> {
    let p = match value {
        "off" => "32-true",
        "bf16" => "bf16-mixed",
        "fp16" => "16-mixed",
        "tf32" => {
            return Some(Spelled::Line(
                "torch.set_float32_matmul_precision(\"high\")",
            ))
        }
        _ => return None,
    };
    Some(Spelled::Arg(format!("precision=\"{p}\"")))
}

fn lightning(knob: &str, value: &str) -> Option<Spelled> {
    let arg = |a: String| Some(Spelled::Arg(a));
    match (knob, value) {
        ("amp", v) => precision(v),
        ("autotune", v) => arg(format!("benchmark={}", py(v))),
        ("grad_accum", v) => arg(format!("accumulate_grad_batches={v}")),
        ("parallel", "ddp") => arg("strategy=\"ddp\"".into()),
        ("devices", v) => arg(format!("devices={v}")),
        ("sync_bn", v) => arg(format!("sync_batchnorm={}", py(v))),
        ("zero_grad", "none") => Some(Spelled::Line(
            "def optimizer_zero_grad(self, epoch, batch_idx, optimizer): \
             optimizer.zero_grad(set_to_none=True)  # in your LightningModule",
        )),
        // Lightning's move to the device keeps a module's memory format, and a
        // channels_last weight makes the convolution choose NHWC for its input too.
        ("channels_last", "true") => Some(Spelled::Line(
            "model = model.to(memory_format=torch.channels_last)  \
             # your LightningModule, before trainer.fit(model)",
        )),
        ("zero_grad", "memset") => Some(Spelled::Line(
            "def optimizer_zero_grad(self, epoch, batch_idx, optimizer): \
             optimizer.zero_grad(set_to_none=False)  # in your LightningModule",
        )),
        _ => None,
    }
}

fn fabric(knob: &str, value: &str) -> Option<Spelled> {
    match knob {
        "amp" => precision(value),
        _ => None,
    }
}

/// The Hugging Face Trainer's `TrainingArguments`. Its `optim` names only the Trainer's
/// own AdamW; an optimizer the script passes in keeps PyTorch's line.
fn transformers(knob: &str, value: &str, optimizer: Option<&str>) -> Option<Spelled> {
    let arg = |a: String| Some(Spelled::Arg(a));
    let adamw = optimizer == Some("torch.optim.AdamW");
    match (knob, value) {
        ("amp", "off") => arg("bf16=False, fp16=False".into()),
        ("amp", "bf16") => arg("bf16=True".into()),
        ("amp", "fp16") => arg("fp16=True".into()),
        ("amp", "tf32") => arg("tf32=True".into()),
        ("num_workers", v) => arg(format!("dataloader_num_workers={v}")),
        ("pin_memory", v) => arg(format!("dataloader_pin_memory={}", py(v))),
        ("persistent_workers", v) => arg(format!("dataloader_persistent_workers={}", py(v))),
        ("prefetch_factor", v) => arg(format!("dataloader_prefetch_factor={v}")),
        ("batch_size", v) => Some(Spelled::ArgNote(
            format!("per_device_train_batch_size={v}"),
            "and scale learning_rate",
        )),
        ("grad_accum", v) => arg(format!("gradient_accumulation_steps={v}")),
        ("compile", "off") => arg("torch_compile=False".into()),
        ("compile", "default") => arg("torch_compile=True".into()),
        ("compile", mode) => arg(format!("torch_compile=True, torch_compile_mode=\"{mode}\"")),
        ("checkpoint", "off") => arg("gradient_checkpointing=False".into()),
        ("checkpoint", _) => arg("gradient_checkpointing=True".into()),
        ("optim_impl", "fused") if adamw => arg("optim=\"adamw_torch_fused\"".into()),
        ("optim_impl", "default") if adamw => arg("optim=\"adamw_torch\"".into()),
        ("bucket_mb", v) => arg(format!("ddp_bucket_cap_mb={v}")),
        _ => None,
    }
}

fn accelerate(knob: &str, value: &str) -> Option<Spelled> {
    let arg = |a: String| Some(Spelled::Arg(a));
    match (knob, value) {
        ("amp", "off") => arg("mixed_precision=\"no\"".into()),
        ("amp", "bf16") => arg("mixed_precision=\"bf16\"".into()),
        ("amp", "fp16") => arg("mixed_precision=\"fp16\"".into()),
        ("grad_accum", v) => arg(format!("gradient_accumulation_steps={v}")),
        _ => None,
    }
}

/// The framework's settings call and how it spells each knob it has.
fn spelling(framework: &str) -> Option<(&'static str, SpellFn)> {
    Some(match framework {
        "lightning" => ("L.Trainer", |k, v, _| lightning(k, v)),
        "pytorch_lightning" => ("pl.Trainer", |k, v, _| lightning(k, v)),
        "fabric" => ("Fabric", |k, v, _| fabric(k, v)),
        "transformers" => ("TrainingArguments", transformers),
        "accelerate" => ("Accelerator", |k, v, _| accelerate(k, v)),
        _ => return None,
    })
}

type SpellFn = fn(&str, &str, Option<&str>) -> Option<Spelled>;

/// The framework's own setting for `knob = value` alone (`TrainingArguments(...,
/// gradient_checkpointing=False)`), or None where it has none.
pub fn framework_setting(framework: Option<&str>, knob: &str, value: &str) -> Option<String> {
    let (_, spell) = framework.and_then(spelling)?;
    spell(knob, value, None)?;
    // The framework spells it, so no backend's generic line is reached.
    Some(script_lines([(knob, value)], "", framework, None))
}

/// The lines that make `changes` in the script: its framework's settings call first
/// (`L.Trainer(..., precision="bf16-mixed", benchmark=True)`) and its statements, then
/// PyTorch's line of each knob the framework has no setting for, the optimizer named as
/// the script builds it (`name_optimizer`).
pub fn script_lines<'a>(
    changes: impl IntoIterator<Item = (&'a str, &'a str)>,
    backend: &str,
    framework: Option<&str>,
    optimizer: Option<&str>,
) -> String {
    let spell = framework.and_then(spelling);
    let (mut args, mut lines, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    let mut notes = Vec::new();
    for (knob, value) in changes {
        match spell.and_then(|(_, f)| f(knob, value, optimizer)) {
            Some(Spelled::Arg(a)) => args.push(a),
            Some(Spelled::ArgNote(a, note)) => {
                args.push(a);
                notes.push(note);
            }
            Some(Spelled::Line(l)) => lines.push(l.to_string()),
            None => rest.push((knob, value)),
        }
    }
    let mut out = Vec::new();
    if let (Some((call, _)), false) = (spell, args.is_empty()) {
        out.push(format!("{call}(..., {})", args.join(", ")));
    }
    // A statement with a comment goes last: the comment would swallow what follows it.
    let (commented, plain): (Vec<String>, Vec<String>) =
        lines.into_iter().partition(|l| l.contains("  # "));
    out.extend(plain);
    let generic = name_optimizer(&torch_lines(rest, backend), optimizer);
    if !generic.is_empty() {
        out.push(generic);
    }
    out.extend(commented);
    let mut line = out.join("; ");
    if !notes.is_empty() {
        // After a generic line's own comment, if it has one: "# a; b" stays one comment.
        line.push_str(if line.contains("  # ") { "; " } else { "  # " });
        line.push_str(&notes.join("; "));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::script_lines;

    #[test]
    fn a_frameworks_script_is_told_its_frameworks_setting() {
        let one = |k, v, fw| script_lines([(k, v)], "cpu", fw, Some("torch.optim.AdamW"));
        assert_eq!(
            one("amp", "bf16", Some("lightning")),
            "L.Trainer(..., precision=\"bf16-mixed\")"
        );
        assert_eq!(
            one("amp", "bf16", Some("transformers")),
            "TrainingArguments(..., bf16=True)"
        );
        assert_eq!(
            one("amp", "fp16", Some("accelerate")),
            "Accelerator(..., mixed_precision=\"fp16\")"
        );
        assert_eq!(
            one("amp", "bf16", Some("fabric")),
            "Fabric(..., precision=\"bf16-mixed\")"
        );
        // No framework, or one tune does not know: PyTorch's line, as before.
        let plain = crate::knobs::torch_line("amp", "bf16", "cpu");
        assert_eq!(one("amp", "bf16", None), plain);
        assert_eq!(one("amp", "bf16", Some("keras")), plain);
    }

    #[test]
    fn settings_the_framework_lacks_keep_pytorchs_line_after_its_call() {
        let line = script_lines(
            [("num_workers", "2"), ("amp", "bf16"), ("autotune", "true")],
            "cuda",
            Some("lightning"),
            None,
        );
        assert_eq!(
            line,
            "L.Trainer(..., precision=\"bf16-mixed\", benchmark=True); \
             DataLoader(dataset, num_workers=2)"
        );
        let hf = script_lines(
            [
                ("num_workers", "0"),
                ("compile", "max-autotune"),
                ("channels_last", "true"),
            ],
            "cpu",
            Some("transformers"),
            None,
        );
        assert!(
            hf.starts_with(
                "TrainingArguments(..., dataloader_num_workers=0, torch_compile=True, \
                 torch_compile_mode=\"max-autotune\"); model = model.to("
            ),
            "{hf}"
        );
    }

    #[test]
    fn a_frameworks_own_setting_or_none() {
        use super::framework_setting;
        assert_eq!(
            framework_setting(Some("transformers"), "checkpoint", "off").as_deref(),
            Some("TrainingArguments(..., gradient_checkpointing=False)")
        );
        assert_eq!(
            framework_setting(Some("lightning"), "checkpoint", "off"),
            None
        );
        assert_eq!(framework_setting(None, "amp", "bf16"), None);
    }

    /// A script of the package before its rename (`import pytorch_lightning as pl`) is
    /// told its own module's Trainer; a Trainer's larger batch says the learning rate must
    /// follow, as PyTorch's line does; and a Lightning model's channels_last is the model's
    /// conversion, with the statement whose comment would swallow others said last.
    #[test]
    fn lightnings_old_name_the_trainers_batch_and_lightnings_channels_last() {
        let one = |k, v, fw| script_lines([(k, v)], "cpu", Some(fw), None);
        assert_eq!(
            one("amp", "bf16", "pytorch_lightning"),
            "pl.Trainer(..., precision=\"bf16-mixed\")"
        );
        assert_eq!(
            script_lines(
                [("batch_size", "32"), ("amp", "bf16")],
                "cpu",
                Some("transformers"),
                None
            ),
            "TrainingArguments(..., per_device_train_batch_size=32, bf16=True)  \
             # and scale learning_rate"
        );
        let both = script_lines(
            [
                ("channels_last", "true"),
                ("zero_grad", "memset"),
                ("amp", "bf16"),
            ],
            "cpu",
            Some("lightning"),
            None,
        );
        assert!(
            both.starts_with(
                "L.Trainer(..., precision=\"bf16-mixed\"); \
                 model = model.to(memory_format=torch.channels_last)  # your LightningModule"
            ),
            "{both}"
        );
        assert_eq!(both.matches("  # ").count(), 2, "{both}");
        let workers = script_lines(
            [("zero_grad", "none"), ("num_workers", "2")],
            "cpu",
            Some("lightning"),
            None,
        );
        assert!(
            workers.starts_with("DataLoader(dataset, num_workers=2); def optimizer_zero_grad"),
            "{workers}"
        );
    }

    #[test]
    fn the_trainers_optim_names_only_its_own_adamw() {
        let fused = |opt| script_lines([("optim_impl", "fused")], "cpu", Some("transformers"), opt);
        assert_eq!(
            fused(Some("torch.optim.AdamW")),
            "TrainingArguments(..., optim=\"adamw_torch_fused\")"
        );
        assert!(
            fused(Some("torch.optim.SGD")).starts_with("optimizer = torch.optim.SGD(params, ..."),
            "{}",
            fused(Some("torch.optim.SGD"))
        );
    }
}
