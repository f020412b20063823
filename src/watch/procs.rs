//! The per-process table of `tune watch --tui`, as htop and nvitop users expect: one row
//! per process of the watched tree with pid, command, CPU%, RSS, and GPU memory and
//! utilization where NVML gives them per process ("-" where not), sorted and filtered
//! with htop's keys. Reading `/proc` and the key handling live here; the drawing is in
//! `tui`.

use std::collections::BTreeMap;
use std::time::Instant;

use tune_probes::host::{parse_pid_stat, read_rss, USER_HZ};

/// One process of the watched tree on one GPU (nvitop's rows): a process using two GPUs
/// (DataParallel's one process over both) has a row per GPU, each with that GPU's
/// figures; a process on none has one row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcRow {
    pub pid: u32,
    /// The GPU (NVML index) of this row's GPU figures; None for a process on no GPU.
    pub gpu: Option<u32>,
    pub command: String,
    /// Share of one core since the previous reading; None on the first.
    pub cpu_pct: Option<f64>,
    pub rss_bytes: Option<u64>,
    /// NVML's per-process figures; None where the driver gives none.
    pub gpu_mem_bytes: Option<f64>,
    pub gpu_util_pct: Option<f64>,
}

/// The columns, in display order; `>` (or F6) moves the sort to the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    Pid,
    Command,
    #[default]
    Cpu,
    Mem,
    GpuMem,
    GpuUtil,
}

impl SortBy {
    pub const ALL: [SortBy; 6] = [
        SortBy::Pid,
        SortBy::Command,
        SortBy::Cpu,
        SortBy::Mem,
        SortBy::GpuMem,
        SortBy::GpuUtil,
    ];

    pub fn header(self) -> &'static str {
        match self {
            SortBy::Pid => "PID",
            SortBy::Command => "COMMAND",
            SortBy::Cpu => "CPU%",
            SortBy::Mem => "RSS",
            SortBy::GpuMem => "GPU MEM",
            SortBy::GpuUtil => "GPU%",
        }
    }

    fn next(self) -> SortBy {
        let i = SortBy::ALL.iter().position(|s| *s == self).unwrap_or(0);
        SortBy::ALL[(i + 1) % SortBy::ALL.len()]
    }
}

/// Rows, sort order and filter; `refresh` reads `/proc` for the current members.
#[derive(Clone, Debug, Default)]
pub struct ProcTable {
    pub rows: Vec<ProcRow>,
    pub sort: SortBy,
    /// Rows whose command or pid contains this (case-insensitive) are shown.
    pub filter: String,
    /// `/` was pressed: keys edit the filter until Enter or Esc.
    pub editing: bool,
    /// CPU jiffies per pid (with its start time, against pid reuse) at the last reading.
    prev: BTreeMap<u32, (u64, u64)>,
    last: Option<Instant>,
}

/// What a key did to the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// The table took the key.
    Taken,
    /// Not a table key: the caller handles it.
    Ignored,
}

/// The command line of a pid, NULs as spaces; its `comm` when the cmdline is empty
/// (kernel threads, zombies).
fn command_of(pid: u32, comm: &str) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    if cmd.is_empty() {
        format!("[{comm}]")
    } else {
        cmd
    }
}

/// NVML's per-process figures on one GPU: memory bytes, SM %.
pub type GpuFigures = (Option<f64>, Option<f64>);

/// NVML's latest per-process figures, by (pid, GPU index).
pub type GpuProcs = BTreeMap<(u32, u32), GpuFigures>;

impl ProcTable {
    /// Reads each member's stat, command line and RSS; `gpu` holds NVML's latest
    /// per-process (memory bytes, SM %) by (pid, GPU). A pid that is gone is left out.
    pub fn refresh(&mut self, pids: &[u32], gpu: &GpuProcs, now: Instant) {
        let dt = self.last.map(|t| now.duration_since(t).as_secs_f64());
        let mut prev = BTreeMap::new();
        let mut rows = Vec::with_capacity(pids.len());
        for &pid in pids {
            let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Ok(st) = parse_pid_stat(&text) else {
                continue;
            };
            let jiffies = st.utime + st.stime;
            let cpu_pct = match (self.prev.get(&pid), dt) {
                (Some(&(j, start)), Some(dt)) if start == st.starttime && dt > 0.0 => {
                    Some(100.0 * jiffies.saturating_sub(j) as f64 / USER_HZ / dt)
                }
                _ => None,
            };
            prev.insert(pid, (jiffies, st.starttime));
            let row = ProcRow {
                pid,
                gpu: None,
                command: command_of(pid, &st.comm),
                cpu_pct,
                rss_bytes: read_rss(pid),
                gpu_mem_bytes: None,
                gpu_util_pct: None,
            };
            let on: Vec<(u32, GpuFigures)> = gpu
                .range((pid, 0)..=(pid, u32::MAX))
                .map(|(&(_, g), &v)| (g, v))
                .collect();
            if on.is_empty() {
                rows.push(row);
                continue;
            }
            for (g, (mem, util)) in on {
                rows.push(ProcRow {
                    gpu: Some(g),
                    gpu_mem_bytes: mem,
                    gpu_util_pct: util,
                    ..row.clone()
                });
            }
        }
        self.prev = prev;
        self.last = Some(now);
        self.rows = rows;
    }

    /// The rows to show: filtered, then sorted (largest first for figures, ascending
    /// for pid and command; an absent figure sorts last).
    pub fn visible(&self) -> Vec<&ProcRow> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&ProcRow> = self
            .rows
            .iter()
            .filter(|r| {
                needle.is_empty()
                    || r.command.to_lowercase().contains(&needle)
                    || r.pid.to_string().contains(&needle)
            })
            .collect();
        let fig = |v: Option<f64>| v.unwrap_or(f64::NEG_INFINITY);
        rows.sort_by(|a, b| match self.sort {
            SortBy::Pid => a.pid.cmp(&b.pid).then(a.gpu.cmp(&b.gpu)),
            SortBy::Command => a.command.cmp(&b.command).then(a.pid.cmp(&b.pid)),
            SortBy::Cpu => fig(b.cpu_pct).total_cmp(&fig(a.cpu_pct)),
            SortBy::Mem => b.rss_bytes.cmp(&a.rss_bytes),
            SortBy::GpuMem => fig(b.gpu_mem_bytes).total_cmp(&fig(a.gpu_mem_bytes)),
            SortBy::GpuUtil => fig(b.gpu_util_pct).total_cmp(&fig(a.gpu_util_pct)),
        });
        rows
    }

    /// htop's keys: `P` CPU, `M` memory, `>` or F6 the next column, `/` filter (typed
    /// until Enter; Esc clears it). Quitting (`q`, F10) is the caller's.
    pub fn on_key(&mut self, code: crossterm::event::KeyCode) -> Key {
        use crossterm::event::KeyCode as K;
        if self.editing {
            match code {
                K::Enter => self.editing = false,
                K::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                K::Backspace => {
                    self.filter.pop();
                }
                K::Char(c) if self.filter.chars().count() < 64 => self.filter.push(c),
                _ => {}
            }
            return Key::Taken;
        }
        match code {
            K::Char('P') => self.sort = SortBy::Cpu,
            K::Char('M') => self.sort = SortBy::Mem,
            K::Char('>') | K::Char('<') | K::F(6) => self.sort = self.sort.next(),
            K::Char('/') => self.editing = true,
            K::Esc if !self.filter.is_empty() => self.filter.clear(),
            _ => return Key::Ignored,
        }
        Key::Taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyCode;

    fn row(pid: u32, command: &str, cpu: Option<f64>, rss: u64, gpu: Option<f64>) -> ProcRow {
        ProcRow {
            pid,
            gpu: gpu.map(|_| 0),
            command: command.into(),
            cpu_pct: cpu,
            rss_bytes: Some(rss),
            gpu_mem_bytes: gpu,
            gpu_util_pct: None,
        }
    }

    fn pids(t: &ProcTable) -> Vec<u32> {
        t.visible().iter().map(|r| r.pid).collect()
    }

    #[test]
    fn htop_keys_sort_and_filter() {
        let mut t = ProcTable {
            rows: vec![
                row(10, "python train.py", Some(90.0), 100, None),
                row(11, "python worker", Some(5.0), 900, Some(2e9)),
                row(12, "sh -c x", None, 50, None),
            ],
            ..ProcTable::default()
        };
        // CPU first by default; an unmeasured CPU sorts last.
        assert_eq!(pids(&t), [10, 11, 12]);
        assert_eq!(t.on_key(KeyCode::Char('M')), Key::Taken);
        assert_eq!(pids(&t), [11, 10, 12]);
        assert_eq!(t.on_key(KeyCode::Char('P')), Key::Taken);
        assert_eq!(pids(&t), [10, 11, 12]);
        // `>` walks the columns: CPU -> RSS -> GPU MEM.
        t.on_key(KeyCode::Char('>'));
        assert_eq!(t.sort, SortBy::Mem);
        t.on_key(KeyCode::F(6));
        assert_eq!(t.sort, SortBy::GpuMem);
        assert_eq!(pids(&t)[0], 11);
        // `/` filters on the command; q is text while typing, Enter keeps the filter.
        t.on_key(KeyCode::Char('/'));
        for c in "worq".chars() {
            assert_eq!(t.on_key(KeyCode::Char(c)), Key::Taken);
        }
        t.on_key(KeyCode::Backspace);
        t.on_key(KeyCode::Enter);
        assert_eq!(t.filter, "wor");
        assert_eq!(pids(&t), [11]);
        assert_eq!(t.on_key(KeyCode::Char('q')), Key::Ignored);
        t.on_key(KeyCode::Esc);
        assert_eq!(pids(&t).len(), 3);
    }

    #[test]
    fn refresh_reads_this_process_and_its_cpu_since_the_last_reading() {
        let me = std::process::id();
        let mut t = ProcTable::default();
        let gpu = BTreeMap::from([((me, 0), (Some(1e6), None))]);
        let start = Instant::now();
        t.refresh(&[me, u32::MAX - 1], &gpu, start);
        assert_eq!(t.rows.len(), 1, "a pid that does not exist is left out");
        let r = &t.rows[0];
        assert_eq!(r.pid, me);
        assert!(r.cpu_pct.is_none(), "no CPU figure before a second reading");
        assert!(r.rss_bytes.unwrap_or(0) > 0, "{r:?}");
        assert!(!r.command.is_empty());
        assert_eq!((r.gpu_mem_bytes, r.gpu_util_pct), (Some(1e6), None));
        // Burn some CPU, then read again.
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed().as_millis() < 200 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        t.refresh(&[me], &gpu, Instant::now());
        let cpu = t.rows[0].cpu_pct.unwrap();
        assert!(cpu > 10.0, "{cpu}");
    }

    #[test]
    fn a_process_on_two_gpus_has_a_row_per_gpu_with_that_gpus_figures() {
        let me = std::process::id();
        let mut t = ProcTable::default();
        let gpu = BTreeMap::from([
            ((me, 0), (Some(60e6), Some(78.0))),
            ((me, 1), (Some(46e6), Some(63.0))),
        ]);
        t.refresh(&[me], &gpu, Instant::now());
        let rows: Vec<(u32, Option<u32>, Option<f64>)> = t
            .rows
            .iter()
            .map(|r| (r.pid, r.gpu, r.gpu_mem_bytes))
            .collect();
        assert_eq!(
            rows,
            [(me, Some(0), Some(60e6)), (me, Some(1), Some(46e6))],
            "{:?}",
            t.rows
        );
    }
}
