//! What CPU this machine has, for `tune probe` and report environments.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuInfo {
    /// `None` where `/proc/cpuinfo` names no model (some ARM kernels).
    pub model: Option<String>,
    /// Logical CPUs the machine has (`processor` entries in `/proc/cpuinfo`).
    pub logical_cores: usize,
    /// Logical CPUs this process may use (affinity and cgroup quota applied).
    pub available: usize,
}

/// The first `model name` (x86) or, failing that, `Model`/`Hardware` (ARM) value.
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Model", "Hardware"].iter().find_map(|key| {
        cpuinfo.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            let v = v.trim();
            (k.trim() == *key && !v.is_empty()).then(|| v.to_owned())
        })
    })
}

/// Number of `processor` entries.
pub fn parse_logical_cores(cpuinfo: &str) -> usize {
    cpuinfo
        .lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(k, _)| k.trim() == "processor")
        })
        .count()
}

pub fn cpu_model() -> Option<String> {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| parse_cpu_model(&t))
}

/// Reads `/proc/cpuinfo`; falls back to the usable count where it is unreadable.
pub fn cpu_info() -> CpuInfo {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let logical = parse_logical_cores(&text);
    CpuInfo {
        model: parse_cpu_model(&text),
        logical_cores: if logical > 0 { logical } else { available },
        available,
    }
}

/// Whether the CPU computes bf16 natively (`avx512_bf16` or `amx_bf16` among x86's
/// `flags`, `bf16` among ARM's `Features`), from the first processor's entry; `None`
/// where the text has neither line. Without it PyTorch's CPU autocast to bf16 converts
/// around f32 arithmetic: on a 2-core Ice Lake Xeon (AVX-512, no AVX512_BF16) it ran an
/// MLP 0.32-0.36x, a conv net 0.59-0.61x and an LSTM 0.33-0.35x of float32's speed.
pub fn parse_native_bf16(cpuinfo: &str) -> Option<bool> {
    let flags = cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        matches!(k.trim(), "flags" | "Features").then_some(v)
    })?;
    Some(
        flags
            .split_whitespace()
            .any(|f| matches!(f, "avx512_bf16" | "amx_bf16" | "bf16")),
    )
}

/// [`parse_native_bf16`] of this machine's `/proc/cpuinfo`.
pub fn native_bf16() -> Option<bool> {
    parse_native_bf16(&std::fs::read_to_string("/proc/cpuinfo").ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n\
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\nflags\t\t: fpu\n\n\
processor\t: 1\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n\
model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n\n";
    const ARM: &str = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n\nHardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n";

    #[test]
    fn model_and_count_from_captured_cpuinfo() {
        assert_eq!(
            parse_cpu_model(X86).as_deref(),
            Some("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz")
        );
        assert_eq!(parse_logical_cores(X86), 2);
        assert_eq!(
            parse_cpu_model(ARM).as_deref(),
            Some("Raspberry Pi 4 Model B Rev 1.4")
        );
        assert_eq!(parse_logical_cores(ARM), 1);
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn native_bf16_from_the_flags_line() {
        assert_eq!(parse_native_bf16(X86), Some(false));
        let spr = X86.replace(
            "flags\t\t: fpu",
            "flags\t\t: fpu avx512f avx512_bf16 amx_tile",
        );
        assert_eq!(parse_native_bf16(&spr), Some(true));
        let amx = X86.replace("flags\t\t: fpu", "flags\t\t: fpu amx_bf16");
        assert_eq!(parse_native_bf16(&amx), Some(true));
        // avx512bf16 is no flag of Linux's spelling; a substring must not count.
        let icx = X86.replace("flags\t\t: fpu", "flags\t\t: fpu avx512f avx512_vnni");
        assert_eq!(parse_native_bf16(&icx), Some(false));
        assert_eq!(
            parse_native_bf16("Features\t: fp asimd sve bf16 i8mm\n"),
            Some(true)
        );
        assert_eq!(parse_native_bf16(ARM), None);
    }

    #[test]
    fn live_cpu_info_is_sane() {
        let info = cpu_info();
        assert!(info.logical_cores >= 1);
        assert!(info.available >= 1);
    }
}
