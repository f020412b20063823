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
