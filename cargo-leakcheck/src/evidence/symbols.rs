//! What the verdict rules ask of a binary's symbols, as one interface: the frames at a code
//! address, the static or thread-local holding a data address, and where a static is
//! defined. A binary's symbols are a fixed fact of its files, so the rules stay a function
//! of their inputs whichever source answers: the files themselves (`execution::symbolize::FromFiles`,
//! read lazily and cached), or the answers a run recorded ([`Captured`], which is how the golden
//! tests judge captured evidence without the binary that produced it).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The name the preloaded runtime's object file has.
pub const RUNTIME_OBJECT_NAME: &str = "libleakcheck_runtime";

/// Whether an object path is the preloaded runtime (its frames are the allocator's).
pub(crate) fn is_runtime_object(object: &str) -> bool {
    object
        .rsplit('/')
        .next()
        .is_some_and(|name| name.starts_with(RUNTIME_OBJECT_NAME))
}

/// One source-level frame at a code address.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frame {
    /// Demangled function name without the Rust hash suffix (for example
    /// `leaky::tests::forget_vec`), or `None` when neither DWARF nor the symbol table knows it.
    pub function: Option<String>,
    /// Source file as recorded in DWARF (joined with the compilation directory when relative).
    pub file: Option<String>,
    /// 1-based source line.
    pub line: Option<u32>,
    /// 1-based source column.
    pub column: Option<u32>,
    /// Path of the object the address belongs to, as given to `execution::symbolize::Symbolizer::symbolize`.
    pub object: String,
    /// File offset as given to `execution::symbolize::Symbolizer::symbolize` (the unadjusted return address), kept
    /// for `object+0xOFFSET` display.
    pub offset: u64,
    /// `true` for frames inlined into another one; only the outermost frame at an address (the
    /// function whose machine code this is) has `false`.
    pub inlined: bool,
}

impl Frame {
    /// A frame nothing resolved.
    pub(crate) fn unresolved(object: &str, offset: u64) -> Self {
        Frame {
            function: None,
            file: None,
            line: None,
            column: None,
            object: object.to_owned(),
            offset,
            inlined: false,
        }
    }

    /// The function name, or `<object file name>+0x<offset>` when the frame is unresolved.
    pub fn display_name(&self) -> String {
        if let Some(function) = &self.function {
            return function.clone();
        }
        let name = match Path::new(&self.object).file_name() {
            Some(name) => name.to_string_lossy(),
            // "" (anonymous memory) or a path ending in `..`: show what we were given.
            None if self.object.is_empty() => "[unknown]".into(),
            None => self.object.as_str().into(),
        };
        format!("{name}+0x{:x}", self.offset)
    }
}

/// Code addresses to frames: all that stack rendering needs.
pub trait CodeSymbols {
    /// Frames at the return address `file_offset` of `object`, innermost first; never empty.
    fn code(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]>;

    /// Told ahead which addresses will be asked for (a source that reads files may load
    /// several objects at once); nothing by default.
    fn prepare(&mut self, _addresses: &[(&str, u64)]) {}
}

/// A binary's symbols as the verdict rules ask for them.
pub trait Symbols: CodeSymbols {
    /// The data symbol (`tls`: thread-local symbol) of `object` holding `at`.
    fn data(&mut self, object: &str, at: u64, tls: bool) -> Option<String>;
    /// The file and line where the static of `object` holding `at` is defined.
    fn definition(&mut self, object: &str, at: u64) -> Option<(String, u32)>;
}

/// Every answer some run gave, to be given again.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Captured {
    /// `(object, file offset)` → frames.
    #[serde(default)]
    pub code: Vec<CodeAnswer>,
    /// `(object, address, tls)` → symbol.
    #[serde(default)]
    pub data: Vec<DataAnswer>,
    /// `(object, address)` → definition.
    #[serde(default)]
    pub definitions: Vec<DefinitionAnswer>,
}

/// One recorded code lookup.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CodeAnswer {
    pub object: String,
    pub offset: u64,
    pub frames: Vec<Frame>,
}

/// One recorded data lookup.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DataAnswer {
    pub object: String,
    pub at: u64,
    pub tls: bool,
    pub symbol: Option<String>,
}

/// One recorded definition lookup.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DefinitionAnswer {
    pub object: String,
    pub at: u64,
    pub definition: Option<(String, u32)>,
}

/// Answers from a [`Captured`] set; a question no run asked gets what a missing object
/// gives (an unresolved frame, no symbol), so a replay that asks something new shows it as
/// a difference in the report rather than failing.
#[cfg(test)]
pub struct Replay {
    code: HashMap<(String, u64), Arc<[Frame]>>,
    data: HashMap<(String, u64, bool), Option<String>>,
    definitions: HashMap<(String, u64), Option<(String, u32)>>,
}

#[cfg(test)]
impl Replay {
    /// The answers of `captured`.
    pub fn new(captured: Captured) -> Replay {
        Replay {
            code: captured
                .code
                .into_iter()
                .map(|a| ((a.object, a.offset), a.frames.into()))
                .collect(),
            data: captured
                .data
                .into_iter()
                .map(|a| ((a.object, a.at, a.tls), a.symbol))
                .collect(),
            definitions: captured
                .definitions
                .into_iter()
                .map(|a| ((a.object, a.at), a.definition))
                .collect(),
        }
    }
}

#[cfg(test)]
impl CodeSymbols for Replay {
    fn code(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]> {
        self.code
            .get(&(object.to_owned(), file_offset))
            .cloned()
            .unwrap_or_else(|| Arc::new([Frame::unresolved(object, file_offset)]))
    }
}

#[cfg(test)]
impl Symbols for Replay {
    fn data(&mut self, object: &str, at: u64, tls: bool) -> Option<String> {
        self.data
            .get(&(object.to_owned(), at, tls))
            .cloned()
            .flatten()
    }

    fn definition(&mut self, object: &str, at: u64) -> Option<(String, u32)> {
        self.definitions
            .get(&(object.to_owned(), at))
            .cloned()
            .flatten()
    }
}

/// Another source's answers, each written down the first time it is given.
pub struct Recording<'a> {
    inner: &'a mut dyn Symbols,
    code: HashMap<(String, u64), Arc<[Frame]>>,
    data: HashMap<(String, u64, bool), Option<String>>,
    definitions: HashMap<(String, u64), Option<(String, u32)>>,
}

impl<'a> Recording<'a> {
    /// Records what `inner` answers.
    pub fn new(inner: &'a mut dyn Symbols) -> Self {
        Recording {
            inner,
            code: HashMap::new(),
            data: HashMap::new(),
            definitions: HashMap::new(),
        }
    }

    /// Everything answered, in a stable order.
    pub fn captured(&self) -> Captured {
        let mut c = Captured {
            code: self
                .code
                .iter()
                .map(|((object, offset), frames)| CodeAnswer {
                    object: object.clone(),
                    offset: *offset,
                    frames: frames.to_vec(),
                })
                .collect(),
            data: self
                .data
                .iter()
                .map(|((object, at, tls), symbol)| DataAnswer {
                    object: object.clone(),
                    at: *at,
                    tls: *tls,
                    symbol: symbol.clone(),
                })
                .collect(),
            definitions: self
                .definitions
                .iter()
                .map(|((object, at), definition)| DefinitionAnswer {
                    object: object.clone(),
                    at: *at,
                    definition: definition.clone(),
                })
                .collect(),
        };
        c.code
            .sort_by(|a, b| (&a.object, a.offset).cmp(&(&b.object, b.offset)));
        c.data
            .sort_by(|a, b| (&a.object, a.at, a.tls).cmp(&(&b.object, b.at, b.tls)));
        c.definitions
            .sort_by(|a, b| (&a.object, a.at).cmp(&(&b.object, b.at)));
        c
    }
}

impl CodeSymbols for Recording<'_> {
    fn code(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]> {
        let frames = self.inner.code(object, file_offset);
        self.code
            .entry((object.to_owned(), file_offset))
            .or_insert_with(|| frames.clone());
        frames
    }

    fn prepare(&mut self, addresses: &[(&str, u64)]) {
        self.inner.prepare(addresses);
    }
}

impl Symbols for Recording<'_> {
    fn data(&mut self, object: &str, at: u64, tls: bool) -> Option<String> {
        let symbol = self.inner.data(object, at, tls);
        self.data
            .entry((object.to_owned(), at, tls))
            .or_insert_with(|| symbol.clone());
        symbol
    }

    fn definition(&mut self, object: &str, at: u64) -> Option<(String, u32)> {
        let definition = self.inner.definition(object, at);
        self.definitions
            .entry((object.to_owned(), at))
            .or_insert_with(|| definition.clone());
        definition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_gives_what_was_recorded_and_unresolved_frames_otherwise() {
        let mut files = crate::execution::binary_symbols::FromFiles::default();
        let mut recording = Recording::new(&mut files);
        let asked = recording.code("/nonexistent/bin", 0x40);
        assert_eq!(recording.data("/nonexistent/bin", 0x10, false), None);
        let mut replay = Replay::new(recording.captured());
        assert_eq!(replay.code("/nonexistent/bin", 0x40), asked);
        let never = replay.code("/nonexistent/other", 0x8);
        assert_eq!(never[0].function, None);
        assert_eq!(never[0].offset, 0x8);
    }
}
