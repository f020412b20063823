//! Executes a sweep (being written).

use crate::cli::SweepArgs;
use crate::error::{Error, Result};

pub fn main(_args: &SweepArgs) -> Result<i32> {
    Err(Error::Unavailable(
        "tune sweep: the executor is not built yet".into(),
    ))
}
