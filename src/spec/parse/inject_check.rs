//! `[workload.python]` sweeps only the knobs tune's PyTorch hooks can apply inside an
//! unmodified script: any other knob would run trials identical to the baseline under
//! another name, and its "effect" would be noise.

use toml::de::DeTable;

use super::{entries, Cx, Metric, Workload};
use crate::error::Result;

impl Cx<'_> {
    pub(super) fn check_injectable(&self, doc: &DeTable<'_>, workload: &Workload) -> Result<()> {
        let run = match workload {
            Workload::Command(c) if c.metric == Metric::Hooks => &c.run,
            _ => return Ok(()),
        };
        let Some(t) = doc.get("knobs").and_then(|v| v.get_ref().as_table()) else {
            return Ok(());
        };
        for (k, _) in entries(t) {
            let name: &str = k.get_ref();
            // A `{placeholder}` in run hands the value to the script itself.
            let placed = run.contains(&format!("{{{name}}}"));
            if !placed && crate::knobs::knob(name).is_some_and(|k| !k.applies.python) {
                return Err(self.err(
                    k.span(),
                    format!(
                        "knob {name} cannot be applied inside a [workload.python] script (tune's \
                         PyTorch hooks do not inject it): pass it to the script with a \
                         {{{name}}} placeholder in run"
                    ),
                ));
            }
        }
        Ok(())
    }
}
