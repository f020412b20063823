//! The one error type of `tune-probes`.

use std::path::PathBuf;

/// Everything that can go wrong while probing this machine.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A file (usually under `/proc`) could not be read.
    #[error("could not read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Text that should follow a kernel format did not.
    #[error("could not parse {what}: {detail}")]
    Parse { what: &'static str, detail: String },

    /// NVML could not be initialised; the message is the user-facing notice.
    #[error("{0}")]
    NvmlUnavailable(String),

    /// NVML was initialised but a call that has no sensible "absent" meaning failed.
    #[error("NVML call {call} failed: {source}")]
    Nvml {
        call: &'static str,
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },

    /// The OS refused to start the sampling thread.
    #[error("could not start the sampling thread: {0}")]
    Spawn(#[source] std::io::Error),

    /// A sampler panicked on the sampling thread; the timeline up to then is kept.
    #[error("the sampling thread panicked; samples recorded before the panic are kept")]
    SamplerPanicked,
}

impl ProbeError {
    pub(crate) fn parse(what: &'static str, detail: impl Into<String>) -> Self {
        ProbeError::Parse {
            what,
            detail: detail.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ProbeError::Io {
            path: path.into(),
            source,
        }
    }
}
