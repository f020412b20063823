//! The PyTorch lines the advisor prints for a change, from the knob table.

use super::knob;

/// The PyTorch line that sets knob `name` to `value` on `backend`, from the table.
pub fn torch_line(name: &str, value: &str, backend: &str) -> String {
    match knob(name) {
        Some(k) => k.torch_line(value, backend),
        None => format!("# set {name} = {value}"),
    }
}

/// The PyTorch change for several knobs at once: one statement per knob, joined by `; `,
/// except that the DataLoader's arguments go into one `DataLoader(...)` call.
pub fn torch_lines<'a>(
    changes: impl IntoIterator<Item = (&'a str, &'a str)>,
    backend: &str,
) -> String {
    const DL: &str = "DataLoader(dataset, ";
    let (mut args, mut comments, mut lines) = (Vec::new(), Vec::new(), Vec::new());
    for (name, value) in changes {
        let line = torch_line(name, value, backend);
        match line.strip_prefix(DL).and_then(|r| r.split_once(')')) {
            Some((a, rest)) => {
                args.push(a.to_string());
                comments.extend(rest.trim().strip_prefix('#').map(|c| c.trim().to_string()));
            }
            None => lines.push(line),
        }
    }
    if !args.is_empty() {
        // Last: a trailing comment would swallow anything after it.
        let mut dl = format!("{DL}{})", args.join(", "));
        if !comments.is_empty() {
            dl.push_str(&format!("  # {}", comments.join("; ")));
        }
        lines.push(dl);
    }
    lines.join("; ")
}

/// The generic class the knob table's `optim_impl` lines name, with the comment that says so.
const ANY_OPTIMIZER: (&str, &str) = ("torch.optim.AdamW(", "  # your optimizer's class");

/// `line` with the script's own optimizer class in place of the table's generic one,
/// where the hooks read exactly one (`optimizer`, from the baseline's `script_knobs`): a
/// script's SGD is told `torch.optim.SGD(params, ..., fused=True)`, not AdamW with a
/// comment asking the reader to substitute (#31). Several classes, or none read, keep the
/// generic line.
pub fn name_optimizer(line: &str, optimizer: Option<&str>) -> String {
    match optimizer.filter(|o| !o.is_empty() && !o.contains(',')) {
        Some(class) if line.contains(ANY_OPTIMIZER.0) => line
            .replace(ANY_OPTIMIZER.0, &format!("{class}("))
            .replace(ANY_OPTIMIZER.1, ""),
        _ => line.to_string(),
    }
}
