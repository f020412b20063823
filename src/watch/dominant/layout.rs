//! The compute finding's memory-layout hypothesis: a conv net the script leaves in
//! PyTorch's default NCHW layout may run its convolutions faster in channels_last (NHWC),
//! the layout oneDNN's CPU kernels and cuDNN's tensor-core kernels prefer. Whether it does
//! depends on the layers: by hand on a 2-core AMD EPYC (Zen 3, AVX2), fp32, forward,
//! backward and step of one fixed batch, 4 interleaved rounds, NHWC ran
//! scripts/realistic's ResNet-18 trunk (siamese) 1.13x, eval_heavy's small conv net
//! 1.21x, the DCGAN discriminator 1.06x and its transposed-conv generator 0.93x; the
//! DDPM U-Net 1.08x on an AVX-512 EPYC. So it is a trial, never advice by itself.

use super::ScriptKnobs;

/// The `script_knobs` key the hooks set where the trained model has 4-D (convolution)
/// weights: "true" where the script puts them in channels_last itself, else "false".
pub(super) const CHANNELS_LAST: &str = "channels_last";

/// The `[knobs]` line that measures it, the script's own NCHW first (the baseline).
pub(super) const SWEEP_LINE: &str = "channels_last = [false, true]";

/// Whether the trained model's convolution weights are in NCHW as the script leaves them.
/// A model without 4-D weights has no key, and one the script already converts says
/// "true": neither gets the trial.
pub(super) fn nchw_convs(script: &ScriptKnobs) -> bool {
    script.get(CHANNELS_LAST).is_some_and(|v| v == "false")
}

/// The compute finding's hint with the layout hypothesis added where it applies.
pub(super) fn with_layout(hint: String, script: &ScriptKnobs) -> String {
    if !nchw_convs(script) {
        return hint;
    }
    // A Lightning model is converted before trainer.fit, not where a loop of the
    // script's own would convert each batch.
    let framework = script.get(crate::knobs::FRAMEWORK).map(String::as_str);
    let line =
        crate::knobs::framework_setting(framework, CHANNELS_LAST, "true").unwrap_or_else(|| {
            "model.to(memory_format=torch.channels_last), the same for each input batch".into()
        });
    format!(
        "{hint}. Hypothesis too: your model's convolutions run in PyTorch's default NCHW \
         layout, and channels_last ({line}) lets oneDNN's or cuDNN's kernels skip their layout \
         conversions; by hand on a 2-core CPU it ran a ResNet-18 1.13x and a small conv \
         net 1.21x, but a transposed-conv generator 0.93x, so sweep.toml measures it \
         ({SWEEP_LINE})"
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::{found, script, summary};
    use super::super::*;
    use super::{CHANNELS_LAST, SWEEP_LINE};

    /// A ResNet's watch named its convolutions and offered bf16 alone; NHWC, 1.13x by
    /// hand on it, was never tried.
    #[test]
    fn a_conv_net_in_nchw_is_offered_channels_last_beside_its_precision() {
        let compute = [found(FindingKind::Compute)];
        let nchw = script(&[("amp", "off"), (CHANNELS_LAST, "false")]);
        assert_eq!(
            sweep_knobs(&compute, 2, &nchw, None),
            ["amp = [\"off\", \"bf16\"]", SWEEP_LINE]
        );
        // Where nothing else is left to try (float64, or no native bf16 and compiled
        // already) the layout is still measured.
        let f64_conv = script(&[(PARAM_DTYPE, "float64"), (CHANNELS_LAST, "false")]);
        assert_eq!(sweep_knobs(&compute, 2, &f64_conv, None), [SWEEP_LINE]);
        // The script converts its model itself, or the model has no convolutions.
        let own = script(&[("amp", "off"), (CHANNELS_LAST, "true")]);
        assert_eq!(
            sweep_knobs(&compute, 2, &own, None),
            ["amp = [\"off\", \"bf16\"]"]
        );
        let mlp = script(&[("amp", "off")]);
        assert_eq!(
            sweep_knobs(&compute, 2, &mlp, None),
            ["amp = [\"off\", \"bf16\"]"]
        );
        // Only a compute finding carries it: an optimizer-bound conv net is not offered it.
        let optimizer = [found(FindingKind::Optimizer)];
        assert!(!sweep_knobs(&optimizer, 2, &nchw, None)
            .iter()
            .any(|l| l == SWEEP_LINE));
    }

    #[test]
    fn the_compute_hint_names_the_layout_only_for_nchw_convolutions() {
        let s = summary(0.35, 0.6, 0.02);
        let hint = |sk: &ScriptKnobs| findings(&s, sk)[0].hint.clone();
        let nchw = hint(&script(&[("amp", "off"), (CHANNELS_LAST, "false")]));
        assert!(nchw.contains("NCHW") && nchw.contains(SWEEP_LINE), "{nchw}");
        for other in [
            script(&[("amp", "off"), (CHANNELS_LAST, "true")]),
            script(&[("amp", "off")]),
        ] {
            assert!(!hint(&other).contains("channels_last"), "{}", hint(&other));
        }
        // A Lightning model is converted before trainer.fit, not batch by batch.
        let lit = hint(&script(&[
            ("amp", "off"),
            (CHANNELS_LAST, "false"),
            (crate::knobs::FRAMEWORK, "lightning"),
        ]));
        assert!(lit.contains("before trainer.fit(model)"), "{lit}");
        assert!(!lit.contains("each input batch"), "{lit}");
        assert!(nchw.contains("the same for each input batch"), "{nchw}");
    }
}
