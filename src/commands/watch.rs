//! `tune watch [--pid P | -- CMD ARGS...]`: the flags to a watch session (`crate::watch`).

use std::time::Duration;

use crate::commands::cli::{check_ms, WatchArgs};
use crate::error::Result;
use crate::watch::session::{default_out, run, Options, What};

pub fn main(args: &WatchArgs) -> Result<i32> {
    let interval = check_ms("interval", args.interval)?;
    if let Some(n) = args.steps {
        crate::limits::STEPS
            .check(n)
            .map_err(|e| crate::error::Error::Invalid(format!("watch: --steps {e}")))?;
    }
    if let Some(d) = args.duration {
        // A week, as a trial's limit: beyond it Duration arithmetic is not needed.
        if !(d > 0.0 && d <= 7.0 * 24.0 * 3600.0) {
            return Err(crate::error::Error::Invalid(format!(
                "watch: --duration {d}: must be more than 0 and at most 604800 seconds (one week)"
            )));
        }
    }
    let what = match args.pid {
        Some(p) => What::Pid(p),
        None => What::Command(args.command.clone()),
    };
    run(&Options {
        what,
        interval: Duration::from_millis(interval),
        json: args.json,
        tui: args.tui,
        out: args.out.clone().unwrap_or_else(default_out),
        steps: args.steps,
        duration: args.duration.map(Duration::from_secs_f64),
    })
}
