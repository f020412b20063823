//! `[workload.python]` sweeps only the knobs tune's PyTorch hooks can apply inside an
//! unmodified script: any other knob would run trials identical to the baseline under
//! another name, and its "effect" would be noise.

use toml::de::DeTable;

use super::{entries, Cx, Metric, Val, Workload};
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
        let baseline = doc
            .get("search")
            .and_then(|s| s.get_ref().as_table())
            .and_then(|s| s.get("baseline"))
            .and_then(|b| b.get_ref().as_table());
        let given = entries(t)
            .into_iter()
            .chain(baseline.map(entries).unwrap_or_default());
        for (k, v) in given {
            let name: &str = k.get_ref();
            // A `{placeholder}` in run hands the value to the script itself.
            let placed = run.contains(&format!("{{{name}}}"));
            if name == "checkpoint" && !placed {
                self.check_checkpoint_off(v)?;
            }
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

    /// The hooks can run a script's `torch.utils.checkpoint` calls as plain calls
    /// (`off`), but cannot choose segments in a model they did not build.
    fn check_checkpoint_off(&self, v: &Val<'_>) -> Result<()> {
        let items: Vec<&Val<'_>> = match v.get_ref().as_array() {
            Some(a) => a.iter().collect(),
            None => vec![v],
        };
        for item in items {
            let off = item
                .get_ref()
                .as_str()
                .is_some_and(|s| s.trim().eq_ignore_ascii_case("off"));
            if !off {
                return Err(self.err(
                    item.span(),
                    "checkpoint in a [workload.python] script can only be \"off\" (tune's hooks \
                     run the script's own torch.utils.checkpoint calls as plain calls; they \
                     cannot choose segments in a model they did not build): sweep \
                     checkpoint = [\"off\"] against your script as written",
                ));
            }
        }
        Ok(())
    }
}
