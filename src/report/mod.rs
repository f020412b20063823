//! Reports (being written).

use crate::cli::ReportArgs;
use crate::error::{Error, Result};

pub fn main(_args: &ReportArgs) -> Result<i32> {
    Err(Error::Unavailable("tune report: not built yet".into()))
}
