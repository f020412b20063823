//! The sweep journal: one JSON record per line, appended and fsynced per record, so a
//! sweep killed at any moment loses at most the record being written. That torn record
//! can only be the last line; anything malformed before it means the file was edited or
//! damaged, and is an error rather than silently skipped data.
//!
//! One writer per journal: concurrent sweeps into the same folder are not coordinated.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Serialize;

use crate::error::{shown, Error, Result};
use crate::fsio::{parent_dir, read_limited, sync_dir, MAX_INPUT_BYTES};

/// The incomplete last line of a journal, left by a writer that died mid-record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornLine {
    /// 1-based line number.
    pub line: usize,
    /// Byte offset where the line starts: the journal's valid length.
    pub offset: u64,
    /// Length of the torn line in bytes (without a newline, if it had one).
    pub len: usize,
}

/// Records with their 1-based line numbers.
pub type Numbered<T> = Vec<(usize, T)>;

#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    repaired: Option<TornLine>,
}

/// One line of the file: its number, byte range and whether a newline ends it.
struct Line<'a> {
    number: usize,
    offset: usize,
    bytes: &'a [u8],
    terminated: bool,
}

fn lines(data: &[u8]) -> impl Iterator<Item = Line<'_>> {
    let mut offset = 0;
    let mut number = 0;
    std::iter::from_fn(move || {
        if offset >= data.len() {
            return None;
        }
        let rest = &data[offset..];
        let (bytes, terminated) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], true),
            None => (rest, false),
        };
        number += 1;
        let line = Line {
            number,
            offset,
            bytes,
            terminated,
        };
        offset += bytes.len() + usize::from(terminated);
        Some(line)
    })
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// The last non-blank line, if it is torn: unterminated, or not JSON at all. A complete
/// JSON line is never torn, even if it does not match the record type.
fn torn_tail(data: &[u8]) -> Option<TornLine> {
    let last = lines(data).filter(|l| !is_blank(l.bytes)).last()?;
    let complete = last.terminated && serde_json::from_slice::<IgnoredAny>(last.bytes).is_ok();
    (!complete).then_some(TornLine {
        line: last.number,
        offset: last.offset as u64,
        len: last.bytes.len(),
    })
}

/// Whether a journal's first line is a record: a JSON object, or, when it is the whole
/// journal and unfinished, the start of one (a sweep killed while writing its header).
/// An object of the wrong shape is refused later, by the record's own reader, before
/// anything is written.
fn is_record(line: &Line<'_>) -> bool {
    type Object = serde_json::Map<String, serde_json::Value>;
    if serde_json::from_slice::<Object>(line.bytes).is_ok() {
        return true;
    }
    let torn = !line.terminated;
    torn && line.bytes.trim_ascii_start().starts_with(b"{\"")
}

/// Opens an existing journal without following a symlink and without blocking on a
/// FIFO, and refuses anything but a regular file: `--resume` truncated a symlinked
/// user's file and hung on a FIFO (#27). `None` when there is no file.
fn open_existing(path: &Path, write: bool) -> Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let refuse = |what: &str| {
        Err(Error::Invalid(format!(
            "{}: {what}, not a journal tune wrote; tune reads and appends only a regular file it made: move it away or give another --out",
            shown(&path.display().to_string())
        )))
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        return refuse("a symbolic link");
    }
    if !ft.is_file() {
        return refuse(if ft.is_dir() {
            "a folder"
        } else {
            "not a regular file (a FIFO, socket or device)"
        });
    }
    let file = OpenOptions::new()
        .read(true)
        .append(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    // Checked again on the open descriptor: the name may have been swapped meanwhile.
    let same = file.metadata().map_err(|e| Error::io(path, e))?;
    if !same.is_file() {
        return refuse("not a regular file");
    }
    Ok(Some(file))
}

/// The whole journal, refusing one larger than any sweep writes (a journal replaced by
/// a device or a runaway file must not be read into memory whole), one that is not a
/// regular file, and one whose first line is not a journal record: a file that is not
/// tune's must never be repaired (truncated) or appended to.
fn read_file(path: &Path, file: &File) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(|e| Error::io(path, e))?;
    if data.len() as u64 > MAX_INPUT_BYTES {
        return Err(Error::format(
            path,
            format!(
                "larger than {} MiB: not a file tune wrote",
                MAX_INPUT_BYTES >> 20
            ),
        ));
    }
    if let Some(first) = lines(&data).find(|l| !is_blank(l.bytes)) {
        if !is_record(&first) {
            return Err(Error::Invalid(format!(
                "{}: not a tune journal (its first line is not a journal record); tune leaves it as it is: move it away or give another --out",
                shown(&path.display().to_string())
            )));
        }
    }
    Ok(data)
}

fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    match open_existing(path, false)? {
        Some(f) => read_file(path, &f),
        None => read_limited(path, MAX_INPUT_BYTES),
    }
}

impl Journal {
    /// Opens a journal for appending, creating it and its parent folders if needed. A
    /// torn last line is cut off first (see `repaired`), so the next record starts on a
    /// line of its own instead of being glued to the fragment.
    pub fn open(path: impl AsRef<Path>) -> Result<Journal> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = path.as_ref().to_path_buf();
        let dir = parent_dir(&path);
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let (file, data) = match open_existing(&path, true)? {
            Some(f) => {
                let data = read_file(&path, &f)?;
                (f, data)
            }
            None => {
                // A new file of its own: never one that appeared at this name meanwhile.
                let f = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .create_new(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)
                    .map_err(|e| Error::io(&path, e))?;
                sync_dir(dir)?;
                (f, Vec::new())
            }
        };
        let repaired = torn_tail(&data);
        if let Some(torn) = &repaired {
            file.set_len(torn.offset)
                .and_then(|()| file.sync_data())
                .map_err(|e| Error::io(&path, e))?;
        }
        Ok(Journal {
            path,
            file,
            repaired,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The torn line that `open` removed, if any, so the caller can say so.
    pub fn repaired(&self) -> Option<&TornLine> {
        self.repaired.as_ref()
    }

    /// Appends one record as a line and waits until it is on disk.
    pub fn append<T: Serialize>(&mut self, rec: &T) -> Result<()> {
        let mut line = serde_json::to_vec(rec)
            .map_err(|e| Error::format(&self.path, format!("cannot encode record: {e}")))?;
        line.push(b'\n');
        // One write call per record: with O_APPEND the record lands contiguously.
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Reads every record. A torn last line is skipped and returned; a malformed line
    /// anywhere else, or a complete line that is not a `T`, is a format error naming the
    /// line. Blank lines are ignored.
    pub fn read_all<T: DeserializeOwned>(
        path: impl AsRef<Path>,
    ) -> Result<(Vec<T>, Option<TornLine>)> {
        let (numbered, torn) = Self::read_numbered(path)?;
        Ok((numbered.into_iter().map(|(_, r)| r).collect(), torn))
    }

    /// [`Journal::read_all`] with each record's 1-based line number, for messages that
    /// point at a line.
    pub fn read_numbered<T: DeserializeOwned>(
        path: impl AsRef<Path>,
    ) -> Result<(Numbered<T>, Option<TornLine>)> {
        let path = path.as_ref();
        let data = read_bytes(path)?;
        let torn = torn_tail(&data);
        let end = torn.as_ref().map_or(data.len(), |t| t.offset as usize);
        let mut records = Vec::new();
        for line in lines(&data[..end]).filter(|l| !is_blank(l.bytes)) {
            let rec = serde_json::from_slice(line.bytes).map_err(|e| {
                Error::format(
                    path,
                    format!(
                        "line {}: invalid record: {}",
                        line.number,
                        shown(&e.to_string())
                    ),
                )
            })?;
            records.push((line.number, rec));
        }
        Ok((records, torn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Rec {
        id: String,
        value: f64,
    }

    fn rec(id: &str, value: f64) -> Rec {
        Rec {
            id: id.into(),
            value,
        }
    }

    #[test]
    fn append_and_read_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reports/quick/journal.jsonl");
        let mut j = Journal::open(&path).unwrap();
        assert!(j.repaired().is_none());
        j.append(&rec("a", 1.5)).unwrap();
        j.append(&rec("b", 2.0)).unwrap();
        drop(j);
        // Reopening appends after the existing records.
        Journal::open(&path)
            .unwrap()
            .append(&rec("c", 3.0))
            .unwrap();
        let (recs, torn) = Journal::read_all::<Rec>(&path).unwrap();
        assert_eq!(recs, vec![rec("a", 1.5), rec("b", 2.0), rec("c", 3.0)]);
        assert!(torn.is_none());
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn torn_last_line_is_skipped_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        // Unterminated fragment.
        fs::write(&path, "{\"id\":\"a\",\"value\":1.0}\n{\"id\":\"b\",\"va").unwrap();
        let (recs, torn) = Journal::read_all::<Rec>(&path).unwrap();
        assert_eq!(recs, vec![rec("a", 1.0)]);
        let torn = torn.unwrap();
        assert_eq!((torn.line, torn.offset, torn.len), (2, 23, 13));
        // A complete record without its newline is still torn: the writer died before
        // the newline, and appending would glue the next record to it.
        fs::write(
            &path,
            "{\"id\":\"a\",\"value\":1.0}\n{\"id\":\"b\",\"value\":2.0}",
        )
        .unwrap();
        let (recs, torn) = Journal::read_all::<Rec>(&path).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(torn.unwrap().line, 2);
        // A newline-terminated line that is not JSON (a partial write of zeros after a
        // crash) is torn too when it is the last one.
        fs::write(&path, "{\"id\":\"a\",\"value\":1.0}\n\0\0\0\n").unwrap();
        let (recs, torn) = Journal::read_all::<Rec>(&path).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(torn.unwrap().line, 2);
    }

    #[test]
    fn corrupt_middle_line_is_an_error_with_its_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        fs::write(
            &path,
            "{\"id\":\"a\",\"value\":1.0}\n{oops\n{\"id\":\"c\",\"value\":3.0}\n",
        )
        .unwrap();
        let e = Journal::read_all::<Rec>(&path).unwrap_err();
        assert!(matches!(e, Error::Format { .. }));
        let msg = e.to_string();
        assert!(msg.contains("j.jsonl") && msg.contains("line 2"), "{msg}");
        // A complete last line of the wrong shape is also an error, not a torn line.
        fs::write(&path, "{\"id\":\"a\",\"value\":1.0}\n{\"x\":1}\n").unwrap();
        let msg = Journal::read_all::<Rec>(&path).unwrap_err().to_string();
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn reopening_after_a_torn_line_truncates_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        fs::write(&path, "{\"id\":\"a\",\"value\":1.0}\n{\"id\":\"b\",").unwrap();
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(j.repaired().map(|t| t.line), Some(2));
        j.append(&rec("b", 2.0)).unwrap();
        let (recs, torn) = Journal::read_all::<Rec>(&path).unwrap();
        assert_eq!(recs, vec![rec("a", 1.0), rec("b", 2.0)]);
        assert!(torn.is_none());
    }

    /// `--resume` truncated a one-line file that is not JSON as a torn line, and
    /// followed a symlink into a user's file (#27).
    #[test]
    fn a_file_that_is_not_a_journal_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        fs::write(&path, "my notes\n").unwrap();
        let e = Journal::open(&path).unwrap_err();
        assert!(e.to_string().contains("not a tune journal"), "{e}");
        assert!(Journal::read_all::<Rec>(&path).is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "my notes\n");
        let user = dir.path().join("user.txt");
        fs::write(&user, "{\"id\":\"a\",\"value\":1.0}\n{\"id\":\"b\",").unwrap();
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&user, &link).unwrap();
        let e = Journal::open(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(fs::read_to_string(&user).unwrap().ends_with("\"b\","));
        // The start of a header, cut by a kill, is a torn journal, not a stranger's file.
        fs::write(&path, "{\"type\":\"hea").unwrap();
        let j = Journal::open(&path).unwrap();
        assert_eq!(j.repaired().map(|t| t.line), Some(1));
    }

    #[test]
    fn missing_journal_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = Journal::read_all::<Rec>(dir.path().join("none.jsonl")).unwrap_err();
        assert!(matches!(e, Error::Io { .. }));
    }
}
