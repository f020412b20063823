//! Where this process sits in a multi-process job, read from the environment the way
//! PyTorch's `env://` rendezvous reads it: `torchrun` sets `RANK`, `WORLD_SIZE`,
//! `LOCAL_RANK`, `MASTER_ADDR` and `MASTER_PORT`; under `srun` the Slurm variables
//! (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`) stand in, with the launch node
//! (`SLURM_LAUNCH_NODE_IPADDR`, else the first node of `SLURM_NODELIST`) as the master
//! when `MASTER_ADDR` is unset.

use std::ffi::OsStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::limits::{self, Bound};

/// PyTorch's default `MASTER_PORT`.
pub const DEFAULT_PORT: u16 = 29500;

/// How long the rendezvous waits for every rank, and a collective for a peer's data,
/// unless `TUNE_DIST_TIMEOUT` (seconds) says otherwise (torch.distributed's NCCL default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// One process's place in a multi-process run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    /// Host name or address of rank 0, which listens on `port`.
    pub master: String,
    /// `TUNE_DIST_PORT`, else `MASTER_PORT`, else `MASTER_PORT + 1` under torchrun,
    /// whose agent holds `MASTER_PORT` itself.
    pub port: u16,
    /// `torchrun` or `srun`: which variables said so.
    pub launcher: &'static str,
    pub timeout: Duration,
}

/// The launch this process's environment describes; `None` outside torchrun and srun.
pub fn from_env() -> Result<Option<Launch>> {
    from_vars(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
}

/// A launch variable within `bound`: `None` when unset, one line naming it otherwise.
fn num(get: &impl Fn(&str) -> Option<String>, var: &str, bound: &Bound) -> Result<Option<usize>> {
    let v = limits::env_u64(var, get(var).as_deref().map(OsStr::new), bound)?;
    // Every bound here is far below usize::MAX.
    Ok(v.map(|v| v as usize))
}

/// A rank or local rank: below the world size.
fn rank_bound(world: usize) -> Bound {
    Bound {
        min: 0,
        max: world.saturating_sub(1) as u64,
        why: "a rank is below the world size",
    }
}

/// `from_env` over any variable source (tests).
pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
    let req = |var: &str, why: &str| {
        get(var).ok_or_else(|| {
            Error::Invalid(format!("{var} is not set in the environment, but {why}"))
        })
    };
    let (world_var, rank_var, local_var, launcher) = if get("WORLD_SIZE").is_some() {
        ("WORLD_SIZE", "RANK", "LOCAL_RANK", "torchrun")
    } else if get("SLURM_NTASKS").is_some() {
        ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "srun")
    } else {
        return Ok(None);
    };
    // A world of more processes than tune has devices is refused by every command that
    // reads it; bounded here so no rank sizes anything by it first.
    let world = num(&get, world_var, &limits::DEVICES)?.unwrap_or(1);
    req(rank_var, &format!("{world_var} is"))?;
    let rank = num(&get, rank_var, &rank_bound(world))?.unwrap_or(0);
    let local_rank = num(&get, local_var, &rank_bound(world))?.unwrap_or(rank);
    let master = match get("MASTER_ADDR") {
        Some(m) => m,
        None => match get("SLURM_LAUNCH_NODE_IPADDR") {
            Some(ip) => ip,
            None => match get("SLURM_NODELIST").or_else(|| get("SLURM_JOB_NODELIST")) {
                Some(list) => first_node(&list).ok_or_else(|| {
                    Error::Invalid(format!(
                        "cannot read the first node of SLURM_NODELIST={list:?}; set MASTER_ADDR"
                    ))
                })?,
                None if world == 1 => "127.0.0.1".into(),
                None => {
                    return Err(Error::Invalid(format!(
                        "MASTER_ADDR is not set in the environment, and no Slurm node list \
                         names a master, but the world size is {world}"
                    )))
                }
            },
        },
    };
    let master_port = num(&get, "MASTER_PORT", &limits::PORT)?.map_or(DEFAULT_PORT, |p| p as u16);
    // torchrun's agent already listens on MASTER_PORT with its own store (the workers
    // see TORCHELASTIC_USE_AGENT_STORE=True), so tune's rendezvous takes the next port.
    let agent_store = get("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v == "True");
    let port = match num(&get, "TUNE_DIST_PORT", &limits::PORT)? {
        Some(p) => p as u16,
        None if agent_store => master_port.checked_add(1).ok_or_else(|| {
            Error::Invalid(format!(
                "MASTER_PORT={master_port} under torchrun: tune's rendezvous uses \
                 MASTER_PORT + 1, which does not exist; set TUNE_DIST_PORT"
            ))
        })?,
        None => master_port,
    };
    let timeout = limits::env_secs(
        "TUNE_DIST_TIMEOUT",
        get("TUNE_DIST_TIMEOUT").as_deref().map(OsStr::new),
        &limits::DIST_TIMEOUT_S,
    )?
    .unwrap_or(DEFAULT_TIMEOUT);
    Ok(Some(Launch {
        rank,
        world,
        local_rank,
        master,
        port,
        launcher,
        timeout,
    }))
}

/// The first host of a Slurm host list: `gpu[003-005,010],cpu1` -> `gpu003`.
pub fn first_node(list: &str) -> Option<String> {
    let mut depth = 0;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let first = list[..end].trim();
    let host = match first.split_once('[') {
        None => first.to_string(),
        Some((prefix, rest)) => {
            let range = rest.split(']').next()?;
            let lo = range.split([',', '-']).next()?.trim();
            if lo.is_empty() {
                return None;
            }
            format!("{prefix}{lo}")
        }
    };
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(kv: &[(&str, &str)]) -> Result<Option<Launch>> {
        let m: HashMap<String, String> = kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn torchrun_variables() {
        let l = vars(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.rank, l.world, l.local_rank, l.port), (1, 2, 1, 1234));
        assert_eq!((l.master.as_str(), l.launcher), ("10.0.0.1", "torchrun"));
        let l = vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1234"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(l.port, 1235);
        assert_eq!(vars(&[]).unwrap(), None);
    }

    #[test]
    fn slurm_variables_and_master_fallbacks() {
        let l = vars(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODELIST", "gpu[003-005,010],cpu1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((l.rank, l.world, l.local_rank), (3, 4, 1));
        assert_eq!(
            (l.master.as_str(), l.port, l.launcher),
            ("gpu003", DEFAULT_PORT, "srun")
        );
        let l = vars(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LAUNCH_NODE_IPADDR", "192.168.1.5"),
            ("SLURM_NODELIST", "n1,n2"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(l.master, "192.168.1.5");
        assert_eq!(first_node("n1,n2").as_deref(), Some("n1"));
        assert_eq!(first_node("a[7]").as_deref(), Some("a7"));
        assert_eq!(first_node("[]"), None);
    }

    /// Every size the launch variables set is bounded, one line naming the variable:
    /// `TUNE_DIST_TIMEOUT=1e20` panicked in `Duration::from_secs_f64`, `1e18` meant no
    /// limit, port 0 and a world of a billion were taken as given.
    #[test]
    fn sizes_from_the_environment_are_bounded() {
        let ok = [
            ("WORLD_SIZE", "2"),
            ("RANK", "1"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1234"),
        ];
        for (var, value) in [
            ("TUNE_DIST_TIMEOUT", "1e20"),
            ("TUNE_DIST_TIMEOUT", "1e18"),
            ("TUNE_DIST_TIMEOUT", "604801"),
            ("TUNE_DIST_TIMEOUT", "inf"),
            ("TUNE_DIST_TIMEOUT", "0"),
            ("WORLD_SIZE", "1000000000"),
            ("LOCAL_RANK", "2"),
            ("MASTER_PORT", "0"),
            ("TUNE_DIST_PORT", "0"),
            ("TUNE_DIST_PORT", "65536"),
        ] {
            let mut kv: Vec<(&str, &str)> = ok.iter().copied().filter(|(k, _)| *k != var).collect();
            kv.push((var, value));
            let e = vars(&kv).unwrap_err().to_string();
            assert!(e.contains(var) && !e.contains('\n'), "{var}={value}: {e}");
        }
        let mut kv = ok.to_vec();
        kv.push(("TUNE_DIST_TIMEOUT", "2.5"));
        let l = vars(&kv).unwrap().unwrap();
        assert_eq!(l.timeout, Duration::from_millis(2500));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = vars(&[("WORLD_SIZE", "two"), ("RANK", "0")]).unwrap_err();
        assert!(e.to_string().contains("WORLD_SIZE"), "{e}");
        let e = vars(&[("WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.to_string().contains("RANK"), "{e}");
        let e = vars(&[("WORLD_SIZE", "2"), ("RANK", "2"), ("MASTER_ADDR", "h")]).unwrap_err();
        assert!(e.to_string().contains("below the world size"), "{e}");
        let e = vars(&[("WORLD_SIZE", "2"), ("RANK", "0")]).unwrap_err();
        assert!(e.to_string().contains("MASTER_ADDR"), "{e}");
        let e = vars(&[
            ("WORLD_SIZE", "2"),
            ("RANK", "0"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "99999"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("MASTER_PORT"), "{e}");
    }
}
