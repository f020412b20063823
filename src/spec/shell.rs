//! How a placeholder's value reaches `sh -c`: as exactly that value, one word, whatever
//! it holds. A command template is read as the shell will read it, far enough to know
//! the quoting around each placeholder: bare (in the command or inside `$(...)`),
//! inside '...' or inside "...". The value is then quoted for that spot: bare values
//! are single-quoted, a `'` inside '...' closes, escapes and reopens the quote, and
//! `$`, `` ` ``, `"` and `\` inside "..." get a backslash (POSIX double quotes give one
//! to exactly those four). Where no quoting can hold a value (inside backticks, `${...}`
//! or `$((...))`, in a comment or a here-document, right after a `\` or a `$`) the spec
//! is refused when it is read, as is a template whose quotes never close.

use std::borrow::Cow;

use super::{template_pieces, Piece};

/// The quoting a placeholder stands in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quoting {
    /// Unquoted: in the command itself or inside `$(...)`.
    Bare,
    /// Inside '...'.
    Single,
    /// Inside "...".
    Double,
}

/// One placeholder's spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spot {
    pub quoting: Quoting,
    /// Right after a bare `~`: always quoted, so the value is never taken for a user
    /// name to expand.
    pub after_tilde: bool,
}

/// Why a template cannot be run with tune's quoting, at byte `at` of the template.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Refusal {
    pub at: usize,
    pub why: String,
}

/// What the shell is inside at a point of the template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    /// The command itself, or the inside of `$(...)`: unquoted, with its open
    /// parentheses and `case` statements (whose patterns end in a lone `)`).
    Plain {
        parens: usize,
        cases: usize,
    },
    Single,
    Double,
    Backtick,
    /// `${...}`.
    Brace,
    /// `$((...))`, with its open parentheses.
    Arith(usize),
    Comment,
}

impl Frame {
    fn name(self) -> &'static str {
        match self {
            Frame::Plain { .. } => "$(",
            Frame::Single => "'",
            Frame::Double => "\"",
            Frame::Backtick => "`",
            Frame::Brace => "${",
            Frame::Arith(_) => "$((",
            Frame::Comment => "#",
        }
    }
}

/// The shell's reading of a template, one character at a time.
struct Lexer {
    /// Innermost last, with the byte where each began; never empty.
    stack: Vec<(Frame, usize)>,
    escaped: bool,
    /// After `$`, or after `$(` (which may still become `$((`).
    dollar: u8,
    /// The previous character was a bare `<`; two make a here-document.
    lt: bool,
    /// From a here-document on, the rest is not read (its body is not shell syntax).
    heredoc: Option<usize>,
    /// The current unquoted word, for `case` and `esac`.
    word: String,
    at_word_start: bool,
    prev: Option<char>,
}

impl Lexer {
    fn new() -> Lexer {
        Lexer {
            stack: vec![(
                Frame::Plain {
                    parens: 0,
                    cases: 0,
                },
                0,
            )],
            escaped: false,
            dollar: 0,
            lt: false,
            heredoc: None,
            word: String::new(),
            at_word_start: true,
            prev: None,
        }
    }

    fn top(&mut self) -> &mut Frame {
        // `stack` starts with one frame and `pop` never takes the last.
        &mut self.stack.last_mut().expect("the outermost frame stays").0
    }

    fn push(&mut self, f: Frame, at: usize) {
        self.stack.push((f, at));
    }

    fn pop(&mut self) {
        if self.stack.len() > 1 {
            self.stack.pop();
        }
    }

    /// Ends the current bare word: `case` and `esac` open and close a statement whose
    /// patterns end in a `)` that closes nothing.
    fn end_word(&mut self) {
        let delta = match self.word.as_str() {
            "case" => 1,
            "esac" => -1,
            _ => 0,
        };
        if let Frame::Plain { cases, .. } = self.top() {
            *cases = cases.saturating_add_signed(delta);
        }
        self.word.clear();
        self.at_word_start = true;
    }

    fn feed(&mut self, c: char, at: usize) {
        if self.heredoc.is_some() {
            return;
        }
        if self.escaped {
            self.escaped = false;
            self.word.push(c);
            self.at_word_start = false;
            self.prev = Some(c);
            return;
        }
        if self.dollar > 0 && self.after_dollar(c, at) {
            self.prev = Some(c);
            return;
        }
        match *self.top() {
            Frame::Comment => {
                if c == '\n' {
                    self.pop();
                    self.end_word();
                }
            }
            Frame::Single => {
                if c == '\'' {
                    self.pop();
                }
            }
            Frame::Double => match c {
                '\\' => self.escaped = true,
                '"' => self.pop(),
                '$' => self.dollar = 1,
                '`' => self.push(Frame::Backtick, at),
                _ => {}
            },
            Frame::Backtick => match c {
                '\\' => self.escaped = true,
                '`' => self.pop(),
                _ => {}
            },
            Frame::Brace => match c {
                '\\' => self.escaped = true,
                '}' => self.pop(),
                '\'' => self.push(Frame::Single, at),
                '"' => self.push(Frame::Double, at),
                '$' => self.dollar = 1,
                _ => {}
            },
            Frame::Arith(open) => match c {
                '(' => *self.top() = Frame::Arith(open + 1),
                ')' if open <= 1 => self.pop(),
                ')' => *self.top() = Frame::Arith(open - 1),
                '$' => self.dollar = 1,
                _ => {}
            },
            Frame::Plain { .. } => self.plain(c, at),
        }
        self.prev = Some(c);
    }

    /// The character after `$` or `$(`; true when it was taken.
    fn after_dollar(&mut self, c: char, at: usize) -> bool {
        let step = self.dollar;
        self.dollar = 0;
        match (step, c) {
            (1, '(') => {
                self.dollar = 2;
                true
            }
            (1, '{') => {
                self.push(Frame::Brace, at);
                true
            }
            (2, '(') => {
                self.push(Frame::Arith(2), at);
                true
            }
            (2, _) => {
                self.push(
                    Frame::Plain {
                        parens: 0,
                        cases: 0,
                    },
                    at,
                );
                false
            }
            _ => false,
        }
    }

    fn plain(&mut self, c: char, at: usize) {
        let lt = std::mem::take(&mut self.lt);
        match c {
            '\\' => self.escaped = true,
            '\'' => self.push(Frame::Single, at),
            '"' => self.push(Frame::Double, at),
            '`' => self.push(Frame::Backtick, at),
            '$' => self.dollar = 1,
            '#' if self.at_word_start => self.push(Frame::Comment, at),
            '<' if lt => self.heredoc = Some(at),
            '<' => {
                self.end_word();
                self.lt = true;
            }
            '(' => {
                self.end_word();
                if let Frame::Plain { parens, .. } = self.top() {
                    *parens += 1;
                }
            }
            ')' => {
                self.end_word();
                match *self.top() {
                    Frame::Plain { parens, cases } if parens > 0 => {
                        *self.top() = Frame::Plain {
                            parens: parens - 1,
                            cases,
                        }
                    }
                    // A `case` pattern's end.
                    Frame::Plain { cases, .. } if cases > 0 => {}
                    _ => self.pop(),
                }
            }
            c if c.is_whitespace() || ";&|>".contains(c) => self.end_word(),
            c => {
                self.word.push(c);
                self.at_word_start = false;
            }
        }
    }

    /// Where a placeholder standing here is, or why it cannot be quoted.
    fn spot(&self) -> Result<Spot, String> {
        if self.heredoc.is_some() {
            return Err("comes after a here-document (<<), whose body tune cannot quote".into());
        }
        if self.escaped {
            return Err("follows a backslash, which would take its quote for a character".into());
        }
        if self.dollar > 0 {
            return Err("follows a '$', which would make it part of an expansion".into());
        }
        for (f, _) in &self.stack {
            let inside = match f {
                Frame::Backtick => "inside `...`",
                Frame::Brace => "inside ${...}",
                Frame::Arith(_) => "inside $((...))",
                Frame::Comment => "in a comment",
                _ => continue,
            };
            return Err(format!(
                "is {inside}, where no quoting holds a value: use $(...), or set a variable first (v={{name}}; ... \"$v\")"
            ));
        }
        let quoting = match self.stack.last().map(|f| f.0) {
            Some(Frame::Single) => Quoting::Single,
            Some(Frame::Double) => Quoting::Double,
            _ => Quoting::Bare,
        };
        Ok(Spot {
            quoting,
            after_tilde: quoting == Quoting::Bare && self.prev == Some('~'),
        })
    }

    /// A placeholder is one more character of the current word.
    fn placeholder(&mut self) {
        self.word.push('\u{0}');
        self.at_word_start = false;
        self.prev = Some('\u{0}');
    }
}

/// Byte offset of `part` inside `whole`, of which it is a slice.
fn offset(whole: &str, part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize)
}

/// The spot of every placeholder of `run`, in order; or the first place the shell would
/// not get the value as one word, or where the template's quoting never closes.
pub(super) fn spots(run: &str) -> Result<Vec<Spot>, Refusal> {
    let mut lx = Lexer::new();
    let mut out = Vec::new();
    for piece in template_pieces(run) {
        match piece {
            Piece::Text(t) => {
                let base = offset(run, t);
                for (i, c) in t.char_indices() {
                    lx.feed(c, base + i);
                }
            }
            Piece::Brace(c) => lx.feed(c, run.len()),
            Piece::Placeholder { name, at } => {
                let spot = lx.spot().map_err(|why| Refusal {
                    at,
                    why: format!("placeholder {{{name}}} {why}"),
                })?;
                out.push(spot);
                lx.placeholder();
            }
            Piece::Unclosed(_) => {}
        }
    }
    if lx.heredoc.is_none() {
        if let Some(&(f, at)) = lx.stack[1..]
            .iter()
            .find(|(f, _)| !matches!(f, Frame::Comment))
        {
            return Err(Refusal {
                at,
                why: format!(
                    "this '{}' is never closed, so sh would refuse the command",
                    f.name()
                ),
            });
        }
    }
    Ok(out)
}

/// Shell words whose meaning changes when they stand unquoted at a command's start.
const RESERVED: &[&str] = &[
    "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then", "until", "while",
];

/// `value` written for its spot so that the shell reads back exactly `value`.
pub(super) fn quote(value: &str, spot: Spot) -> Cow<'_, str> {
    match spot.quoting {
        Quoting::Bare => {
            let plain = !value.is_empty()
                && !spot.after_tilde
                && !RESERVED.contains(&value)
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_@%+,./:-".contains(c));
            if plain {
                Cow::Borrowed(value)
            } else {
                Cow::Owned(format!("'{}'", value.replace('\'', r"'\''")))
            }
        }
        Quoting::Single if value.contains('\'') => Cow::Owned(value.replace('\'', r"'\''")),
        Quoting::Double if value.contains(['$', '`', '"', '\\']) => {
            let mut s = String::with_capacity(value.len() + 8);
            for c in value.chars() {
                if matches!(c, '$' | '`' | '"' | '\\') {
                    s.push('\\');
                }
                s.push(c);
            }
            Cow::Owned(s)
        }
        _ => Cow::Borrowed(value),
    }
}

/// The command line for `run` with each placeholder's value (from `value`) quoted for
/// its spot. A template the spec's reader refused (only one built by hand can get here)
/// has its values single-quoted as if they stood bare.
pub(super) fn render(run: &str, value: impl Fn(&str) -> String) -> String {
    let spots = spots(run).ok();
    let bare = Spot {
        quoting: Quoting::Bare,
        after_tilde: true,
    };
    let mut out = String::with_capacity(run.len() + 16);
    let mut n = 0;
    for piece in template_pieces(run) {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Brace(c) => out.push(c),
            Piece::Placeholder { name, .. } => {
                let spot = spots
                    .as_ref()
                    .and_then(|s| s.get(n).copied())
                    .unwrap_or(bare);
                n += 1;
                out.push_str(&quote(&value(name), spot));
            }
            Piece::Unclosed(at) => out.push_str(&run[at..]),
        }
    }
    out
}

/// The length of the longest command line `run` renders to, each placeholder at the
/// spot `spots` gives it holding the longest of `values(name)` once quoted (`fallback`
/// bytes where none are listed).
pub(super) fn longest_line<'v>(
    run: &str,
    spots: &[Spot],
    values: impl Fn(&str) -> Option<&'v [String]>,
    fallback: usize,
) -> usize {
    let mut n = 0;
    let mut total = 0usize;
    for piece in template_pieces(run) {
        total = total.saturating_add(match piece {
            Piece::Text(t) => t.len(),
            Piece::Placeholder { name, .. } => {
                let spot = spots.get(n).copied().unwrap_or(Spot {
                    quoting: Quoting::Bare,
                    after_tilde: true,
                });
                n += 1;
                values(name)
                    .and_then(|vs| vs.iter().map(|v| quote(v, spot).len()).max())
                    .unwrap_or(fallback)
            }
            _ => 1,
        });
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoting(run: &str) -> Vec<Quoting> {
        spots(run).unwrap().into_iter().map(|s| s.quoting).collect()
    }

    #[test]
    fn spots_follow_the_shells_quoting() {
        use Quoting::*;
        assert_eq!(quoting("a {x} '{x}' \"{x}\""), [Bare, Single, Double]);
        assert_eq!(
            quoting("a \"$(b '{x}' {x} \"{x}\")\" {x}"),
            [Single, Bare, Double, Bare]
        );
        assert_eq!(quoting("echo 'it''s' {x}"), [Bare]);
        assert_eq!(quoting("echo \"a\\\"{x}\""), [Double]);
        assert_eq!(quoting("(cd d && run {x})"), [Bare]);
        assert_eq!(
            quoting("v=$(case a in a) echo {x};; esac); echo \"{x}\""),
            [Bare, Double]
        );
        assert_eq!(quoting("echo hi # it's fine\necho {x}"), [Bare]);
        assert!(spots("echo ~{x}").unwrap()[0].after_tilde);
    }

    #[test]
    fn spots_where_no_quoting_holds_are_refused() {
        for (run, why) in [
            ("echo `{x}`", "inside `...`"),
            ("echo ${{v:-{x}}}", "inside ${...}"),
            ("echo $(( {x} ))", "inside $((...))"),
            ("echo # {x}", "in a comment"),
            ("cat <<E\n{x}\nE", "here-document"),
            ("echo \\{x}", "backslash"),
            ("echo ${x}", "'$'"),
            ("echo '{x}", "never closed"),
            ("echo \"{x}\" \"", "never closed"),
            ("echo $(ls", "never closed"),
        ] {
            let e = spots(run).unwrap_err();
            assert!(e.why.contains(why), "{run:?}: {e:?}");
        }
    }

    #[test]
    fn quoting_for_each_spot() {
        let s = |quoting| Spot {
            quoting,
            after_tilde: false,
        };
        assert_eq!(quote("0.01", s(Quoting::Bare)), "0.01");
        assert_eq!(quote("a b", s(Quoting::Bare)), "'a b'");
        assert_eq!(quote("", s(Quoting::Bare)), "''");
        assert_eq!(quote("if", s(Quoting::Bare)), "'if'");
        assert_eq!(quote("it's", s(Quoting::Bare)), r"'it'\''s'");
        assert_eq!(quote("it's", s(Quoting::Single)), r"it'\''s");
        assert_eq!(quote("a\"$b", s(Quoting::Double)), r#"a\"\$b"#);
        assert_eq!(quote("a'b", s(Quoting::Double)), "a'b");
    }
}
