//! Issue #27, the DDP rendezvous: nobody outside the job can hold rank 0 open, grow its
//! memory or kill the job. A connector that dribbles, sends a line without end, speaks
//! another protocol or hangs up is dropped, and rank 0 goes on waiting for the real
//! ranks until its deadline; with `MASTER_ADDR` on this host's loopback, rank 0 listens
//! there only. Real `tune train` ranks over real sockets.

use crate::cli;

use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cli::{output_within, show, tune, wait_with_rusage};

/// Ranks run side by side on two cores: tests that start several must not overlap.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tune train` as `rank` of a world of two on 127.0.0.1:`port`.
fn rank(rank: usize, port: u16, timeout_s: &str) -> Command {
    let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tune-cache");
    let mut c = tune();
    c.args([
        "train",
        "--parallel",
        "ddp",
        "--model",
        "mlp",
        "--dataset",
        "synthetic",
        "--batch-size",
        "16",
        "--steps",
        "3",
        "--threads",
        "1",
        "--no-eval",
        "--cache-dir",
    ])
    .arg(cache)
    .env("RANK", rank.to_string())
    .env("WORLD_SIZE", "2")
    .env("LOCAL_RANK", rank.to_string())
    .env("MASTER_ADDR", "127.0.0.1")
    .env("MASTER_PORT", port.to_string())
    .env("TUNE_DIST_TIMEOUT", timeout_s);
    c
}

/// A connection to rank 0 once it listens.
fn connect(port: u16) -> TcpStream {
    let t = Instant::now();
    loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            return s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "rank 0 never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `f` on a connection to rank 0 in a thread that stops when `stop` is set.
fn stranger(
    port: u16,
    f: impl FnOnce(TcpStream, &AtomicBool) + Send + 'static,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let h = std::thread::spawn(move || f(connect(port), &s2));
    (stop, h)
}

/// Rank 0 of a world of two with a 4 s deadline, its rank 1 never coming, while `f`
/// plays a stranger on its port: rank 0's exit code, peak memory and run time.
fn rank_0_beside(
    f: impl FnOnce(TcpStream, &AtomicBool) + Send + 'static,
) -> (Option<i32>, u64, Duration) {
    let port = free_port();
    let child = rank(0, port, "4")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (stop, h) = stranger(port, f);
    let ended = wait_with_rusage(child, Duration::from_secs(45));
    stop.store(true, Ordering::Relaxed);
    h.join().unwrap();
    println!(
        "rank 0 ended with {:?} after {:?}, peak {} MiB",
        ended.0,
        ended.2,
        ended.1 >> 20
    );
    ended
}

#[test]
fn a_dribbling_connector_cannot_hold_rank_0_past_its_deadline() {
    let _g = serial();
    // One byte a second, never a newline, for a minute.
    let (code, _, took) = rank_0_beside(|mut s, stop| {
        for _ in 0..60 {
            if stop.load(Ordering::Relaxed) || s.write_all(b"{").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    assert_eq!(code, Some(1), "rank 0 must fail: its rank 1 never came");
    assert!(took < Duration::from_secs(20), "held for {took:?}");
}

#[test]
fn a_line_without_end_does_not_grow_rank_0() {
    let _g = serial();
    // 400 MB of one line, as fast as rank 0 takes it.
    let (code, peak, _) = rank_0_beside(|mut s, stop| {
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..400 {
            if stop.load(Ordering::Relaxed) || s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    assert_eq!(code, Some(1));
    assert!(peak < 120 << 20, "peak RSS {} MiB", peak >> 20);
}

#[test]
fn strangers_are_dropped_and_the_real_ranks_still_meet() {
    let _g = serial();
    let port = free_port();
    let r0 = rank(0, port, "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A port scanner (connects, hangs up), a web client, and one that sends a huge line.
    drop(connect(port));
    let mut web = connect(port);
    web.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut big = connect(port);
    let _ = big.write_all(&vec![b'x'; 4 << 20]);
    drop((web, big));
    let r1 = output_within(&mut rank(1, port, "30"), Duration::from_secs(60));
    let r0 = r0.wait_with_output().unwrap();
    assert_eq!(r1.status.code(), Some(0), "rank 1: {}", show(&r1));
    assert_eq!(r0.status.code(), Some(0), "rank 0: {}", show(&r0));
}

/// This host's address on the network, if it has one besides loopback.
fn lan_ip() -> Option<IpAddr> {
    let s = UdpSocket::bind("0.0.0.0:0").ok()?;
    // A UDP connect only picks the route: nothing is sent.
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn a_loopback_master_listens_on_loopback_only() {
    let Some(ip) = lan_ip() else {
        println!("skipping: this host has no address besides loopback");
        return;
    };
    let _g = serial();
    let port = free_port();
    let mut child = rank(0, port, "3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(connect(port));
    let reached = TcpStream::connect_timeout(&SocketAddr::new(ip, port), Duration::from_secs(2));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        reached.is_err(),
        "rank 0 with MASTER_ADDR=127.0.0.1 answers on {ip}:{port}"
    );
}
