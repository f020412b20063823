//! The terminal dashboard. `dash` is `tune dash` and `tune sweep --tui`; `widgets` holds
//! what other screens share (the devices panel and the frame, for `tune watch --tui`);
//! `input` the input thread every screen runs; `terminal` owns the terminal's raw mode
//! and its restoration on every way out, panics included. `tune watch --tui` uses these
//! and nothing of `dash`.
//!
//! The shape follows ratatui's demo2 and bottom: one event enum, fed by an input thread
//! and a data thread; the app state drawn with `impl Widget for &App`; no file or device
//! I/O while drawing.

pub mod dash;
pub(crate) mod input;
pub(crate) mod terminal;
// Public for `widgets::buffer_text`, which only tests call.
pub mod widgets;
