//! Rank 0 against whoever connects: where it listens, and reading from the network with
//! a bound on both time and size, whoever is sending.
//!
//! Rank 0 listens on `MASTER_ADDR` itself when that is an address of this host (a
//! loopback address, or an IP literal it owns), so a single-node job is not reachable
//! from the network at all; for a host name it listens on every interface, as
//! PyTorch's TCP store does: on a cluster the name may resolve to a loopback alias on
//! the master (Debian's 127.0.1.1) and to its network address on the other nodes, so
//! binding what it resolves to here could shut the other nodes out.
//!
//! Rank 0's port is reachable by anything on its network, so the rendezvous reads a
//! connector's first line without trusting it: every connection that arrived is polled
//! without blocking, a hello must be a whole line within `HELLO_WAIT` of connecting and
//! `HELLO_MAX` bytes, and one that is not (a dribbler, a line without end, a port scanner,
//! a web client) is dropped while rank 0 goes on waiting for the real ranks until its
//! deadline. Lines between ranks after that are read against a deadline too (not a
//! per-read timeout, which a sender resets with every byte) and a size cap.

use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Largest hello a rank sends: its settings (workload and knobs) are well under 4 KB.
const HELLO_MAX: usize = 64 << 10;
/// A rank sends its hello as soon as it has connected; one that has not within this
/// (while others are served) is not a rank.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// Connections waiting to say who they are; past this the oldest is dropped, so a flood
/// of strangers costs bounded memory.
const MAX_PENDING: usize = 64;
/// Largest line between ranks after the rendezvous (an answer, a step report): a
/// report of 64 devices is a few KB.
pub(super) const LINE_MAX: usize = 1 << 20;

pub(super) fn time_left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// Rank 0's listener on `port`: on `master` itself when it is an IP address of this host
/// or a loopback name, else on every interface.
pub(super) fn listen(master: &str, port: u16) -> std::io::Result<TcpListener> {
    let ip = match master.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) if master.eq_ignore_ascii_case("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Err(_) => return TcpListener::bind(("0.0.0.0", port)),
    };
    match TcpListener::bind((ip, port)) {
        // Not an address of this host (behind NAT, in a container): every interface.
        Err(e) if e.kind() == ErrorKind::AddrNotAvailable && !ip.is_loopback() => {
            let any = match ip {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            };
            TcpListener::bind((any, port))
        }
        r => r,
    }
}

/// How a line read ended, when it did not give a line.
#[derive(Debug)]
pub(super) enum LineError {
    Closed,
    TimedOut,
    TooLong,
    Io(std::io::Error),
}

/// One line (without its newline) from `r`, by `deadline` and at most `LINE_MAX` bytes.
pub(super) fn read_line_by(
    r: &mut BufReader<TcpStream>,
    deadline: Instant,
) -> Result<Vec<u8>, LineError> {
    let mut line = Vec::new();
    loop {
        let left = time_left(deadline).ok_or(LineError::TimedOut)?;
        r.get_ref()
            .set_read_timeout(Some(left))
            .map_err(LineError::Io)?;
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(LineError::TimedOut)
            }
            Err(e) => return Err(LineError::Io(e)),
        };
        if buf.is_empty() {
            return Err(LineError::Closed);
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > LINE_MAX {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if done {
            line.pop();
            return Ok(line);
        }
    }
}

/// A reader of one message that ends by `deadline` however the bytes trickle in: the
/// socket's timeout is re-set to the time left whenever that has fallen below half of
/// it (a syscall per read would cost the ring's throughput), so one message takes at
/// most twice its limit.
pub(super) struct Until<'a> {
    s: &'a TcpStream,
    deadline: Instant,
    set: Option<Duration>,
}

impl<'a> Until<'a> {
    pub(super) fn new(s: &'a TcpStream, limit: Duration) -> Until<'a> {
        Until {
            s,
            deadline: Instant::now() + limit,
            set: None,
        }
    }
}

impl Read for Until<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = time_left(self.deadline).ok_or(ErrorKind::TimedOut)?;
        if self.set.is_none_or(|set| left < set / 2) {
            self.s.set_read_timeout(Some(left))?;
            self.set = Some(left);
        }
        let mut s = self.s;
        s.read(buf)
    }
}

/// A connection that has not yet sent its whole hello line.
struct Pending {
    s: TcpStream,
    buf: Vec<u8>,
    since: Instant,
}

/// The connections rank 0 has accepted and not yet heard a hello from, and how many it
/// dropped (with the last reason, for the error when a real rank never comes).
#[derive(Default)]
pub(super) struct Arrivals {
    pending: Vec<Pending>,
    pub dropped: usize,
    pub last_drop: Option<String>,
}

enum Poll {
    Line(Vec<u8>),
    Waiting,
    Gone(&'static str),
}

impl Pending {
    fn poll(&mut self) -> Poll {
        let mut chunk = [0u8; 4096];
        loop {
            match (&self.s).read(&mut chunk) {
                Ok(0) => return Poll::Gone("hung up before saying who it is"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Poll::Waiting,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return Poll::Gone("broke its connection"),
            }
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                // A rank sends nothing after its hello until it is answered.
                if i + 1 != self.buf.len() {
                    return Poll::Gone("sent more than one line before the answer");
                }
                self.buf.truncate(i);
                return Poll::Line(std::mem::take(&mut self.buf));
            }
            if self.buf.len() > HELLO_MAX {
                return Poll::Gone("sent a line longer than any rank's hello");
            }
        }
    }
}

impl Arrivals {
    fn drop_one(&mut self, i: usize, why: &str) {
        self.pending.swap_remove(i);
        self.dropped += 1;
        self.last_drop = Some(why.to_string());
    }

    /// Counts a connection whose line the caller found is not a hello.
    pub(super) fn refuse(&mut self, why: String) {
        self.dropped += 1;
        self.last_drop = Some(why);
    }

    /// The next connection to send a whole line, with that line; `None` at the deadline.
    pub(super) fn next_hello(
        &mut self,
        l: &TcpListener,
        deadline: Instant,
    ) -> std::io::Result<Option<(TcpStream, Vec<u8>)>> {
        l.set_nonblocking(true)?;
        loop {
            loop {
                match l.accept() {
                    Ok((s, _)) => {
                        // One that cannot be polled is one fewer stranger.
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if self.pending.len() >= MAX_PENDING {
                            self.pending.remove(0);
                            self.dropped += 1;
                            self.last_drop = Some("too many connections at once".into());
                        }
                        self.pending.push(Pending {
                            s,
                            buf: Vec::new(),
                            since: Instant::now(),
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // A connection that broke before it was accepted.
                    Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                    Err(e) => return Err(e),
                }
            }
            let mut i = 0;
            while i < self.pending.len() {
                match self.pending[i].poll() {
                    Poll::Line(line) => {
                        let p = self.pending.swap_remove(i);
                        p.s.set_nonblocking(false)?;
                        return Ok(Some((p.s, line)));
                    }
                    Poll::Waiting if self.pending[i].since.elapsed() < HELLO_WAIT => i += 1,
                    Poll::Waiting => self.drop_one(i, "sent no whole line in time"),
                    Poll::Gone(why) => self.drop_one(i, why),
                }
            }
            if time_left(deadline).is_none() {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
