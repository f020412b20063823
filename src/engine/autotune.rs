//! Algorithm selection per (op, shape, dtype), as `torch.backends.cudnn.benchmark` does.
//!
//! With autotuning off a fixed heuristic picks each op's algorithm. With it on, the first
//! call with a new key runs every candidate once on the real input, keeps the fastest's
//! result and remembers the winner in memory and in a disk cache, so later calls and
//! later runs pay nothing. Every choice is recorded with its timings for the report.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Forward algorithms of conv2d.
pub const CONV_ALGOS: [&str; 3] = ["im2col", "direct", "winograd"];
/// GEMM strategies of linear.
pub const LINEAR_ALGOS: [&str; 3] = ["gemm", "rowsplit", "transposed"];

/// Bump when a candidate's meaning changes; old cache files are then ignored.
const CACHE_VERSION: u32 = 1;
const CACHE_FORMAT: &str = "tune-autotune";

/// FNV-1a over every op's candidate names: a cache written by a build with other
/// candidates is ignored rather than trusted.
fn candidates_checksum() -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for name in CONV_ALGOS.iter().chain(LINEAR_ALGOS.iter()) {
        for b in name.bytes().chain(std::iter::once(b';')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// How one key's algorithm was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChoiceSource {
    /// Autotuning off: the fixed rule.
    Heuristic,
    /// Timed in this run.
    Measured,
    /// Read from the disk cache.
    Cache,
}

/// One key's decision, for the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlgoChoice {
    pub op: String,
    pub key: String,
    pub algo: String,
    pub source: ChoiceSource,
    /// Milliseconds per candidate, when measured.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timings_ms: BTreeMap<String, f64>,
    /// First needed after the training's first two steps: a shape they did not have, so
    /// the input shapes changed while training (with autotune on, timed again). Two: the
    /// first step writes its weight gradients, the second adds into them (a GEMM of its
    /// own, `+=`): every form a fixed-shape loop uses is in by then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late: bool,
    /// First needed by the held-out evaluation (its batch of 256 and remainder), after
    /// training: shapes the training loop never saw, each needed once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eval: bool,
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    format: String,
    version: u32,
    candidates: String,
    entries: BTreeMap<String, String>,
}

#[derive(Default)]
struct State {
    chosen: HashMap<String, String>,
    log: Vec<AlgoChoice>,
    from_disk: HashMap<String, String>,
    dirty: bool,
}

/// The per-run algorithm selector, shared by every layer through `Ctx`.
pub struct Algos {
    tune: bool,
    /// Part of every key: a winner on 1 thread need not win on 16.
    device: String,
    cache_file: Option<PathBuf>,
    state: Mutex<State>,
}

impl Algos {
    /// Autotuning off: every op uses its heuristic.
    pub fn heuristic() -> Arc<Algos> {
        Arc::new(Algos {
            tune: false,
            device: String::new(),
            cache_file: None,
            state: Mutex::new(State::default()),
        })
    }

    /// Autotuning on, with an optional disk cache. Returns a note when an existing cache
    /// file was ignored (other version or candidates), so the user learns why it re-tunes.
    pub fn tuned(
        device: &str,
        cache_file: Option<PathBuf>,
    ) -> Result<(Arc<Algos>, Option<String>)> {
        let mut state = State::default();
        let mut note = None;
        if let Some(path) = &cache_file {
            match read_cache(path)? {
                CacheRead::Missing => {}
                CacheRead::Stale(why) => {
                    note = Some(format!(
                        "autotune cache {} ignored ({why}); re-tuning",
                        path.display()
                    ))
                }
                CacheRead::Entries(e) => state.from_disk = e.into_iter().collect(),
            }
        }
        Ok((
            Arc::new(Algos {
                tune: true,
                device: device.to_string(),
                cache_file,
                state: Mutex::new(state),
            }),
            note,
        ))
    }

    pub fn is_tuning(&self) -> bool {
        self.tune
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            // A panic elsewhere cannot leave the map half-updated: every update is one
            // insert, so the data is still consistent.
            Err(p) => p.into_inner(),
        }
    }

    /// The algorithm `op` uses for `key` when it is already decided (in memory, by the
    /// heuristic, or from the disk cache), recording the decision the first time.
    fn known(&self, op: &str, key: &str, candidates: &[&str]) -> Result<Option<String>> {
        let first = *candidates
            .first()
            .ok_or_else(|| Error::Runtime(format!("{op}: no candidate algorithm")))?;
        let full_key = format!("{op}|{}|{key}", self.device);
        Ok({
            let mut st = self.lock();
            if let Some(a) = st.chosen.get(&full_key) {
                Some(a.clone())
            } else if !self.tune {
                st.chosen.insert(full_key.clone(), first.to_string());
                st.log.push(AlgoChoice {
                    op: op.into(),
                    key: key.into(),
                    algo: first.into(),
                    source: ChoiceSource::Heuristic,
                    timings_ms: BTreeMap::new(),
                    late: false,
                    eval: false,
                });
                Some(first.to_string())
            } else if let Some(a) = st
                .from_disk
                .get(&full_key)
                .filter(|a| candidates.contains(&a.as_str()))
                .cloned()
            {
                st.chosen.insert(full_key.clone(), a.clone());
                st.log.push(AlgoChoice {
                    op: op.into(),
                    key: key.into(),
                    algo: a.clone(),
                    source: ChoiceSource::Cache,
                    timings_ms: BTreeMap::new(),
                    late: false,
                    eval: false,
                });
                Some(a)
            } else {
                None
            }
        })
    }

    /// Records a measured winner (memory, disk cache, report).
    fn measured(&self, op: &str, key: &str, winner: &str, timings: BTreeMap<String, f64>) {
        let full_key = format!("{op}|{}|{key}", self.device);
        let mut st = self.lock();
        st.chosen.insert(full_key.clone(), winner.to_string());
        st.from_disk.insert(full_key, winner.to_string());
        st.dirty = true;
        st.log.push(AlgoChoice {
            op: op.into(),
            key: key.into(),
            algo: winner.into(),
            source: ChoiceSource::Measured,
            timings_ms: timings,
            late: false,
            eval: false,
        });
    }

    /// The algorithm for `key` where the caller times the candidates itself (a GPU,
    /// whose work a host clock cannot see): `time` returns one candidate's milliseconds,
    /// and is called only when the choice is not already known.
    pub fn choose(
        &self,
        op: &str,
        key: &str,
        candidates: &[&str],
        mut time: impl FnMut(&str) -> Result<f64>,
    ) -> Result<String> {
        if let Some(a) = self.known(op, key, candidates)? {
            return Ok(a);
        }
        let mut timings = BTreeMap::new();
        let mut best: Option<(f64, &str)> = None;
        for &c in candidates {
            let ms = time(c)?;
            timings.insert(c.to_string(), ms);
            if best.is_none_or(|(b, _)| ms < b) {
                best = Some((ms, c));
            }
        }
        let (_, winner) = best.ok_or_else(|| Error::Runtime(format!("{op}: no candidate ran")))?;
        self.measured(op, key, winner, timings);
        Ok(winner.to_string())
    }

    /// Runs `op` for `key` with the chosen algorithm. `candidates` are the algorithms
    /// valid for this shape (the first is the heuristic's choice); `run` computes the
    /// op's result with one of them.
    pub fn run<R>(
        &self,
        op: &str,
        key: &str,
        candidates: &[&str],
        mut run: impl FnMut(&str) -> Result<R>,
    ) -> Result<R> {
        if let Some(a) = self.known(op, key, candidates)? {
            return run(&a);
        }
        // Measure every candidate once on the real input; keep the fastest result.
        let mut best: Option<(f64, &str, R)> = None;
        let mut timings = BTreeMap::new();
        for &c in candidates {
            // Two runs, the faster counted: the first pays one-off costs (fresh pages for
            // the output and workspace) that every later call would not.
            let t = Instant::now();
            drop(run(c)?);
            let first = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let out = run(c)?;
            let ms = first.min(t.elapsed().as_secs_f64() * 1e3);
            timings.insert(c.to_string(), ms);
            if best.as_ref().is_none_or(|(b, _, _)| ms < *b) {
                best = Some((ms, c, out));
            }
        }
        let (_, winner, out) =
            best.ok_or_else(|| Error::Runtime(format!("{op}: no candidate ran")))?;
        self.measured(op, key, winner, timings);
        Ok(out)
    }

    /// Every decision made so far, in order.
    pub fn choices(&self) -> Vec<AlgoChoice> {
        self.lock().log.clone()
    }

    /// How many decisions were made so far (the length of [`Algos::choices`], uncopied).
    pub fn decided(&self) -> usize {
        self.lock().log.len()
    }

    /// Writes the cache file (atomically) when new winners were measured.
    pub fn save(&self) -> Result<()> {
        let Some(path) = &self.cache_file else {
            return Ok(());
        };
        let mut st = self.lock();
        if !st.dirty {
            return Ok(());
        }
        let file = CacheFile {
            format: CACHE_FORMAT.into(),
            version: CACHE_VERSION,
            candidates: candidates_checksum(),
            entries: st
                .from_disk
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        let text = serde_json::to_string_pretty(&file)
            .map_err(|e| Error::Runtime(format!("autotune cache: {e}")))?;
        write_atomic(path, text.as_bytes())?;
        st.dirty = false;
        Ok(())
    }
}

enum CacheRead {
    Missing,
    Stale(String),
    Entries(BTreeMap<String, String>),
}

fn read_cache(path: &Path) -> Result<CacheRead> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(CacheRead::Missing),
        Err(e) => return Err(Error::io(path, e)),
    };
    let file: CacheFile = serde_json::from_str(&text).map_err(|e| Error::Format {
        path: path.to_path_buf(),
        msg: format!("not an autotune cache: {e}"),
    })?;
    if file.format != CACHE_FORMAT {
        return Err(Error::Format {
            path: path.to_path_buf(),
            msg: format!("format '{}' is not '{CACHE_FORMAT}'", file.format),
        });
    }
    if file.version != CACHE_VERSION {
        return Ok(CacheRead::Stale(format!(
            "version {} != {CACHE_VERSION}",
            file.version
        )));
    }
    if file.candidates != candidates_checksum() {
        return Ok(CacheRead::Stale(
            "written with other candidate algorithms".into(),
        ));
    }
    Ok(CacheRead::Entries(file.entries))
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = crate::fsio::parent_dir(path);
    std::fs::create_dir_all(dir).map_err(|e| Error::write(dir, e))?;
    crate::fsio::atomic_write(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heuristic_takes_the_first_candidate_without_timing() {
        let a = Algos::heuristic();
        let mut ran = Vec::new();
        let r = a
            .run("conv2d", "k", &["im2col", "direct"], |c| {
                ran.push(c.to_string());
                Ok(c.len())
            })
            .unwrap();
        assert_eq!(r, 6);
        assert_eq!(ran, ["im2col"]);
        assert_eq!(a.choices()[0].source, ChoiceSource::Heuristic);
    }

    #[test]
    fn tuning_times_each_candidate_once_keeps_the_fastest_and_caches_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("autotune.json");
        let (a, note) = Algos::tuned("cpu:1t", Some(path.clone())).unwrap();
        assert!(note.is_none());
        let mut ran = Vec::new();
        let slow = |c: &str| {
            if c == "im2col" {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(c.to_string())
        };
        let r = a
            .run("conv2d", "k1", &["im2col", "direct"], |c| {
                ran.push(c.to_string());
                slow(c)
            })
            .unwrap();
        assert_eq!(r, "direct");
        // Second call: no timing, the winner straight away.
        a.run("conv2d", "k1", &["im2col", "direct"], |c| {
            ran.push(c.to_string());
            slow(c)
        })
        .unwrap();
        assert_eq!(ran, ["im2col", "im2col", "direct", "direct", "direct"]);
        let ch = a.choices();
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].source, ChoiceSource::Measured);
        assert_eq!(ch[0].timings_ms.len(), 2);
        a.save().unwrap();

        // A new run reads the winner from disk and times nothing.
        let (b, _) = Algos::tuned("cpu:1t", Some(path.clone())).unwrap();
        let mut ran2 = Vec::new();
        b.run("conv2d", "k1", &["im2col", "direct"], |c| {
            ran2.push(c.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(ran2, ["direct"]);
        assert_eq!(b.choices()[0].source, ChoiceSource::Cache);

        // Another device string is another key.
        let (c, _) = Algos::tuned("cpu:2t", Some(path.clone())).unwrap();
        let mut ran3 = 0;
        c.run("conv2d", "k1", &["im2col", "direct"], |_| {
            ran3 += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(ran3, 4);
    }

    #[test]
    fn a_cache_from_other_candidates_or_version_is_ignored_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("autotune.json");
        let stale = CacheFile {
            format: CACHE_FORMAT.into(),
            version: CACHE_VERSION,
            candidates: "0000000000000000".into(),
            entries: [("conv2d|cpu:1t|k1".to_string(), "direct".to_string())].into(),
        };
        std::fs::write(&path, serde_json::to_string(&stale).unwrap()).unwrap();
        let (a, note) = Algos::tuned("cpu:1t", Some(path.clone())).unwrap();
        assert!(note.unwrap().contains("other candidate"));
        let mut n = 0;
        a.run("conv2d", "k1", &["im2col", "direct"], |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 4, "stale entries must not be trusted");

        let old = CacheFile {
            version: CACHE_VERSION + 1,
            candidates: candidates_checksum(),
            ..stale
        };
        std::fs::write(&path, serde_json::to_string(&old).unwrap()).unwrap();
        let (_, note) = Algos::tuned("cpu:1t", Some(path.clone())).unwrap();
        assert!(note.unwrap().contains("version"));

        std::fs::write(&path, "not json").unwrap();
        assert!(Algos::tuned("cpu:1t", Some(path)).is_err());
    }
}
