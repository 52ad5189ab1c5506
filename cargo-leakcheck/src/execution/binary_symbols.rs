//! A binary's symbols read from its files, as the verdict rules ask for them
//! (`evidence::symbols::Symbols`): code addresses through [`Symbolizer`], data and
//! thread-local addresses through [`DataSymbols`], each read lazily and cached.

use crate::evidence::symbols::{CodeSymbols, Frame, Symbols};
use crate::execution::data_symbols::DataSymbols;
use crate::execution::symbolize::Symbolizer;
use std::sync::Arc;

/// Symbols read from the objects' files.
#[derive(Default)]
pub struct FromFiles {
    /// Code addresses.
    pub code: Symbolizer,
    /// Data and thread-local symbols.
    pub data: DataSymbols,
}

impl CodeSymbols for FromFiles {
    fn code(&mut self, object: &str, file_offset: u64) -> Arc<[Frame]> {
        self.code.symbolize(object, file_offset)
    }

    fn prepare(&mut self, addresses: &[(&str, u64)]) {
        self.code.prepare(addresses.iter().copied());
    }
}

impl Symbols for FromFiles {
    fn data(&mut self, object: &str, at: u64, tls: bool) -> Option<String> {
        self.data.find(object, at, tls)
    }

    fn definition(&mut self, object: &str, at: u64) -> Option<(String, u32)> {
        self.data.definition(object, at)
    }
}
