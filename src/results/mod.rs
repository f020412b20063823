//! What a sweep measured: the trial record (one journal line per finished trial) and the
//! report model (= report.json's schema), and `build`, which summarises records into that
//! model (throughputs with confidence intervals, phase shares, the timeline) without judging
//! them; the advisor adds the judgement.

pub mod baselines;
pub(crate) mod build;
pub(crate) mod figures;
pub mod finding;
pub mod hardware;
pub mod model;
pub mod nodes;
pub(crate) mod notices;
pub mod record;
pub(crate) mod schema;
pub(crate) mod upgrade;

pub use finding::Finding;
pub use model::Report;
pub use record::{Record, Status, TrialRecord};
