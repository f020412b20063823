use super::*;

#[test]
fn parse_and_display_round_trip() {
    for s in ["off", "sqrt", "every:3"] {
        assert_eq!(s.parse::<Checkpoint>().unwrap().to_string(), s);
    }
    assert!("every:0".parse::<Checkpoint>().is_err());
    let e = "fp8".parse::<Amp>().unwrap_err().to_string();
    assert!(e.contains("off, bf16, fp16"), "{e}");
}

#[test]
fn set_get_round_trip_and_unknown_knob() {
    let mut k = Knobs::default();
    for (n, v) in [
        ("amp", "bf16"),
        ("num_workers", "2"),
        ("checkpoint", "every:2"),
    ] {
        k.set(n, v).unwrap();
        assert_eq!(k.get(n).unwrap(), v);
    }
    assert!(k
        .set("warp_speed", "9")
        .unwrap_err()
        .to_string()
        .contains("unknown knob"));
    assert_eq!(
        k.diff_label(&Knobs::default()),
        "num_workers=2 checkpoint=every:2 amp=bf16"
    );
}

#[test]
fn dataloader_arguments_merge_into_one_call() {
    let line = torch_lines(
        [
            ("batch_size", "128"),
            ("zero_grad", "none"),
            ("num_workers", "4"),
            ("persistent_workers", "true"),
        ],
        "cpu",
    );
    assert_eq!(
        line,
        "optimizer.zero_grad(set_to_none=True); DataLoader(dataset, batch_size=128, \
         num_workers=4, persistent_workers=True)  # and scale the learning rate"
    );
}

#[test]
fn an_optimizer_change_names_the_scripts_class() {
    for v in ["foreach", "fused", "forloop"] {
        let generic = torch_line("optim_impl", v, "cpu");
        let sgd = super::name_optimizer(&generic, Some("torch.optim.SGD"));
        assert!(
            sgd.starts_with("optimizer = torch.optim.SGD(params, ..."),
            "{sgd}"
        );
        assert!(
            !sgd.contains('#'),
            "the comment asks for a substitution made: {sgd}"
        );
        // Two classes (a GAN's Adam and SGD) or none read: the generic line, as it says.
        for other in [None, Some("torch.optim.Adam, torch.optim.SGD")] {
            assert_eq!(super::name_optimizer(&generic, other), generic);
        }
    }
    let default =
        super::name_optimizer(&torch_line("optim_impl", "default", "cpu"), Some("MyAdam"));
    assert!(
        default.starts_with("optimizer = MyAdam(params, ...)  # no fused="),
        "{default}"
    );
    // Lines of other knobs are left alone.
    let amp = torch_line("amp", "bf16", "cpu");
    assert_eq!(super::name_optimizer(&amp, Some("torch.optim.SGD")), amp);
}

#[test]
fn serde_uses_the_flag_spelling() {
    let k = Knobs {
        zero_grad: ZeroGrad::None,
        ..Knobs::default()
    };
    let j = serde_json::to_string(&k).unwrap();
    assert!(j.contains("\"zero_grad\":\"none\""), "{j}");
    let back: Knobs = serde_json::from_str(&j).unwrap();
    assert_eq!(back, k);
}

#[test]
fn validate_rejects_zero_bucket_and_sync_bn_without_ddp() {
    let k = Knobs {
        bucket_mb: 0,
        ..Knobs::default()
    };
    assert!(k
        .validate()
        .unwrap_err()
        .to_string()
        .contains("bucket_mb 0"));
    let k = Knobs {
        sync_bn: true,
        parallel: Parallel::Dp,
        devices: 2,
        ..Knobs::default()
    };
    assert!(k
        .validate()
        .unwrap_err()
        .to_string()
        .contains("parallel = ddp"));
    let k = Knobs {
        sync_bn: true,
        parallel: Parallel::Ddp,
        devices: 2,
        ..Knobs::default()
    };
    k.validate().unwrap();
}

#[test]
fn validate_rejects_zero_batch() {
    let k = Knobs {
        batch_size: 0,
        ..Knobs::default()
    };
    assert!(k.validate().unwrap_err().to_string().contains("batch_size"));
}
