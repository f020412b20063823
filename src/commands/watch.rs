//! `tune watch [--pid P | -- CMD ARGS...]`: the flags to a watch session (`crate::watch`).

use std::time::Duration;

use crate::commands::cli::{check_ms, WatchArgs};
use crate::error::Result;
use crate::watch::session::{default_out, run, Options, What};

pub fn main(args: &WatchArgs) -> Result<i32> {
    let interval = check_ms("interval", args.interval)?;
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
    })
}
