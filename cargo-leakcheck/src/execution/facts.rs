//! What one read of an executable says, stored with its `TestBinary`: the types the
//! inspection step (`inspect`) fills in and the build step (`cargo`) carries.

use crate::evidence::CollectionTable;
use crate::execution::entry::Inspection;
use std::sync::Arc;

/// What one read of an executable said.
#[derive(Clone, Debug, Default)]
pub struct BinaryFacts {
    /// What its symbol tables say.
    pub symbols: BinarySymbols,
    /// Its tests' entry points; `None` when it has no listed libtest tests (or was not
    /// asked about any).
    pub tests: Option<Inspection>,
    /// Its GNU build id, hexadecimal (empty: none).
    pub build_id: String,
    /// The collections reachable from its statics and thread-locals (see
    /// [`crate::execution::collections`]).
    pub collections: Arc<CollectionTable>,
}

impl BinaryFacts {
    /// For a binary with a global allocator of its own: the allocation shims through which
    /// its counting processes ask that allocator whether it reaches the runtime's `malloc`
    /// (see the runtime's `probe` module).
    pub fn alloc_probe(&self) -> Option<(u64, u64)> {
        if !self.symbols.custom_global_allocator {
            return None;
        }
        let inspection = self.tests.as_ref()?;
        // A jemalloc of the program's own (tikv-jemallocator) never reaches this runtime's
        // malloc; its heap is read from its own dumps in the stacks pass.
        if inspection.app_mallctl.is_some() {
            return None;
        }
        inspection.alloc_shims
    }
}

/// What an executable's symbol tables say about it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BinarySymbols {
    /// It has its own `#[global_allocator]`. Rust's allocation shim forwards to std's
    /// default allocator, `__rdl_alloc`, only when there is none; with one (Rust 1.95 calls
    /// the impl straight from `__rust_alloc`), `__rdl_alloc` is not linked in. A binary
    /// linking std dynamically (a proc-macro crate's tests) defines no shim at all: it
    /// imports `__rust_alloc` from libstd-*.so, whose shim is the default one.
    pub custom_global_allocator: bool,
    /// It contains criterion's code (its mangled crate name).
    pub links_criterion: bool,
}

impl BinarySymbols {
    /// Reads them from an executable's bytes; all false when they are not an object file.
    pub fn of(data: &[u8]) -> BinarySymbols {
        use object::{Object, ObjectSymbol};
        let Ok(file) = object::File::parse(data) else {
            return BinarySymbols::default();
        };
        let (mut default_linked, mut links_criterion) = (false, false);
        for s in file.symbols().chain(file.dynamic_symbols()) {
            if let Ok(n) = s.name() {
                default_linked |= n.contains("__rdl_alloc") || n.contains("__rg_alloc");
                links_criterion |= n.contains("9criterion");
            }
        }
        let shim_imported = file
            .dynamic_symbols()
            .any(|s| s.is_undefined() && s.name().is_ok_and(|n| n.ends_with("__rust_alloc")));
        BinarySymbols {
            custom_global_allocator: !default_linked && !shim_imported,
            links_criterion,
        }
    }
}
