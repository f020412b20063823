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

    pub fn format(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        Error::Format {
            path: path.into(),
            msg: msg.into(),
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

/// Longest echo of a user's value in a message, in characters.
const SHOWN_MAX_CHARS: usize = 200;

/// A user's value as it may appear in a one-line message: control characters escaped
/// (`\x1b`, `\0`, `\n`) so a value cannot move the cursor, recolour or split the line,
/// and cut to about 200 characters with the full length in bytes, so a 10 MB name
/// cannot flood the terminal.
pub fn shown(value: &str) -> String {
    let mut out = String::new();
    for (i, c) in value.chars().enumerate() {
        if i >= SHOWN_MAX_CHARS {
            out.push_str(&format!("… ({} bytes)", value.len()));
            return out;
        }
        match c {
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else {
                    out.push_str(&format!("\\u{{{n:x}}}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn shown_escapes_control_characters_and_cuts_long_values() {
        assert_eq!(shown("a\u{1b}[31mb\0c\nd"), "a\\x1b[31mb\\0c\\nd");
        assert_eq!(shown("\u{9b}"), "\\x9b");
        let long = "x".repeat(10 << 20);
        let s = shown(&long);
        assert!(s.len() < 300, "{}", s.len());
        assert!(s.ends_with(&format!("… ({} bytes)", 10 << 20)), "{s}");
        assert_eq!(shown("plain"), "plain");
    }
}
