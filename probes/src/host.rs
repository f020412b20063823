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
mod tests {
    use super::*;

    const STAT_A: &str = "\
cpu  1000 10 500 8000 100 5 5 0 0 0
cpu0 500 5 250 4000 50 3 2 0 0 0
cpu1 500 5 250 4000 50 2 3 0 0 0
intr 12345 0 0
ctxt 999
btime 1700000000
processes 4242
procs_running 2
";
    // cpu0 busy for the whole interval, cpu1 idle.
    const STAT_B: &str = "\
cpu  1100 10 500 8100 100 5 5 0 0 0
cpu0 600 5 250 4000 50 3 2 0 0 0
cpu1 500 5 250 4100 50 2 3 0 0 0
intr 12400 0 0
";

    #[test]
    fn proc_stat_per_core_utilization() {
        let a = parse_proc_stat(STAT_A).unwrap();
        let b = parse_proc_stat(STAT_B).unwrap();
        assert_eq!(a.cores.len(), 2);
        assert_eq!(a.total.user, 1000);
        assert_eq!(a.total.iowait, 100);
        assert_eq!(cpu_utilization(&a.cores[&0], &b.cores[&0]), Some(100.0));
        assert_eq!(cpu_utilization(&a.cores[&1], &b.cores[&1]), Some(0.0));
        assert_eq!(cpu_utilization(&a.total, &b.total), Some(50.0));
        // No time passed, or counters reset: no reading rather than a wrong one.
        assert_eq!(cpu_utilization(&a.total, &a.total), None);
        assert_eq!(cpu_utilization(&b.total, &a.total), None);
    }

    #[test]
    fn proc_stat_old_kernel_and_errors() {
        let old = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(old.total.steal, 0);
        assert!(parse_proc_stat("intr 1 2\n").is_err());
        assert!(parse_proc_stat("cpu 1 2 x 4\n").is_err());
        assert!(parse_proc_stat("cpu 1 2\n").is_err());
    }

    #[test]
    fn proc_stat_with_offline_cpu_skips_index() {
        let s = parse_proc_stat("cpu 1 0 0 1\ncpu0 1 0 0 1\ncpu2 1 0 0 1\n").unwrap();
        assert_eq!(s.cores.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
    }

    // Captured from a real process whose comm was set to "tune) (x y" via prctl.
    const PID_STAT_TRICKY: &str = "4242 (tune) (x y) S 4200 4242 4200 34816 4242 4194304 1500 0 2 0 \
250 75 30 12 20 0 3 0 987654 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
    const PID_STAT_PLAIN: &str = "1 (systemd) S 0 1 1 0 -1 4194560 52000 1800000 120 900 \
900 1200 15000 9000 20 0 1 0 12 170000000 3000 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260 0 0 0 17 0 0 0 0 0 0\n";

    #[test]
    fn pid_stat_comm_with_spaces_and_parens() {
        let s = parse_pid_stat(PID_STAT_TRICKY).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "tune) (x y");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 4200);
        assert_eq!((s.utime, s.stime, s.cutime, s.cstime), (250, 75, 30, 12));
        assert_eq!(s.num_threads, 3);
        assert_eq!(s.starttime, 987654);
        assert_eq!(s.cpu_with_reaped_children(), 367);
    }

    #[test]
    fn pid_stat_plain_and_malformed() {
        let s = parse_pid_stat(PID_STAT_PLAIN).unwrap();
        assert_eq!((s.pid, s.ppid, s.comm.as_str()), (1, 0, "systemd"));
        assert_eq!(s.utime, 900);
        assert!(parse_pid_stat("12 (short) S 1 2").is_err());
        assert!(parse_pid_stat("no parens here").is_err());
        assert!(parse_pid_stat("x (a) S 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1").is_err());
    }

    #[test]
    fn vm_rss_in_bytes() {
        let status = "Name:\tpython3\nState:\tR (running)\nVmPeak:\t  900000 kB\nVmRSS:\t  123456 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss(status).unwrap(), Some(123456 * 1024));
        // Kernel threads have no VmRSS line.
        assert_eq!(
            parse_vm_rss("Name:\tkthreadd\nState:\tS (sleeping)\n").unwrap(),
            None
        );
        assert!(parse_vm_rss("VmRSS:\t12 MB\n").is_err());
        assert!(parse_vm_rss("VmRSS:\n").is_err());
    }

    #[test]
    fn tree_includes_all_descendants_only() {
        // 1 -> 10 -> {11, 12 -> 13}; 1 -> 20 (unrelated sibling)
        let links = [
            (1, 0),
            (10, 1),
            (11, 10),
            (12, 10),
            (13, 12),
            (20, 1),
            (0, 0),
        ];
        assert_eq!(descendants(10, &links), vec![10, 11, 12, 13]);
        assert_eq!(descendants(13, &links), vec![13]);
        assert_eq!(descendants(99, &links), vec![99]);
    }

    #[test]
    fn live_self_is_in_its_own_tree_with_rss() {
        let me = std::process::id();
        let rss = read_rss(me).expect("this process has VmRSS");
        assert!(rss > 0);
        let tree = process_tree(me).unwrap();
        assert!(tree.contains(&me));
        let own = parse_pid_stat(&fs::read_to_string(format!("/proc/{me}/stat")).unwrap()).unwrap();
        assert_eq!(own.pid, me);
    }

    #[test]
    fn live_sampler_reports_cores_and_watched_tree() {
        let mut s = HostSampler::new().watch(std::process::id());
        let members = s.tree_members();
        assert!(members.pids().is_empty());
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        assert!(members.contains(std::process::id()));
        // First tick: no rates yet, but the tree's size and RSS are there.
        assert!(out.iter().all(|x| x.source == Source::Tree));
        let tree = &out[0];
        assert!(tree.get(metric::TREE_RSS_BYTES).unwrap() > 0.0);
        assert!(tree.get(metric::TREE_PROCS).unwrap() >= 1.0);
        assert!(tree.get(metric::TREE_CPU_PCT).is_none());

        // Burn a little CPU so the second reading has something to see.
        let t0 = std::time::Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        out.clear();
        s.sample(t0.elapsed().as_secs_f64() * 1e3, &mut out);
        assert!(out.iter().any(|x| x.source == Source::Core));
        let host = out.iter().find(|x| x.source == Source::Host).unwrap();
        let u = host.get(metric::CPU_UTIL_PCT).unwrap();
        assert!((0.0..=100.0).contains(&u));
        let tree = out.iter().find(|x| x.source == Source::Tree).unwrap();
        assert!(tree.get(metric::TREE_CPU_PCT).unwrap() >= 0.0);
    }

    #[test]
    fn tree_follows_a_spawned_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let mut s = HostSampler::new().watch(std::process::id());
        let members = s.tree_members();
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        let _ = child.kill();
        let _ = child.wait();
        let tree = out.iter().find(|x| x.source == Source::Tree).unwrap();
        assert!(tree.get(metric::TREE_PROCS).unwrap() >= 2.0);
        assert!(members.contains(child.id()));
        assert!(members.contains(std::process::id()));
    }

    /// A fake `/proc` with one `stat` line per process: (pid, ppid, utime, cutime,
    /// start), and `task/<pid>/children` files unless `no_children` (kernels without
    /// CONFIG_PROC_CHILDREN).
    fn write_proc(dir: &Path, procs: &[(u32, u32, u64, u64, u64)]) {
        write_proc_with(dir, procs, true);
    }

    fn write_proc_with(dir: &Path, procs: &[(u32, u32, u64, u64, u64)], children: bool) {
        let _ = fs::remove_dir_all(dir);
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("stat"), "cpu 100 0 0 100\ncpu0 100 0 0 100\n").unwrap();
        for &(pid, ppid, utime, cutime, start) in procs {
            let d = dir.join(pid.to_string());
            fs::create_dir_all(&d).unwrap();
            let stat = format!(
                "{pid} (python) S {ppid} 1 1 0 -1 0 0 0 0 0 {utime} 0 {cutime} 0 20 0 2 0 {start} 1000 250\n"
            );
            fs::write(d.join("stat"), stat).unwrap();
            fs::write(d.join("status"), "Name:\tpython\nVmRSS:\t    1000 kB\n").unwrap();
            if children {
                let task = d.join("task").join(pid.to_string());
                fs::create_dir_all(&task).unwrap();
                let kids: Vec<String> = procs
                    .iter()
                    .filter(|p| p.1 == pid && p.0 != pid)
                    .map(|p| p.0.to_string())
                    .collect();
                fs::write(task.join("children"), kids.join(" ")).unwrap();
            }
        }
    }

    fn tree_at(s: &mut HostSampler, t: f64) -> Option<(f64, Option<f64>)> {
        let mut out = Vec::new();
        s.sample(t, &mut out);
        let tree = out.into_iter().find(|x| x.source == Source::Tree)?;
        Some((
            tree.get(metric::TREE_PROCS).unwrap(),
            tree.get(metric::TREE_CPU_PCT),
        ))
    }

    #[test]
    fn tree_cpu_from_captured_proc_across_spawn_reap_and_exit() {
        let dir = std::env::temp_dir().join(format!("tune-fake-proc-{}", std::process::id()));
        // pid 1 is init, 10 the watched root, 20 unrelated.
        write_proc(
            &dir,
            &[(1, 0, 0, 0, 1), (10, 1, 100, 0, 500), (20, 1, 9, 0, 7)],
        );
        let mut s = HostSampler::new().with_proc_root(&dir).watch(10);
        assert_eq!(tree_at(&mut s, 0.0), Some((1.0, None)));

        // 5 jiffies (50 ms) in 100 ms; a child appears and is found through the
        // parent's children file: its 30 jiffies from before are not a spike.
        write_proc(
            &dir,
            &[
                (1, 0, 0, 0, 1),
                (10, 1, 105, 0, 500),
                (11, 10, 30, 0, 600),
                (20, 1, 99, 0, 7),
            ],
        );
        assert_eq!(tree_at(&mut s, 100.0), Some((2.0, Some(50.0))));
        assert_eq!(
            s.tree_members().pids().into_iter().collect::<Vec<_>>(),
            vec![10, 11]
        );

        // A full rescan a second later agrees.
        write_proc(
            &dir,
            &[
                (1, 0, 0, 0, 1),
                (10, 1, 205, 0, 500),
                (11, 10, 30, 0, 600),
                (20, 1, 99, 0, 7),
            ],
        );
        assert_eq!(tree_at(&mut s, 1100.0), Some((2.0, Some(100.0))));

        // Both busy: 20 jiffies in 100 ms is two cores.
        write_proc(
            &dir,
            &[(1, 0, 0, 0, 1), (10, 1, 215, 0, 500), (11, 10, 40, 0, 600)],
        );
        assert_eq!(tree_at(&mut s, 1200.0), Some((2.0, Some(200.0))));

        // The child exits and is reaped: its time moves into the parent's cutime.
        write_proc(&dir, &[(1, 0, 0, 0, 1), (10, 1, 215, 40, 500)]);
        assert_eq!(tree_at(&mut s, 1300.0), Some((1.0, Some(0.0))));

        // The root is gone: no tree sample at all.
        write_proc(&dir, &[(1, 0, 0, 0, 1)]);
        assert_eq!(tree_at(&mut s, 1400.0), None);

        // A new process reusing the root's pid is not the root.
        write_proc(&dir, &[(1, 0, 0, 0, 1), (10, 1, 50, 0, 9999)]);
        assert_eq!(tree_at(&mut s, 1500.0), None);
        assert_eq!(tree_at(&mut s, 2600.0), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_children_files_new_children_wait_for_the_rescan() {
        let dir = std::env::temp_dir().join(format!("tune-fake-proc-nc-{}", std::process::id()));
        write_proc_with(&dir, &[(1, 0, 0, 0, 1), (10, 1, 100, 0, 500)], false);
        let mut s = HostSampler::new().with_proc_root(&dir).watch(10);
        assert_eq!(tree_at(&mut s, 0.0), Some((1.0, None)));
        let both = [(1, 0, 0, 0, 1), (10, 1, 110, 0, 500), (11, 10, 30, 0, 600)];
        write_proc_with(&dir, &both, false);
        assert_eq!(tree_at(&mut s, 100.0), Some((1.0, Some(100.0))));
        write_proc_with(&dir, &both, false);
        // Found by the full scan; counted from here on, not as a 30-jiffy spike.
        assert_eq!(tree_at(&mut s, 1000.0), Some((2.0, Some(0.0))));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn watching_a_dead_pid_yields_nothing() {
        let mut s = HostSampler::new().watch(u32::MAX - 1);
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        s.sample(100.0, &mut out);
        assert!(out.iter().all(|x| x.source != Source::Tree));
    }
}
