//! Tests of the host sampler and the /proc parsers (kept apart so host.rs stays short).

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
