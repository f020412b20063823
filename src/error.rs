//! The crate's one error type. Every variant says what went wrong and where,
//! so the CLI can print it as a single line.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user asked for something that cannot be: a bad flag value, an unknown model,
    /// a zero batch size. Maps to exit code 2.
    #[error("{0}")]
    Invalid(String),

    /// An input file could not be read (missing, unreadable): the user's input, exit 2.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// tune could not write one of its outputs (full disk, read-only folder): the run
    /// failed, exit 1, never mistaken for bad input.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A sweep spec is malformed; points at the offending place in the file.
    #[error("{}:{line}:{col}: {msg}", path.display())]
    Spec {
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// 1-based, in characters.
        col: usize,
        msg: String,
    },

    /// A data file exists but its contents are malformed (truncated idx, bad magic, bad PNG).
    #[error("{path}: {msg}")]
    Format { path: PathBuf, msg: String },

    /// Tensor shapes that do not fit together: a bug in a model definition, not user input.
    #[error("shape mismatch in {op}: {msg}")]
    Shape { op: &'static str, msg: String },

    /// A requested device or backend is not available on this machine.
    #[error("{0}")]
    Unavailable(String),

    /// Training produced a non-finite loss.
    #[error("training diverged at step {step}: loss is {loss}")]
    Diverged { step: usize, loss: f32 },

    /// Anything else that went wrong at run time (a worker thread died, a channel closed).
    #[error("{0}")]
    Runtime(String),

    /// The samplers could not run (the sampling thread did not start or panicked).
    #[error("probes: {0}")]
    Probe(#[from] tune_probes::ProbeError),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub fn write(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Write {
            path: path.into(),
            source,
        }
    }

    /// The message is made one inert line here, not at each call: a field the file
    /// supplied (a schema version, a label) may carry a line break that a caller quoted
    /// verbatim (the report fuzz test found `schema_version` "1.1|a\n# heading").
    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            msg: one_line(&msg.into()),
        }
    }

    /// True when the error is the user's input rather than the run itself (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Error::Invalid(_)
                | Error::Io { .. }
                | Error::Spec { .. }
                | Error::Format { .. }
                | Error::Unavailable(_)
        )
    }
}

/// Longest stretch of a value an error line shows before cutting it.
const SHOWN_CHARS: usize = 300;

/// Control and bidi-override characters would move the cursor, recolour or clear the
/// terminal, or reorder what the reader sees.
fn hostile(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        if hostile(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
}

/// A user-supplied value as it may appear in a message: control characters escaped
/// (`\u{1b}`, `\n`), and cut to its first 300 characters with its full size appended.
pub fn shown(value: &str) -> String {
    let mut out = String::new();
    match value.char_indices().nth(SHOWN_CHARS) {
        Some((cut, _)) => {
            escape_into(&mut out, &value[..cut]);
            out.push_str(&format!("… ({} bytes)", value.len()));
        }
        None => escape_into(&mut out, value),
    }
    out
}

/// Text for the terminal (a table of labels and reasons that came from reports or
/// commands): line breaks kept, every other control or bidi-override character escaped,
/// so a hostile label cannot move the cursor or clear the screen.
pub fn inert(text: &str) -> String {
    text.split('\n')
        .map(|l| {
            let mut out = String::new();
            escape_into(&mut out, l);
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An error message as the one line `error: ...` prints: every space-separated part
/// passed through [`shown`], so a message that embeds a 10 MB name or an escape
/// sequence, from whichever path it came, stays one short, inert line.
pub fn one_line(msg: &str) -> String {
    msg.split(' ').map(shown).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_escapes_control_characters_and_cuts_long_values() {
        assert_eq!(shown("a\u{1b}[2Jb\0c\nd"), "a\\u{1b}[2Jb\\u{0}c\\nd");
        assert_eq!(shown("x\u{202e}y"), "x\\u{202e}y");
        let long = "é".repeat(1000);
        let s = shown(&long);
        assert!(s.ends_with("… (2000 bytes)"), "{s}");
        assert_eq!(s.chars().count(), 300 + "… (2000 bytes)".chars().count());
        assert_eq!(shown("plain text: ok"), "plain text: ok");
        assert_eq!(inert("a\u{1b}[2J\nb\0"), "a\\u{1b}[2J\nb\\u{0}");
        let line = one_line(&format!("bad name {}: use a shorter one", "n".repeat(5000)));
        assert!(
            line.starts_with("bad name nnn") && line.ends_with("(5001 bytes) use a shorter one"),
            "{line}"
        );
    }
}
