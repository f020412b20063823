//! Helpers shared by integration tests (each test file includes this with `mod common;`).

pub mod tmux;
