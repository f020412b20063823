//! Reading a trial's output: bytes, not text, and bounded.
//!
//! A command may print anything: invalid UTF-8, hundreds of megabytes, one endless line.
//! Each line is decoded lossily, cut at a length limit, and handed to a callback that
//! keeps only what the trial needs (metric values, the result line, a short tail), so
//! reading never stops early and memory does not grow with the output.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex, MutexGuard};

/// Characters of one stderr line kept for an error message.
const TAIL_LINE_CHARS: usize = 300;

/// Reads `r` to EOF on a thread, calling `on_line` with each line (at most `max_line`
/// bytes of it). The receiver gets `()` when the stream ended; a reader blocked on a pipe
/// some escaped process still holds can be abandoned, its callback's state stays usable.
pub(crate) fn spawn_reader<R, F>(mut r: R, max_line: usize, mut on_line: F) -> Receiver<()>
where
    R: Read + Send + 'static,
    F: FnMut(&str) + Send + 'static,
{
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut line: Vec<u8> = Vec::new();
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let mut chunk = &buf[..n];
            while let Some(nl) = chunk.iter().position(|&b| b == b'\n') {
                take(&mut line, &chunk[..nl], max_line);
                on_line(&String::from_utf8_lossy(&line));
                line.clear();
                chunk = &chunk[nl + 1..];
            }
            take(&mut line, chunk, max_line);
        }
        if !line.is_empty() {
            on_line(&String::from_utf8_lossy(&line));
        }
        let _ = tx.send(());
    });
    rx
}

/// Appends what still fits under `max` bytes; the rest of an overlong line is dropped.
fn take(line: &mut Vec<u8>, bytes: &[u8], max: usize) {
    let room = max.saturating_sub(line.len());
    line.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

/// The last lines of a stream, each shortened, for error messages.
#[derive(Clone, Default)]
pub(crate) struct Tail {
    lines: VecDeque<String>,
    keep: usize,
}

impl Tail {
    pub(crate) fn new(keep: usize) -> Tail {
        Tail {
            lines: VecDeque::new(),
            keep,
        }
    }

    pub(crate) fn push(&mut self, line: &str) {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            return;
        }
        let mut s: String = line.chars().take(TAIL_LINE_CHARS).collect();
        if s.len() < line.len() {
            s.push('…');
        }
        self.lines.push_back(s);
        while self.lines.len() > self.keep {
            self.lines.pop_front();
        }
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.iter().cloned().collect()
    }
}

/// Shared state between a reader thread and the trial.
pub(crate) type Shared<T> = Arc<Mutex<T>>;

/// Locks, recovering the data if a reader panicked while holding the lock.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_bounded_lines() {
        let mut input = b"a\xffb\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 1000));
        input.extend(b"\nlast");
        let seen: Shared<Vec<String>> = Arc::default();
        let s = seen.clone();
        let rx = spawn_reader(std::io::Cursor::new(input), 10, move |l| {
            lock(&s).push(l.to_string())
        });
        rx.recv().unwrap();
        let seen = lock(&seen).clone();
        assert_eq!(seen, vec!["a\u{fffd}b", "xxxxxxxxxx", "last"]);
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let mut t = Tail::new(2);
        for l in ["1", "", "2", "3"] {
            t.push(l);
        }
        assert_eq!(t.lines(), vec!["2", "3"]);
    }
}
