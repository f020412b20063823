//! Which CUDA libraries this process could load, and from where: `tune probe`'s answer
//! to "would the CUDA backend find its libraries here?".
//!
//! Each library is opened the way the CUDA backend will open it (`dlopen` by soname,
//! so `LD_LIBRARY_PATH` and the loader cache apply), then in each directory of
//! [`LIB_DIRS_ENV`]. The file actually mapped is read back from `/proc/self/maps`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Extra directories (`:`-separated) to look for CUDA libraries in, e.g. the `lib`
/// folders of the `nvidia-*` Python wheels.
pub const LIB_DIRS_ENV: &str = "TUNE_CUDA_LIB_DIRS";

/// The libraries the CUDA backend uses, each with the sonames tried in order
/// (CUDA 13 first, then 12).
pub const CUDA_LIBS: [(&str, &[&str]); 8] = [
    ("driver", &["libcuda.so.1"]),
    ("nvml", &["libnvidia-ml.so.1"]),
    ("cudart", &["libcudart.so.13", "libcudart.so.12"]),
    ("cublas", &["libcublas.so.13", "libcublas.so.12"]),
    ("cublasLt", &["libcublasLt.so.13", "libcublasLt.so.12"]),
    ("nvrtc", &["libnvrtc.so.13", "libnvrtc.so.12"]),
    ("cudnn", &["libcudnn.so.9"]),
    ("nccl", &["libnccl.so.2"]),
];

/// The outcome for one library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibStatus {
    /// Short name (`cublas`).
    pub name: String,
    /// The soname or path that loaded, when one did.
    pub loaded: Option<String>,
    /// The file mapped into this process, when it could be found.
    pub path: Option<String>,
    /// Why the last attempt failed, when none loaded.
    pub error: Option<String>,
}

/// Extra directories from [`LIB_DIRS_ENV`].
pub fn extra_dirs() -> Vec<PathBuf> {
    std::env::var_os(LIB_DIRS_ENV)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The file of a mapped library whose name starts with `stem` (`libcublas.so`), as
/// listed in `/proc/self/maps` text.
pub fn mapped_path(maps: &str, stem: &str) -> Option<String> {
    maps.lines()
        .filter_map(|l| l.split_ascii_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(stem))
        })
        .map(str::to_owned)
}

fn try_load(candidate: &str) -> Result<libloading::Library, String> {
    // SAFETY: loading runs the library's initialisers. These are NVIDIA's own
    // libraries, made to be dlopen'ed (the CUDA backend loads them the same way);
    // no symbol is called and the handle is closed by the caller.
    unsafe { libloading::Library::new(candidate) }.map_err(|e| e.to_string())
}

/// Tries every CUDA library in [`CUDA_LIBS`]; never fails, a missing one is a status.
pub fn probe_cuda_libs() -> Vec<LibStatus> {
    let dirs = extra_dirs();
    CUDA_LIBS
        .iter()
        .map(|(name, sonames)| {
            let mut error = None;
            let mut tried = Vec::new();
            let candidates =
                sonames
                    .iter()
                    .map(|s| s.to_string())
                    .chain(dirs.iter().flat_map(|d| {
                        sonames.iter().map(move |s| d.join(s).display().to_string())
                    }));
            for c in candidates {
                tried.push(c.clone());
                match try_load(&c) {
                    Ok(lib) => {
                        let stem = sonames[0].split(".so").next().unwrap_or(sonames[0]);
                        let path = std::fs::read_to_string("/proc/self/maps")
                            .ok()
                            .and_then(|m| mapped_path(&m, &format!("{stem}.so")));
                        drop(lib);
                        return LibStatus {
                            name: name.to_string(),
                            loaded: Some(c),
                            path,
                            error: None,
                        };
                    }
                    Err(e) => error = Some(e),
                }
            }
            // One line naming every soname tried, ending with the loader's last word.
            let error = match (tried.len(), error) {
                (n, Some(e)) if n > 1 => Some(format!("tried {}; {e}", tried.join(", "))),
                (_, e) => e,
            };
            LibStatus {
                name: name.to_string(),
                loaded: None,
                path: None,
                error,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
7f00a0000000-7f00a0100000 r-xp 00000000 fd:01 123 /usr/lib/x86_64-linux-gnu/libcublasLt.so.13.0.1
7f00a1000000-7f00a1100000 r-xp 00000000 fd:01 124 /opt/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.13
7f00a2000000-7f00a2001000 rw-p 00000000 00:00 0
7f00a3000000-7f00a3100000 r-xp 00000000 fd:01 125 [vdso]
";

    #[test]
    fn mapped_path_matches_the_library_not_a_longer_name() {
        assert_eq!(
            mapped_path(MAPS, "libcublas.so").as_deref(),
            Some("/opt/venv/lib/python3.12/site-packages/nvidia/cublas/lib/libcublas.so.13")
        );
        assert_eq!(
            mapped_path(MAPS, "libcublasLt.so").as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libcublasLt.so.13.0.1")
        );
        assert_eq!(mapped_path(MAPS, "libcudnn.so"), None);
    }

    // The loading and the path lookup on a library every Linux has.
    #[test]
    fn a_present_library_loads_and_is_found_in_maps() {
        let lib = try_load("libm.so.6").expect("libm loads");
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let path = mapped_path(&maps, "libm.so").expect("libm is mapped");
        assert!(Path::new(&path).exists(), "{path}");
        drop(lib);
        assert!(try_load("libtune-no-such-library.so.1").is_err());
    }

    // On a machine without CUDA every library is reported missing with the loader's
    // reason; with CUDA, a loaded one names what loaded. Either way: no panic, and
    // one status per library.
    #[test]
    fn every_library_gets_a_status() {
        let all = probe_cuda_libs();
        assert_eq!(all.len(), CUDA_LIBS.len());
        for l in &all {
            assert!(
                l.loaded.is_some() != l.error.is_some(),
                "{l:?}: exactly one of loaded/error"
            );
            if let Some(e) = &l.error {
                assert!(!e.is_empty());
            }
        }
    }
}
