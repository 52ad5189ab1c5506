//! Globs over test and function names.

use crate::model::FrameReport;

/// A glob over names: `*` matches any run of characters (`::` included), `\*` a star.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    /// Literal pieces between stars.
    pieces: Vec<String>,
}

impl Glob {
    /// Compiles a pattern.
    pub fn new(pattern: &str) -> Glob {
        let mut pieces = vec![String::new()];
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(n) => pieces.last_mut().expect("never empty").push(n),
                    None => pieces.last_mut().expect("never empty").push('\\'),
                },
                '*' => pieces.push(String::new()),
                c => pieces.last_mut().expect("never empty").push(c),
            }
        }
        Glob {
            pattern: pattern.to_string(),
            pieces,
        }
    }

    /// A pattern that matches exactly `name`.
    pub fn escape(name: &str) -> String {
        name.replace('\\', "\\\\").replace('*', "\\*")
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether any frame's function name matches.
    pub fn matches_any(&self, frames: &[FrameReport]) -> bool {
        frames.iter().any(|f| self.matches(&f.function))
    }

    /// Whether the whole of `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        let (first, rest) = self.pieces.split_first().expect("never empty");
        let Some(mut remaining) = text.strip_prefix(first.as_str()) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return remaining.is_empty();
        };
        for piece in middle {
            match remaining.find(piece.as_str()) {
                Some(i) => remaining = &remaining[i + piece.len()..],
                None => return false,
            }
        }
        remaining.len() >= last.len() && remaining.ends_with(last.as_str())
    }
}
