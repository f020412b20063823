//! The schema's version, a leaf that the report model, the journal's records and their
//! upgrade all read (`model` re-exports it under its old path).

/// 2.0: a repeat is the engine's `RunSummary` and a trial's `devices` are its
/// `DeviceSummary` (1.x files are converted on read, `upgrade`).
pub const SCHEMA_VERSION: &str = "2.0";
