//! Host CPU and process-tree readings from `/proc`.
//!
//! Parsers are pure functions over the file text so they are tested on
//! captured text; only [`HostSampler`] and the `read_*` helpers touch `/proc`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::ProbeError;
use crate::sample::{Sample, Sampler, Source};

/// Metric names written by [`HostSampler`].
pub mod metric {
    /// `Host` and `Core`: busy share of the CPU(s), 0..=100.
    pub const CPU_UTIL_PCT: &str = "cpu_util_pct";
    /// `Tree`: CPU used by the tree; 100 = one core fully busy.
    pub const TREE_CPU_PCT: &str = "cpu_pct";
    /// `Tree`: sum of members' resident set sizes (shared pages count once per process).
    pub const TREE_RSS_BYTES: &str = "rss_bytes";
    /// `Tree`: live processes in the tree, root included.
    pub const TREE_PROCS: &str = "procs";
    /// `Tree`: threads over all members.
    pub const TREE_THREADS: &str = "threads";
}

/// How often the watched tree is looked for in all of `/proc`; in between only its
/// known members and the children of their main threads are read. A full scan reads
/// every process's `stat` (about 2 ms of CPU per 100 processes on a small VM), too
/// much for every 100 ms tick. A child's CPU time before it is found is not counted,
/// and a child that lives shorter than a tick may not be seen at all (its CPU time
/// still counts once its parent, a member, has reaped it).
pub const TREE_RESCAN_MS: f64 = 1000.0;

/// Linux fixes USER_HZ (the unit of `/proc` CPU times) at 100 on every
/// mainstream architecture; reading it via sysconf would need libc for no gain.
pub const USER_HZ: f64 = 100.0;

/// Cumulative jiffies of one `cpu` line of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    // guest/guest_nice are already inside user/nice, so they are not added again.
    pub fn total(&self) -> u64 {
        self.busy() + self.idle_all()
    }

    pub fn idle_all(&self) -> u64 {
        self.idle + self.iowait
    }

    pub fn busy(&self) -> u64 {
        self.user + self.nice + self.system + self.irq + self.softirq + self.steal
    }
}

/// Busy percent (0..=100) between two readings of the same CPU; `None` if no
/// time passed or the counters went backwards (CPU hot-unplugged and back).
pub fn cpu_utilization(prev: &CpuTimes, cur: &CpuTimes) -> Option<f64> {
    let total = cur.total().checked_sub(prev.total())?;
    let busy = cur.busy().checked_sub(prev.busy())?;
    if total == 0 {
        return None;
    }
    Some((100.0 * busy as f64 / total as f64).clamp(0.0, 100.0))
}

/// The CPU lines of `/proc/stat`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub total: CpuTimes,
    /// `cpuN` lines keyed by N; offline CPUs are missing, so indices may skip.
    pub cores: BTreeMap<u32, CpuTimes>,
}

pub fn parse_proc_stat(text: &str) -> Result<ProcStat, ProbeError> {
    let mut total = None;
    let mut cores = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(label) = fields.next() else { continue };
        let Some(rest) = label.strip_prefix("cpu") else {
            continue;
        };
        let nums: Vec<u64> = fields
            .map(|f| f.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|e| ProbeError::parse("/proc/stat", format!("line {line:?}: {e}")))?;
        // Kernels before 2.6.11 lack steal; treat missing trailing fields as 0.
        if nums.len() < 4 {
            return Err(ProbeError::parse(
                "/proc/stat",
                format!(
                    "line {line:?} has {} fields, expected at least 4",
                    nums.len()
                ),
            ));
        }
        let at = |i: usize| nums.get(i).copied().unwrap_or(0);
        let times = CpuTimes {
            user: at(0),
            nice: at(1),
            system: at(2),
            idle: at(3),
            iowait: at(4),
            irq: at(5),
            softirq: at(6),
            steal: at(7),
        };
        if rest.is_empty() {
            total = Some(times);
        } else {
            let n = rest.parse::<u32>().map_err(|e| {
                ProbeError::parse("/proc/stat", format!("cpu label {label:?}: {e}"))
            })?;
            cores.insert(n, times);
        }
    }
    let total =
        total.ok_or_else(|| ProbeError::parse("/proc/stat", "no aggregate \"cpu\" line"))?;
    Ok(ProcStat { total, cores })
}

/// The fields of `/proc/<pid>/stat` that the probes use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PidStat {
    pub pid: u32,
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    /// Jiffies in user mode.
    pub utime: u64,
    /// Jiffies in kernel mode.
    pub stime: u64,
    /// Jiffies of waited-for children, user mode.
    pub cutime: u64,
    /// Jiffies of waited-for children, kernel mode.
    pub cstime: u64,
    pub num_threads: u64,
    /// Jiffies after boot; with `pid` it identifies a process across pid reuse.
    pub starttime: u64,
}

impl PidStat {
    /// Own CPU plus that of reaped children. Summed over a tree this total
    /// survives children exiting: the kernel moves a reaped child's times into
    /// its parent's cutime/cstime, so the work does not vanish from the sum.
    pub fn cpu_with_reaped_children(&self) -> u64 {
        self.utime + self.stime + self.cutime + self.cstime
    }
}

/// Parses `/proc/<pid>/stat`. The comm field is free text (it may hold
/// spaces and parentheses), so fields are split after the *last* `)`.
pub fn parse_pid_stat(text: &str) -> Result<PidStat, ProbeError> {
    const WHAT: &str = "/proc/<pid>/stat";
    let open = text
        .find('(')
        .ok_or_else(|| ProbeError::parse(WHAT, "no '(' before comm"))?;
    let close = text
        .rfind(')')
        .filter(|&c| c > open)
        .ok_or_else(|| ProbeError::parse(WHAT, "no ')' after comm"))?;
    let pid = text[..open]
        .trim()
        .parse::<u32>()
        .map_err(|e| ProbeError::parse(WHAT, format!("pid: {e}")))?;
    let comm = text[open + 1..close].to_owned();
    // Field N of proc(5) (1-based, pid = 1, comm = 2) is rest[N - 3].
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |n: usize, name: &str| -> Result<&str, ProbeError> {
        rest.get(n - 3).copied().ok_or_else(|| {
            ProbeError::parse(WHAT, format!("pid {pid}: missing field {n} ({name})"))
        })
    };
    let num = |n: usize, name: &str| -> Result<u64, ProbeError> {
        field(n, name)?
            .parse::<u64>()
            .map_err(|e| ProbeError::parse(WHAT, format!("pid {pid}: field {n} ({name}): {e}")))
    };
    let state = field(3, "state")?
        .chars()
        .next()
        .ok_or_else(|| ProbeError::parse(WHAT, "empty state"))?;
    let ppid = u32::try_from(num(4, "ppid")?)
        .map_err(|e| ProbeError::parse(WHAT, format!("pid {pid}: ppid: {e}")))?;
    Ok(PidStat {
        pid,
        comm,
        state,
        ppid,
        utime: num(14, "utime")?,
        stime: num(15, "stime")?,
        cutime: num(16, "cutime")?,
        cstime: num(17, "cstime")?,
        num_threads: num(20, "num_threads")?,
        starttime: num(22, "starttime")?,
    })
}

/// `VmRSS` of `/proc/<pid>/status` in bytes; `None` when the line is absent
/// (kernel threads, zombies).
pub fn parse_vm_rss(status: &str) -> Result<Option<u64>, ProbeError> {
    const WHAT: &str = "/proc/<pid>/status VmRSS";
    let Some(line) = status.lines().find(|l| l.starts_with("VmRSS:")) else {
        return Ok(None);
    };
    let mut parts = line["VmRSS:".len()..].split_ascii_whitespace();
    let value = parts
        .next()
        .ok_or_else(|| ProbeError::parse(WHAT, format!("{line:?}: no value")))?
        .parse::<u64>()
        .map_err(|e| ProbeError::parse(WHAT, format!("{line:?}: {e}")))?;
    match parts.next() {
        Some("kB") => Ok(Some(value * 1024)),
        other => Err(ProbeError::parse(
            WHAT,
            format!("{line:?}: unit {other:?}, expected kB"),
        )),
    }
}

/// `root` and all its descendants, given every process's `(pid, ppid)`.
/// The root is included even if absent from `links` (it may be this process
/// reading a racy listing); the result is sorted.
pub fn descendants(root: u32, links: &[(u32, u32)]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for &(pid, ppid) in links {
        // pid 0's "children" are init and kthreadd; a self-loop would never end.
        if pid != ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        if let Some(kids) = children.get(&tree[i]) {
            for &k in kids {
                if !tree.contains(&k) {
                    tree.push(k);
                }
            }
        }
        i += 1;
    }
    tree.sort_unstable();
    tree
}

/// Reads `/proc/<pid>/stat` of every live process. Processes that exit while
/// being listed are skipped: that race is normal, not an error.
pub fn read_all_pid_stats(proc_root: &Path) -> Result<Vec<PidStat>, ProbeError> {
    let dir = fs::read_dir(proc_root).map_err(|e| ProbeError::io(proc_root, e))?;
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(text) = fs::read_to_string(proc_root.join(pid.to_string()).join("stat")) else {
            continue;
        };
        if let Ok(st) = parse_pid_stat(&text) {
            out.push(st);
        }
    }
    Ok(out)
}

/// `root` and its live descendants, read from `/proc`.
pub fn process_tree(root: u32) -> Result<Vec<u32>, ProbeError> {
    let stats = read_all_pid_stats(Path::new("/proc"))?;
    let links: Vec<(u32, u32)> = stats.iter().map(|s| (s.pid, s.ppid)).collect();
    let tree = descendants(root, &links);
    // The root is only in the answer if it is alive.
    Ok(if stats.iter().any(|s| s.pid == root) {
        tree
    } else {
        Vec::new()
    })
}

/// Resident set size of one process in bytes, `None` if it has none or is gone.
pub fn read_rss(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&text).ok().flatten()
}

/// Every pid seen in a watched tree so far, shared with readers outside the
/// sampling thread (e.g. to tell the tree's GPU processes from other users').
/// Pids are never removed: a member that exited still did its work in the tree.
#[derive(Clone, Debug, Default)]
pub struct TreeMembers(Arc<Mutex<BTreeSet<u32>>>);

impl TreeMembers {
    /// A copy of the pids seen so far.
    pub fn pids(&self) -> BTreeSet<u32> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn contains(&self, pid: u32) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&pid)
    }

    fn add(&self, pids: &[u32]) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(pids.iter().copied());
    }
}

/// Per-core and total CPU utilisation, and optionally a watched process tree.
pub struct HostSampler {
    proc_root: PathBuf,
    watch: Option<u32>,
    prev_stat: Option<ProcStat>,
    prev_tree: Option<(f64, u64)>,
    members: TreeMembers,
    /// `(pid, starttime)` of the tree's members at the last tick.
    known: Vec<(u32, u64)>,
    last_scan_ms: Option<f64>,
    /// Start time of the watched root, once seen.
    root_start: Option<u64>,
}

impl Default for HostSampler {
    fn default() -> Self {
        HostSampler::new()
    }
}

impl HostSampler {
    pub fn new() -> Self {
        HostSampler {
            proc_root: PathBuf::from("/proc"),
            watch: None,
            prev_stat: None,
            prev_tree: None,
            members: TreeMembers::default(),
            known: Vec::new(),
            last_scan_ms: None,
            root_start: None,
        }
    }

    /// A handle on the pids seen in the watched tree; stays valid after the
    /// sampler moves to the recorder thread.
    pub fn tree_members(&self) -> TreeMembers {
        self.members.clone()
    }

    /// Reads `root` instead of `/proc` (a `/proc` mounted elsewhere, or captured files).
    pub fn with_proc_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.proc_root = root.into();
        self
    }

    /// Also report CPU, RSS and process count of `root` and its descendants.
    pub fn watch(mut self, root: u32) -> Self {
        self.watch = Some(root);
        self
    }

    fn sample_cpus(&mut self, now_ms: f64, out: &mut Vec<Sample>) {
        let Ok(text) = fs::read_to_string(self.proc_root.join("stat")) else {
            return;
        };
        let Ok(cur) = parse_proc_stat(&text) else {
            return;
        };
        // Utilisation is a rate, so the first tick only sets the baseline.
        if let Some(prev) = &self.prev_stat {
            let mut host = Sample::new(now_ms, Source::Host);
            if let Some(u) = cpu_utilization(&prev.total, &cur.total) {
                host.set(metric::CPU_UTIL_PCT, u);
            }
            if !host.metrics.is_empty() {
                out.push(host);
            }
            for (&n, times) in &cur.cores {
                let Some(u) = prev.cores.get(&n).and_then(|p| cpu_utilization(p, times)) else {
                    continue;
                };
                let mut core = Sample::new(now_ms, Source::Core).with_device(n);
                core.set(metric::CPU_UTIL_PCT, u);
                out.push(core);
            }
        }
        self.prev_stat = Some(cur);
    }

    /// The tree's members now: after a full scan of `/proc` when one is due, else by
    /// re-reading the members already known (a process that reused a member's pid is
    /// told apart by its start time).
    fn tree_stats(&mut self, root: u32, now_ms: f64) -> Option<Vec<PidStat>> {
        let due = self
            .last_scan_ms
            .is_none_or(|t| now_ms - t >= TREE_RESCAN_MS || now_ms < t);
        if !due {
            let read = |pid: u32| -> Option<PidStat> {
                let text =
                    fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
                parse_pid_stat(&text).ok()
            };
            let mut known: Vec<PidStat> = self
                .known
                .iter()
                .filter_map(|&(pid, start)| read(pid).filter(|s| s.starttime == start))
                .collect();
            // Children of the members' main threads are listed in
            // task/<pid>/children (CONFIG_PROC_CHILDREN): new workers are found at
            // once. Children of other threads wait for the next full scan.
            let mut i = 0;
            while i < known.len() {
                let pid = known[i].pid;
                let path = self
                    .proc_root
                    .join(pid.to_string())
                    .join("task")
                    .join(pid.to_string())
                    .join("children");
                if let Ok(text) = fs::read_to_string(path) {
                    for c in text.split_ascii_whitespace().filter_map(|c| c.parse().ok()) {
                        if !known.iter().any(|s| s.pid == c) {
                            known.extend(read(c).filter(|s| s.ppid == pid));
                        }
                    }
                }
                i += 1;
            }
            if known.iter().any(|s| s.pid == root) {
                return Some(known);
            }
            // The root vanished or was never known: only a full scan can tell.
        }
        let stats = read_all_pid_stats(&self.proc_root).ok()?;
        self.last_scan_ms = Some(now_ms);
        let links: Vec<(u32, u32)> = stats.iter().map(|s| (s.pid, s.ppid)).collect();
        if !stats.iter().any(|s| s.pid == root) {
            return Some(Vec::new());
        }
        let tree = descendants(root, &links);
        Some(
            stats
                .into_iter()
                .filter(|s| tree.binary_search(&s.pid).is_ok())
                .collect(),
        )
    }

    fn sample_tree(&mut self, root: u32, now_ms: f64, out: &mut Vec<Sample>) {
        let Some(members) = self.tree_stats(root, now_ms) else {
            return;
        };
        let start = members.iter().find(|s| s.pid == root).map(|s| s.starttime);
        let reused = matches!((self.root_start, start), (Some(a), Some(b)) if a != b);
        if self.root_start.is_none() {
            self.root_start = start;
        }
        if members.is_empty() || reused {
            // The watched process is gone (a process that reused its pid is another
            // process): report nothing rather than zeros.
            self.prev_tree = None;
            self.known.clear();
            return;
        }
        let pids: Vec<u32> = members.iter().map(|s| s.pid).collect();
        self.members.add(&pids);

        let mut sample = Sample::new(now_ms, Source::Tree).with_pid(root);
        sample.set(metric::TREE_PROCS, members.len() as f64);
        sample.set(
            metric::TREE_THREADS,
            members.iter().map(|s| s.num_threads).sum::<u64>() as f64,
        );
        let rss: Vec<u64> = members
            .iter()
            .filter_map(|s| {
                let status =
                    fs::read_to_string(self.proc_root.join(s.pid.to_string()).join("status"))
                        .ok()?;
                parse_vm_rss(&status).ok().flatten()
            })
            .collect();
        if !rss.is_empty() {
            sample.set(metric::TREE_RSS_BYTES, rss.iter().sum::<u64>() as f64);
        }

        let jiffies: u64 = members.iter().map(|s| s.cpu_with_reaped_children()).sum();
        // A member found only now (spawned since the last full scan) brings CPU time
        // from before this tick; count it from here on instead of as a spike now.
        let late: u64 = members
            .iter()
            .filter(|s| !self.known.contains(&(s.pid, s.starttime)))
            .map(|s| s.cpu_with_reaped_children())
            .sum();
        if let Some((prev_ms, prev_jiffies)) = self.prev_tree {
            let dt_s = (now_ms - prev_ms) / 1e3;
            if dt_s > 0.0 {
                // A member re-parented out of the tree lowers the sum; that is
                // not negative work, so clamp at zero.
                let used = jiffies.saturating_sub(prev_jiffies + late) as f64 / USER_HZ;
                sample.set(metric::TREE_CPU_PCT, 100.0 * used / dt_s);
            }
        }
        self.prev_tree = Some((now_ms, jiffies));
        self.known = members.iter().map(|s| (s.pid, s.starttime)).collect();
        out.push(sample);
    }
}

impl Sampler for HostSampler {
    fn name(&self) -> &str {
        "host"
    }

    fn sample(&mut self, now_ms: f64, out: &mut Vec<Sample>) {
        self.sample_cpus(now_ms, out);
        if let Some(root) = self.watch {
            self.sample_tree(root, now_ms, out);
        }
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
