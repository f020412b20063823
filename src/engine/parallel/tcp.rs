//! Multi-process DDP over TCP: the rendezvous, the ring's links and the reports' way
//! to rank 0.
//!
//! Rendezvous (PyTorch's `env://` with a TCP store, reduced to what DDP needs): rank 0
//! listens on `MASTER_PORT`; every other rank connects (retrying until the timeout, as
//! ranks start in any order) and sends one JSON line: its rank, the world size, its
//! compute threads, the address of its own ring listener, and its settings (workload
//! and knobs, tune's version). Rank 0 checks that the world sizes agree, that every
//! rank came exactly once and that every rank's settings equal its own, then answers
//! every rank with the ring's addresses, or with the one error, which every rank then
//! reports. Each rank connects to its successor's ring listener twice (gradients;
//! parameters, buffers and SyncBatchNorm) and accepts its predecessor's two
//! connections, so the ring runs the same algorithm, in the same order, as the
//! in-process one: the losses match bit for bit.
//!
//! The connection to rank 0 stays open: the other ranks send their per-step reports
//! over it (one JSON line each, then a final line with their memory), so rank 0 builds
//! the same summary as one process with N virtual devices.
//!
//! Nothing waits forever: connecting, every write and every read give up after the
//! timeout (a read by a deadline, which a trickle of bytes cannot push back, and of a
//! bounded size), and a peer's death closes its sockets, which ends every read on them.
//! A connector that is not a rank is dropped, never fatal (`guard`).

mod guard;

use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::clock::Phases;
use crate::engine::collective::PEER_STOPPED;
use crate::engine::device::MemSnapshot;
use crate::engine::parallel::collective::{Chunk, Ring};
use crate::engine::parallel::launch::Launch;
use crate::engine::parallel::summary::DeviceStep;
use crate::engine::parallel::StepReport;
use crate::error::{Error, Result};
use guard::{listen, read_line_by, time_left, Arrivals, LineError, Until};

/// Largest message a ring link accepts (a 25 MB bucket is far below): a corrupt or
/// foreign header must not allocate without bound.
const MAX_MSG_BYTES: u64 = 1 << 34;

fn timed_out(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// One rank's TCP links in a ring: a writer thread sends to the successor (so a send
/// never blocks the ring algorithm, as a channel's does not), reads come from the
/// predecessor on the calling thread.
pub(crate) struct TcpLink {
    rank: usize,
    next_rank: usize,
    prev_rank: usize,
    tx: Option<Sender<Chunk>>,
    writer: Option<JoinHandle<()>>,
    prev: Mutex<TcpStream>,
    timeout: Duration,
}

fn encode(c: &Chunk) -> Vec<u8> {
    let (tag, len, width) = match c {
        Chunk::F32(v) => (0u8, v.len(), 4),
        Chunk::F64(v) => (1u8, v.len(), 8),
    };
    let mut out = Vec::with_capacity(9 + len * width);
    out.push(tag);
    out.extend_from_slice(&(len as u64).to_le_bytes());
    match c {
        Chunk::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Chunk::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
    out
}

impl TcpLink {
    fn new(
        rank: usize,
        world: usize,
        mut next: TcpStream,
        prev: TcpStream,
        timeout: Duration,
    ) -> Result<TcpLink> {
        let (tx, rx) = channel::<Chunk>();
        let writer = std::thread::Builder::new()
            .name(format!("tune-ring-tx{rank}"))
            .spawn(move || {
                for c in rx {
                    // A failed write means the successor is gone; its reads, and ours
                    // from the predecessor, report that.
                    if next.write_all(&encode(&c)).is_err() {
                        let _ = next.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                }
            })
            .map_err(|e| Error::Runtime(format!("cannot start rank {rank}'s ring writer: {e}")))?;
        Ok(TcpLink {
            rank,
            next_rank: (rank + 1) % world,
            prev_rank: (rank + world - 1) % world,
            tx: Some(tx),
            writer: Some(writer),
            prev: Mutex::new(prev),
            timeout,
        })
    }

    fn gone(&self, peer: usize, what: &str) -> Error {
        Error::Runtime(format!(
            "{PEER_STOPPED} (rank {}: rank {peer} {what}; it stopped or was killed)",
            self.rank
        ))
    }

    pub(crate) fn send(&self, c: Chunk) -> Result<()> {
        match &self.tx {
            Some(tx) => tx
                .send(c)
                .map_err(|_| self.gone(self.next_rank, "closed its connection")),
            None => Err(self.gone(self.next_rank, "closed its connection")),
        }
    }

    pub(crate) fn recv(&self) -> Result<Chunk> {
        let s = self
            .prev
            .lock()
            .map_err(|_| self.gone(self.prev_rank, "closed its connection"))?;
        let map = |e: std::io::Error| {
            if timed_out(&e) {
                Error::Runtime(format!(
                    "collective: rank {} got nothing from rank {} for {:.0} s \
                     (TUNE_DIST_TIMEOUT): that rank hangs or is far behind",
                    self.rank,
                    self.prev_rank,
                    self.timeout.as_secs_f64()
                ))
            } else {
                self.gone(self.prev_rank, "closed its connection")
            }
        };
        let mut from = Until::new(&s, self.timeout);
        let mut head = [0u8; 9];
        from.read_exact(&mut head).map_err(map)?;
        let mut len8 = [0u8; 8];
        len8.copy_from_slice(&head[1..]);
        let len = u64::from_le_bytes(len8);
        let width = match head[0] {
            0 => 4,
            1 => 8,
            t => {
                return Err(Error::Runtime(format!(
                    "collective: rank {} got a message of unknown type {t} from rank {}",
                    self.rank, self.prev_rank
                )))
            }
        };
        if len.saturating_mul(width) > MAX_MSG_BYTES {
            return Err(Error::Runtime(format!(
                "collective: rank {} got a message of {len} values from rank {}: too large",
                self.rank, self.prev_rank
            )));
        }
        // Grown as the bytes come, so a header that lies costs nothing up front.
        let mut bytes = Vec::new();
        (&mut from)
            .take(len * width)
            .read_to_end(&mut bytes)
            .map_err(map)?;
        if bytes.len() as u64 != len * width {
            return Err(self.gone(self.prev_rank, "closed its connection"));
        }
        Ok(if width == 4 {
            Chunk::F32(
                bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            )
        } else {
            Chunk::F64(
                bytes
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect(),
            )
        })
    }
}

impl Drop for TcpLink {
    /// Sends what is queued before the process may exit: the successor may still be
    /// waiting for this rank's last message.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// What a rank tells rank 0 when it arrives.
#[derive(Serialize, Deserialize)]
struct Hello {
    rank: usize,
    world: usize,
    threads: usize,
    ring: SocketAddr,
    settings: Value,
}

/// Rank 0's answer.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Answer {
    Ok {
        rings: Vec<SocketAddr>,
        threads: Vec<usize>,
    },
    Error {
        msg: String,
        bad_input: bool,
    },
}

/// A line from a rank to rank 0 after the rendezvous.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Step(WireReport),
    Done(MemSnapshot),
}

#[derive(Serialize, Deserialize)]
struct WireReport {
    rank: usize,
    step: usize,
    /// The loss's bits: the summary's losses must match one process's to the bit.
    loss_bits: u32,
    samples: usize,
    step_s: f64,
    phases: Phases,
    mem_after: MemSnapshot,
    devices: Vec<DeviceStep>,
    digest: Option<u64>,
}

/// This process's part of the job once the rendezvous is done.
pub(crate) struct Joined {
    pub rank: usize,
    pub world: usize,
    pub grad: Ring,
    pub sync: Ring,
    /// Compute threads per rank.
    pub threads: Vec<usize>,
    pub role: Role,
}

pub(crate) enum Role {
    /// Rank 0: one connection per other rank, index = rank - 1.
    Root(Vec<TcpStream>),
    /// Another rank: its connection to rank 0.
    Member(TcpStream),
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::Runtime(format!("{what}: {e}"))
}

fn write_line<T: Serialize>(s: &mut TcpStream, v: &T) -> Result<()> {
    let mut line = serde_json::to_vec(v).map_err(|e| Error::Runtime(format!("rendezvous: {e}")))?;
    line.push(b'\n');
    s.write_all(&line)
        .map_err(io_err("rendezvous: cannot send".into()))
}

/// One line from `from`, by `deadline`, parsed.
fn read_line<T: for<'a> Deserialize<'a>>(
    r: &mut BufReader<TcpStream>,
    deadline: Instant,
    from: &str,
) -> Result<T> {
    let line = read_line_by(r, deadline).map_err(|e| {
        Error::Runtime(match e {
            LineError::Closed => format!("rendezvous: {from} closed the connection"),
            LineError::TimedOut => {
                format!("rendezvous: no answer from {from} in time (TUNE_DIST_TIMEOUT)")
            }
            LineError::TooLong => format!(
                "rendezvous: {from} sent a line longer than {} bytes",
                guard::LINE_MAX
            ),
            LineError::Io(e) => format!("rendezvous: reading from {from}: {e}"),
        })
    })?;
    serde_json::from_slice(&line).map_err(|e| {
        Error::Runtime(format!(
            "rendezvous: {from} sent something that is not tune's rendezvous ({e}): is \
             another program using MASTER_PORT?"
        ))
    })
}

/// Where `settings` and `other` differ, as `key: A on rank 0, B on rank r` lines.
fn differences(mine: &Value, other: &Value, rank: usize) -> Vec<String> {
    let mut out = Vec::new();
    let (Value::Object(a), Value::Object(b)) = (mine, other) else {
        return vec![format!("{mine} on rank 0, {other} on rank {rank}")];
    };
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        let (x, y) = (a.get(key), b.get(key));
        if x == y {
            continue;
        }
        match (x, y) {
            (Some(x @ Value::Object(_)), Some(y @ Value::Object(_))) => {
                out.extend(
                    differences(x, y, rank)
                        .into_iter()
                        .map(|d| format!("{key}.{d}")),
                );
            }
            _ => {
                let show = |v: Option<&Value>| v.map_or("(absent)".into(), Value::to_string);
                out.push(format!(
                    "{key}: {} on rank 0, {} on rank {rank}",
                    show(x),
                    show(y)
                ));
            }
        }
    }
    out
}

/// Accepts one connection before `deadline`.
fn accept_by(l: &TcpListener, deadline: Instant) -> std::io::Result<Option<TcpStream>> {
    l.set_nonblocking(true)?;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(Some(s));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if time_left(deadline).is_none() {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

fn prepare(s: &TcpStream, timeout: Duration) -> std::io::Result<()> {
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)
}

/// Runs the rendezvous and connects the ring.
pub(crate) fn join(l: &Launch, threads: usize, settings: Value) -> Result<Joined> {
    let deadline = Instant::now() + l.timeout;
    let master = format!("{}:{}", l.master, l.port);
    let (role, ring_listener, rings, all_threads) = if l.rank == 0 {
        root(l, threads, settings, deadline, &master)?
    } else {
        member(l, threads, settings, deadline, &master)?
    };
    // Each rank connects twice to its successor and accepts its predecessor's two.
    let next = rings[(l.rank + 1) % l.world];
    let mut outs = Vec::with_capacity(2);
    for tag in 0..2u8 {
        let mut s = TcpStream::connect_timeout(&next, l.timeout).map_err(io_err(format!(
            "ring: rank {} cannot connect to rank {} at {next}",
            l.rank,
            (l.rank + 1) % l.world
        )))?;
        prepare(&s, l.timeout).map_err(io_err("ring".into()))?;
        s.write_all(&[tag])
            .map_err(io_err(format!("ring: rank {} cannot send", l.rank)))?;
        outs.push(s);
    }
    let mut ins: [Option<TcpStream>; 2] = [None, None];
    for _ in 0..2 {
        let s = accept_by(&ring_listener, deadline)
            .map_err(io_err("ring: accept".into()))?
            .ok_or_else(|| {
                Error::Runtime(format!(
                    "ring: rank {} never heard from rank {} (TUNE_DIST_TIMEOUT)",
                    l.rank,
                    (l.rank + l.world - 1) % l.world
                ))
            })?;
        prepare(&s, l.timeout).map_err(io_err("ring".into()))?;
        let mut tag = [0u8; 1];
        (&s).read_exact(&mut tag).map_err(io_err(format!(
            "ring: rank {} reading a link's tag",
            l.rank
        )))?;
        match ins.get_mut(usize::from(tag[0])) {
            Some(slot @ None) => *slot = Some(s),
            _ => {
                return Err(Error::Runtime(format!(
                    "ring: rank {} got an unexpected connection (tag {})",
                    l.rank, tag[0]
                )))
            }
        }
    }
    let [Some(grad_in), Some(sync_in)] = ins else {
        return Err(Error::Runtime("ring: a link is missing".into()));
    };
    let mut outs = outs.into_iter();
    let (Some(grad_out), Some(sync_out)) = (outs.next(), outs.next()) else {
        return Err(Error::Runtime("ring: a link is missing".into()));
    };
    let grad = TcpLink::new(l.rank, l.world, grad_out, grad_in, l.timeout)?;
    let sync = TcpLink::new(l.rank, l.world, sync_out, sync_in, l.timeout)?;
    Ok(Joined {
        rank: l.rank,
        world: l.world,
        grad: Ring::tcp(l.rank, l.world, grad),
        sync: Ring::tcp(l.rank, l.world, sync),
        threads: all_threads,
        role,
    })
}

type Rendezvous = (Role, TcpListener, Vec<SocketAddr>, Vec<usize>);

fn ring_listener(ip: IpAddr) -> Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind((ip, 0)).map_err(io_err(format!("ring: cannot listen on {ip}")))?;
    let addr = l.local_addr().map_err(io_err("ring".into()))?;
    Ok((l, addr))
}

fn root(
    l: &Launch,
    threads: usize,
    settings: Value,
    deadline: Instant,
    master: &str,
) -> Result<Rendezvous> {
    let listener = listen(&l.master, l.port).map_err(io_err(format!(
        "rendezvous: rank 0 cannot listen on port {} (MASTER_PORT, or TUNE_DIST_PORT)",
        l.port
    )))?;
    let mut arrivals = Arrivals::default();
    let mut peers: Vec<Option<(BufReader<TcpStream>, Hello)>> =
        (1..l.world).map(|_| None).collect();
    let mut problems = Vec::new();
    // Settings that disagree are the user's input (exit 2); a rank that never came or
    // spoke nonsense is the run's failure.
    let mut bad_input = true;
    let mut arrived = 0;
    while arrived + 1 < l.world {
        let Some((s, line)) = arrivals
            .next_hello(&listener, deadline)
            .map_err(io_err("rendezvous: accept".into()))?
        else {
            let missing: Vec<String> = peers
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_none())
                .map(|(i, _)| (i + 1).to_string())
                .collect();
            bad_input = false;
            let strangers = match (&arrivals.last_drop, arrivals.dropped) {
                (Some(why), n) => {
                    format!("; {n} other connection(s) were dropped as not tune's (the last {why})")
                }
                (None, _) => String::new(),
            };
            problems.push(format!(
                "rank(s) {} never joined rank 0 at {master} within {:.0} s (TUNE_DIST_TIMEOUT){strangers}",
                missing.join(", "),
                l.timeout.as_secs_f64()
            ));
            break;
        };
        // Whatever is not a hello is a stranger (a scanner, another program on the
        // port): dropped, and rank 0 goes on waiting for its ranks.
        let h: Hello = match serde_json::from_slice(&line) {
            Ok(h) => h,
            Err(e) => {
                arrivals.refuse(format!("sent something that is not a rank's hello: {e}"));
                continue;
            }
        };
        prepare(&s, l.timeout).map_err(io_err("rendezvous".into()))?;
        let mut r = BufReader::new(s);
        if h.world != l.world {
            problems.push(format!(
                "rank {} says the world size is {}, rank 0 says {}",
                h.rank, h.world, l.world
            ));
        }
        let diffs = differences(&settings, &h.settings, h.rank);
        if !diffs.is_empty() {
            problems.push(format!(
                "rank {}'s settings differ from rank 0's: {}",
                h.rank,
                diffs.join("; ")
            ));
        }
        match h.rank.checked_sub(1).and_then(|i| peers.get_mut(i)) {
            Some(slot @ None) => {
                *slot = Some((r, h));
                arrived += 1;
            }
            Some(Some(_)) => {
                problems.push(format!("two processes say they are rank {}", h.rank));
                // Still answer this one below.
                let _ = write_line(
                    r.get_mut(),
                    &Answer::Error {
                        msg: String::new(),
                        bad_input: true,
                    },
                );
            }
            None => problems.push(format!(
                "a process says it is rank {} of a world of {}",
                h.rank, l.world
            )),
        }
        if !problems.is_empty() {
            break;
        }
    }
    let (my_listener, my_addr) = if problems.is_empty() {
        // The address the others reach rank 0 by is the one they connected to.
        let ip = peers
            .iter()
            .flatten()
            .find_map(|(r, _)| r.get_ref().local_addr().ok())
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| a.ip());
        ring_listener(ip)?
    } else {
        ring_listener(IpAddr::V4(Ipv4Addr::LOCALHOST))?
    };
    if !problems.is_empty() {
        let msg = format!("distributed rendezvous failed: {}", problems.join("; "));
        for (r, _) in peers.iter_mut().flatten() {
            let answer = Answer::Error {
                msg: msg.clone(),
                bad_input,
            };
            let _ = write_line(r.get_mut(), &answer);
        }
        return Err(if bad_input {
            Error::Invalid(msg)
        } else {
            Error::Runtime(msg)
        });
    }
    let mut rings = vec![my_addr];
    let mut all_threads = vec![threads];
    let mut streams = Vec::with_capacity(peers.len());
    for (r, h) in peers.into_iter().flatten() {
        rings.push(h.ring);
        all_threads.push(h.threads);
        streams.push(r.into_inner());
    }
    let answer = Answer::Ok {
        rings: rings.clone(),
        threads: all_threads.clone(),
    };
    for s in &mut streams {
        write_line(s, &answer)?;
    }
    Ok((Role::Root(streams), my_listener, rings, all_threads))
}

fn member(
    l: &Launch,
    threads: usize,
    settings: Value,
    deadline: Instant,
    master: &str,
) -> Result<Rendezvous> {
    let addrs: Vec<SocketAddr> = master
        .to_socket_addrs()
        .map_err(|e| Error::Invalid(format!("cannot resolve MASTER_ADDR {master}: {e}")))?
        .collect();
    let s = loop {
        let mut last_err = None;
        let mut got = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_millis(500)) {
                Ok(s) => {
                    got = Some(s);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        if let Some(s) = got {
            break s;
        }
        if time_left(deadline).is_none() {
            let why = last_err.map_or("no address".to_string(), |e| e.to_string());
            return Err(Error::Runtime(format!(
                "rendezvous: rank {} cannot reach rank 0 at {master} within {:.0} s \
                 (TUNE_DIST_TIMEOUT): {why}",
                l.rank,
                l.timeout.as_secs_f64()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    prepare(&s, l.timeout).map_err(io_err("rendezvous".into()))?;
    let ip = s.local_addr().map_err(io_err("rendezvous".into()))?.ip();
    let (listener, addr) = ring_listener(ip)?;
    let mut r = BufReader::new(s);
    write_line(
        r.get_mut(),
        &Hello {
            rank: l.rank,
            world: l.world,
            threads,
            ring: addr,
            settings,
        },
    )?;
    // Rank 0 answers once every rank has come, which may take up to the whole timeout.
    let answer = read_line::<Answer>(&mut r, deadline + Duration::from_secs(5), "rank 0")?;
    match answer {
        Answer::Error { msg, .. } if msg.is_empty() => Err(Error::Invalid(format!(
            "distributed rendezvous failed: another process is also rank {}",
            l.rank
        ))),
        Answer::Error { msg, bad_input } if bad_input => Err(Error::Invalid(msg)),
        Answer::Error { msg, .. } => Err(Error::Runtime(msg)),
        Answer::Ok { rings, threads } if rings.len() == l.world && threads.len() == l.world => {
            let s = r.into_inner();
            s.set_read_timeout(Some(l.timeout))
                .map_err(io_err("rendezvous".into()))?;
            Ok((Role::Member(s), listener, rings, threads))
        }
        Answer::Ok { .. } => Err(Error::Runtime(
            "rendezvous: rank 0's answer does not match the world size".into(),
        )),
    }
}

/// Sends one step's report to rank 0.
pub(crate) fn send_report(s: &mut TcpStream, r: &StepReport) -> Result<()> {
    let w = WireReport {
        rank: r.rank,
        step: r.step,
        loss_bits: r.loss.to_bits(),
        samples: r.samples,
        step_s: r.step_s,
        phases: r.phases,
        mem_after: r.mem_after.clone(),
        devices: r.devices.clone(),
        digest: r.digest,
    };
    write_line(s, &Line::Step(w)).map_err(|_| {
        Error::Runtime(format!(
            "ddp: rank {} lost its connection to rank 0",
            r.rank
        ))
    })
}

/// Tells rank 0 this rank finished, with its device's memory.
pub(crate) fn send_done(s: &mut TcpStream, rank: usize, mem: &MemSnapshot) -> Result<()> {
    write_line(s, &Line::Done(mem.clone()))
        .map_err(|_| Error::Runtime(format!("ddp: rank {rank} lost its connection to rank 0")))
}

/// Rank 0's reader of one rank's reports: forwards each to the collector and returns the
/// rank's final memory, or an error when the rank went away before finishing.
pub(crate) fn forward_reports(
    s: TcpStream,
    rank: usize,
    tx: Sender<StepReport>,
) -> Result<MemSnapshot> {
    // Each report by the limit the connection was given (TUNE_DIST_TIMEOUT).
    let limit = s
        .read_timeout()
        .ok()
        .flatten()
        .unwrap_or(crate::engine::parallel::launch::DEFAULT_TIMEOUT);
    let mut r = BufReader::new(s);
    let from = format!("rank {rank}");
    loop {
        let line: Line = read_line(&mut r, Instant::now() + limit, &from).map_err(|e| {
            Error::Runtime(format!(
                "{PEER_STOPPED} (rank {rank} went away before finishing; it stopped or was \
                 killed: {e})"
            ))
        })?;
        match line {
            Line::Step(w) => {
                let rep = StepReport {
                    rank: w.rank,
                    step: w.step,
                    loss: f32::from_bits(w.loss_bits),
                    samples: w.samples,
                    step_s: w.step_s,
                    phases: w.phases,
                    mem_after: w.mem_after,
                    devices: w.devices,
                    digest: w.digest,
                };
                // The collector stops listening only when the run failed.
                if tx.send(rep).is_err() {
                    return Err(Error::Runtime(format!("{PEER_STOPPED} (rank 0 stopped)")));
                }
            }
            Line::Done(m) => return Ok(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_name_the_knob() {
        let a = json!({"knobs": {"batch_size": 64, "amp": "off"}, "version": "1"});
        let b = json!({"knobs": {"batch_size": 32, "amp": "off"}, "version": "1"});
        let d = differences(&a, &b, 1);
        assert_eq!(
            d,
            vec!["knobs.batch_size: 64 on rank 0, 32 on rank 1".to_string()]
        );
        assert!(differences(&a, &a, 1).is_empty());
    }

    #[test]
    fn chunks_survive_the_wire() {
        let c = Chunk::F32(vec![1.5, -0.0, f32::MIN_POSITIVE, 3.25e7]);
        let bytes = encode(&c);
        assert_eq!(bytes.len(), 9 + 16);
        assert_eq!(bytes[0], 0);
        assert_eq!(u64::from_le_bytes(bytes[1..9].try_into().unwrap()), 4);
    }
}
