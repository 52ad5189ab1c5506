//! Decides what a retained stack is, from its symbolized frames alone (pure).
//!
//! Three questions, asked of frames innermost first:
//! 1. Which leading frames are the allocator itself (the preloaded runtime, jemalloc,
//!    Rust's allocation shims)? They are trimmed: they say nothing about the leak.
//! 2. Is the allocation part of a one-time initialisation (a once-initialiser frame
//!    anywhere on the stack)? Then it is listed as `one-time` and never fails a test.
//! 3. Does any frame belong to the code under test? A stack made only of std, libtest,
//!    libc and the dynamic loader is the harness's own memory, and so is glibc's cache
//!    of thread stacks and their TLS, which outlives a joined thread by design.

use crate::evidence::symbols::{is_runtime_object, Frame};
use crate::model::StackKind;

/// Rust's allocation shims and the layers between them and malloc.
const ALLOCATOR_PREFIXES: &[&str] = &[
    "__rustc::__rust_",
    "__rustc::__rg_",
    "__rustc::__rdl_",
    "__rust_alloc",
    "__rust_realloc",
    "__rg_",
    "__rdl_",
    "alloc::alloc::",
    "std::alloc::",
    "<std::alloc::System as ",
    "<alloc::alloc::Global as ",
    "std::sys::alloc::",
    "std::sys::pal::unix::alloc::",
    "tikv_jemallocator::",
    "<tikv_jemallocator::Jemalloc as ",
    "_rjem_",
    "je_",
];

/// Functions that run a closure exactly once per process (std, once_cell, lazy_static),
/// and std's lazily built backtrace symbol cache (filled on the first panic when
/// RUST_BACKTRACE is set).
const ONE_TIME_MARKERS: &[(&str, &str)] = &[
    ("std::sync::once_lock::OnceLock", "OnceLock initialisation"),
    ("std::sync::lazy_lock::LazyLock", "LazyLock initialisation"),
    ("std::sync::once::Once::call_once", "Once::call_once"),
    (
        "std::sync::poison::once::Once::call_once",
        "Once::call_once",
    ),
    ("std::sys::sync::once::", "Once::call_once"),
    ("core::cell::once::OnceCell", "OnceCell initialisation"),
    ("core::cell::lazy::LazyCell", "LazyCell initialisation"),
    ("once_cell::", "once_cell initialisation"),
    ("lazy_static::", "lazy_static initialisation"),
    ("std::backtrace_rs::", "std's backtrace symbol cache"),
];

/// glibc keeps the stacks (and TLS blocks) of finished threads for reuse. Matched as
/// substrings: with libc's debug info the names are `__GI__dl_allocate_tls`,
/// `__pthread_create_2_1`, without it the exported `_dl_allocate_tls`, `pthread_create`.
const THREAD_CACHE_MARKERS: &[&str] = &[
    "_dl_allocate_tls",
    "allocate_dtv",
    "allocate_stack",
    "pthread_create",
];

/// libtest calls every test body through this frame; what libtest does outside it (on the
/// main thread, or to start the test's thread) is the harness.
const LIBTEST_BODY_FRAME: &str = "test::__rust_begin_short_backtrace";

/// Namespaces that are never the code under test.
const SYSTEM_PREFIXES: &[&str] = &[
    "std::",
    "core::",
    "alloc::",
    "test::",
    "<std::",
    "<core::",
    "<alloc::",
    "<test::",
    "__rust",
    "__rustc::",
    "_start",
    "__libc_",
    "_dl_",
    "__GI_",
    "start_thread",
    "clone",
    "panic_unwind::",
    "<panic_unwind::",
    "_Unwind_",
    "__gcc_personality",
    "rust_panic",
    "rust_begin_unwind",
];

fn function(f: &Frame) -> &str {
    f.function.as_deref().unwrap_or("")
}

/// Whether a frame is part of the allocator rather than of the code that allocated.
pub fn is_allocator_frame(f: &Frame) -> bool {
    if is_runtime_object(&f.object) {
        return true;
    }
    let name = function(f);
    if matches!(
        name,
        "malloc" | "calloc" | "realloc" | "free" | "posix_memalign" | "aligned_alloc" | "memalign"
    ) {
        return true;
    }
    if ALLOCATOR_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return true;
    }
    // Whatever type it is, a `GlobalAlloc` impl is the allocator (a forwarding
    // `#[global_allocator]` that counts or tracks, calling the system allocator).
    if name.starts_with('<') && name.contains(" as core::alloc::global::GlobalAlloc>::") {
        return true;
    }
    // jemalloc linked into the test binary (tikv-jemallocator): its inline functions have
    // unprefixed names but their source lives in tikv-jemalloc-sys; without debug info
    // (a release build) only their C names say so.
    f.file
        .as_deref()
        .is_some_and(|file| file.contains("tikv-jemalloc-sys"))
        || is_jemalloc_internal(name)
}

/// jemalloc's own functions on the way from `malloc` to the profiler, by their C names
/// (no Rust path, no generics): static ones keep no `_rjem_` prefix.
const JEMALLOC_INTERNAL_PREFIXES: &[&str] = &[
    "prof_",
    "imalloc",
    "ialloc",
    "ipalloc",
    "irealloc",
    "iralloc",
    "malloc_default",
    "do_rallocx",
    "arena_",
    "tcache_",
];

fn is_jemalloc_internal(name: &str) -> bool {
    !name.contains("::")
        && !name.contains('<')
        && JEMALLOC_INTERNAL_PREFIXES
            .iter()
            .any(|p| name.starts_with(p))
}

/// Rust's allocation entry points, through which every allocation of Rust code reaches the
/// `#[global_allocator]` (or the default one), with `__rustc::` taken off.
const ALLOCATION_SHIMS: &[&str] = &[
    "__rust_alloc",
    "__rust_alloc_zeroed",
    "__rust_realloc",
    "__rg_alloc",
    "__rg_alloc_zeroed",
    "__rg_realloc",
    "__rdl_alloc",
    "__rdl_alloc_zeroed",
    "__rdl_realloc",
];

pub fn is_allocation_shim(f: &Frame) -> bool {
    let name = function(f);
    let name = name.strip_prefix("__rustc::").unwrap_or(name);
    ALLOCATION_SHIMS.contains(&name)
}

/// How many leading (innermost) frames are the allocator: everything the outermost
/// allocation shim called (a `#[global_allocator]` that wraps another runs helpers of its
/// own there, named like nothing an allocator is known by: tracking-allocator's
/// `get_wrapped_allocation`), then the allocator frames that called the shim (`alloc::`,
/// `RawVec`'s growth).
pub fn allocator_prefix_len(frames: &[Frame]) -> usize {
    let inside_shim = frames.iter().rposition(is_allocation_shim).unwrap_or(0);
    inside_shim
        + frames[inside_shim..]
            .iter()
            .take_while(|f| is_allocator_frame(f))
            .count()
}

/// Whether a source file is the program's own: not std's (`/rustc/…`), nor a crate std
/// vendors (`/rust/deps/…`, hashbrown), nor a dependency from a registry or a git checkout,
/// wherever the cargo home is (`~/.cargo`, `/usr/local/cargo` in Rust's Docker images, a
/// CI's cache directory).
pub fn is_own_source(file: &str) -> bool {
    !file.starts_with("/rustc/")
        && !file.starts_with("/rust/deps/")
        && registry_package(file).is_none()
        && !file.contains("/git/checkouts/")
}

/// The directory of the registry package a source file is in (`tokio-1.54.1`), from cargo's
/// layout `<cargo home>/registry/src/<registry>/<package>-<version>/…`.
pub fn registry_package(file: &str) -> Option<&str> {
    let (_, rest) = file.split_once("/registry/src/")?;
    let mut parts = rest.split('/');
    let _registry = parts.next()?;
    parts.next().filter(|p| !p.is_empty())
}

/// Whether a frame is outside std, libtest, libc and the loader.
pub fn is_user_frame(f: &Frame, test_binary: &str) -> bool {
    match f.function.as_deref() {
        // An unresolved frame of the test binary may well be user code: keep the stack.
        None => f.object == test_binary,
        Some("main") => false,
        Some(name) => {
            // `<<alloc::boxed::Box<str> as From<&str>>::from as FnOnce<..>>::call_once`
            // is std's, however deep the qualified path nests.
            let bare = name.trim_start_matches('<');
            f.object == test_binary && !SYSTEM_PREFIXES.iter().any(|p| bare.starts_with(p))
        }
    }
}

/// What [`classify_test`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classified {
    /// The kind the frames suggest.
    pub kind: StackKind,
    /// Why, when not a leak.
    pub reason: Option<String>,
    /// Harness memory because it is glibc's cache of thread blocks (as opposed to a stack
    /// with no frame of the test's code).
    pub thread_cache: bool,
}

/// The kind of a stack (already trimmed of allocator frames) and why, knowing the function
/// libtest calls for the test when it is known (its file offsets in the
/// test binary, see [`crate::execution::entry`]): code there is the test's own, whatever its symbol
/// says. A release build inlines a small test body into that function, whose symbol is
/// only `core::ops::function::FnOnce::call_once`.
pub fn classify_test(frames: &[Frame], test_binary: &str, entry: Option<(u64, u64)>) -> Classified {
    let class = |kind, reason: Option<String>, thread_cache| Classified {
        kind,
        reason,
        thread_cache,
    };
    let in_entry = |f: &Frame| {
        entry.is_some_and(|(start, end)| {
            f.object == test_binary && f.offset > start && f.offset <= end
        })
    };
    let is_user = |f: &Frame| is_user_frame(f, test_binary) || in_entry(f);
    for f in frames {
        let name = function(f);
        let bare = name.strip_prefix('<').unwrap_or(name);
        if let Some((_, why)) = ONE_TIME_MARKERS.iter().find(|(p, _)| bare.starts_with(p)) {
            return class(StackKind::OneTime, Some(format!("{why} (`{name}`)")), false);
        }
    }
    // On a stack through libtest, only the test body (inside libtest's marker frame) is
    // the code under test: the harness's generated `main` lives in the user's crate too.
    let body = match frames
        .iter()
        .position(|f| function(f).starts_with(LIBTEST_BODY_FRAME))
    {
        Some(marker) => &frames[..marker],
        None if frames.iter().any(|f| function(f).starts_with("test::")) => &frames[..0],
        None => frames,
    };
    // Look only at the frames below the first user frame: a thread-cache allocation is
    // made by pthread_create on behalf of whoever spawned the thread.
    let first_user = body.iter().position(is_user);
    let inner = &frames[..first_user.unwrap_or(frames.len())];
    if let Some(f) = inner
        .iter()
        .find(|f| THREAD_CACHE_MARKERS.iter().any(|m| function(f).contains(m)))
    {
        return class(
            StackKind::Harness,
            Some(format!(
                "glibc keeps finished threads' stacks and TLS for reuse (`{}`)",
                function(f)
            )),
            true,
        );
    }
    if first_user.is_none() {
        return class(
            StackKind::Harness,
            Some("no frame of the code under test".into()),
            false,
        );
    }
    class(StackKind::Leak, None, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind and reason of a stack with no entry point known.
    fn classify(frames: &[Frame], exe: &str) -> (StackKind, Option<String>) {
        let c = classify_test(frames, exe, None);
        (c.kind, c.reason)
    }

    const EXE: &str = "/t/target/debug/deps/leaky-123";

    #[test]
    fn a_dependency_is_not_the_program_s_own_source_wherever_the_cargo_home_is() {
        for home in ["/root/.cargo", "/usr/local/cargo", "/tmp/tmp.x1y2"] {
            let file =
                format!("{home}/registry/src/index.crates.io-1949cf8c/tokio-1.54.1/src/lib.rs");
            assert!(!is_own_source(&file), "{file}");
            assert_eq!(registry_package(&file), Some("tokio-1.54.1"));
        }
        assert!(!is_own_source(
            "/usr/local/cargo/git/checkouts/foo-1a2b/3c4d5e6/src/lib.rs"
        ));
        assert!(!is_own_source("/rustc/abc/library/std/src/thread/mod.rs"));
        assert!(is_own_source("/work/app/src/registry/src.rs"));
        assert!(is_own_source("/work/app/src/lib.rs"));
    }

    fn f(function: &str, object: &str) -> Frame {
        Frame {
            function: Some(function.to_string()),
            file: None,
            line: None,
            column: None,
            object: object.to_string(),
            offset: 0,
            inlined: false,
        }
    }

    fn exe(function: &str) -> Frame {
        f(function, EXE)
    }

    /// The frames libtest puts under every test body, outermost last.
    fn libtest_tail() -> Vec<Frame> {
        vec![
            exe("core::ops::function::FnOnce::call_once"),
            exe("test::__rust_begin_short_backtrace::<core::result::Result<(), alloc::string::String>, fn()>"),
            exe("test::run_test_in_process"),
            exe("std::sys::backtrace::__rust_begin_short_backtrace::<test::run_test::{closure#1}, ()>"),
            f("start_thread", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
        ]
    }

    fn stack(body: &[Frame]) -> Vec<Frame> {
        let mut v = body.to_vec();
        v.extend(libtest_tail());
        v
    }

    #[test]
    fn a_forwarding_global_allocator_is_trimmed_as_allocator_frames() {
        let frames = vec![
            f("malloc", "/rt/libleakcheck_runtime.so"),
            f(
                "<counting_alloc::Counter as core::alloc::global::GlobalAlloc>::alloc",
                EXE,
            ),
            f("__rustc::__rust_alloc", EXE),
            f("alloc::alloc::alloc", EXE),
            f("counting_alloc::tests::forgets_a_buffer", EXE),
        ];
        assert_eq!(allocator_prefix_len(&frames), 4);
        // A wrapping allocator's helper, inside the shim, is the allocator too, however it
        // is named; so is an allocation the allocator makes for its own books.
        let wrapped = vec![
            f("malloc", "/rt/libleakcheck_runtime.so"),
            f(
                "<std::alloc::System as core::alloc::global::GlobalAlloc>::alloc",
                EXE,
            ),
            f(
                "tracking_allocator::Allocator<A>::get_wrapped_allocation",
                EXE,
            ),
            f(
                "<tracking_allocator::Allocator<A> as core::alloc::global::GlobalAlloc>::alloc",
                EXE,
            ),
            f("__rustc::__rust_alloc", EXE),
            f("alloc::vec::Vec<T>::push", EXE),
            f("books::Ledger::record", EXE),
            f(
                "<books::Ledger as core::alloc::global::GlobalAlloc>::alloc",
                EXE,
            ),
            f("__rust_alloc", EXE),
            f("alloc::alloc::alloc", EXE),
            f("counting_alloc::tests::forgets_a_buffer", EXE),
        ];
        assert_eq!(allocator_prefix_len(&wrapped), 10);
        // The allocation-error hook is no allocation shim.
        let hook = [exe("app::f"), f("__rustc::__rust_alloc_error_handler", EXE)];
        assert_eq!(allocator_prefix_len(&hook), 0);
        // A user function merely named like an allocator method is not one.
        assert!(!is_allocator_frame(&f(
            "counting_alloc::Counter::alloc",
            EXE
        )));
    }

    #[test]
    fn std_frames_with_nested_qualified_paths_are_not_the_test_s() {
        // std's copy of the main thread's name, made before main: a test that ends the
        // process itself never frees it.
        let s = vec![
            f("<<alloc::boxed::Box<str> as core::convert::From<&str>>::from as core::ops::function::FnOnce<(&str,)>>::call_once", EXE),
            f("std::sys::pal::unix::stack_overflow::thread_info::set_current_info", EXE),
            f("std::rt::lang_start_internal", EXE),
            f("main", EXE),
        ];
        assert_eq!(classify(&s, EXE).0, StackKind::Harness);
        let user = vec![f(
            "<<leaky::Cache as Default>::default as FnOnce<()>>::call_once",
            EXE,
        )];
        assert_eq!(classify(&user, EXE).0, StackKind::Leak);
    }

    #[test]
    fn allocator_frames_are_trimmed_up_to_the_first_caller() {
        let frames = vec![
            f("malloc", "/x/libleakcheck_runtime.so"),
            f("imalloc_body", "/x/libleakcheck_runtime.so"),
            exe("__rustc::__rust_alloc"),
            exe("<std::alloc::System as core::alloc::global::GlobalAlloc>::alloc"),
            exe("alloc::alloc::alloc"),
            exe("alloc::raw_vec::RawVecInner<A>::try_allocate_in"),
            exe("leaky::tests::forget_vec"),
        ];
        assert_eq!(allocator_prefix_len(&frames), 5);
        let mut jemalloc_inline = f("imalloc_body", EXE);
        jemalloc_inline.file = Some("/r/tikv-jemalloc-sys-0.7.1/jemalloc/src/jemalloc.c".into());
        assert_eq!(allocator_prefix_len(&[jemalloc_inline, exe("leaky::x")]), 1);
        assert_eq!(allocator_prefix_len(&[exe("leaky::x")]), 0);
        // A release build on tikv-jemallocator, no debug info: jemalloc's static functions
        // by their C names; a Rust function of the same name is the user's.
        let named = |n: &str| Frame {
            function: Some(n.into()),
            ..exe("x")
        };
        let release = [
            named("prof_backtrace_impl"),
            named("prof_backtrace"),
            named("imalloc_body"),
            named("_rjem_malloc"),
            named("tikv_jemallocator::alloc"),
            named("app::prof_cache"),
        ];
        assert_eq!(allocator_prefix_len(&release), 5);
        assert!(!is_allocator_frame(&named("app::prof_cache")));
    }

    #[test]
    fn a_test_body_allocation_is_a_leak() {
        let s = stack(&[
            exe("alloc::vec::from_elem"),
            exe("leaky::tests::forget_vec"),
            exe("leaky::tests::forget_vec::{{closure}}"),
        ]);
        assert_eq!(classify(&s, EXE), (StackKind::Leak, None));
    }

    #[test]
    fn once_initialisers_are_one_time_with_the_frame_named() {
        for marker in [
            "std::sync::once_lock::OnceLock<T>::initialize",
            "<std::sync::lazy_lock::LazyLock<T,F> as core::ops::deref::Deref>::deref",
            "std::sync::poison::once::Once::call_once::{{closure}}",
            "once_cell::imp::OnceCell<T>::initialize",
            "lazy_static::lazy::Lazy<T>::get",
            "std::backtrace_rs::symbolize::gimli::Cache::with_global",
        ] {
            let s = stack(&[
                exe("alloc::vec::from_elem"),
                exe("leaky::make"),
                exe(marker),
                exe("leaky::tests::t"),
            ]);
            let (kind, reason) = classify(&s, EXE);
            assert_eq!(kind, StackKind::OneTime, "{marker}");
            assert!(
                reason.unwrap().contains(marker.trim_start_matches('<')),
                "{marker}"
            );
        }
    }

    #[test]
    fn harness_memory_has_no_test_body_frame() {
        // libtest's own bookkeeping on the main thread, with the generated `leaky::main`.
        let main_thread = vec![
            exe("alloc::string::String::from"),
            exe("test::run_tests"),
            exe("test::test_main_static"),
            exe("leaky::main"),
            exe("std::rt::lang_start_internal"),
            exe("main"),
        ];
        assert_eq!(classify(&main_thread, EXE).0, StackKind::Harness);
        // Only std and libc frames.
        let std_only = vec![
            exe("std::io::stdio::stdout"),
            f("__libc_start_main", "/lib/libc.so.6"),
        ];
        assert_eq!(classify(&std_only, EXE).0, StackKind::Harness);
    }

    #[test]
    fn glibc_thread_cache_is_harness_even_when_a_test_spawned_the_thread() {
        for names in [
            [
                "allocate_dtv",
                "__GI__dl_allocate_tls",
                "__pthread_create_2_1",
            ],
            ["calloc", "_dl_allocate_tls", "pthread_create"],
        ] {
            let mut body: Vec<Frame> = names
                .iter()
                .map(|n| f(n, "/lib/ld-linux-x86-64.so.2"))
                .collect();
            body.push(exe("std::thread::spawn"));
            body.push(exe("leaky::tests::joined_thread"));
            let (kind, reason) = classify(&stack(&body), EXE);
            assert_eq!(kind, StackKind::Harness, "{names:?}");
            assert!(reason.unwrap().contains("glibc"));
        }
        // But a thread's own allocation, made by the test's closure, is the test's.
        let thread_body = vec![
            exe("alloc::vec::from_elem"),
            exe("leaky::tests::detached::{{closure}}"),
            exe("std::sys::backtrace::__rust_begin_short_backtrace"),
            f("start_thread", "/lib/libc.so.6"),
        ];
        assert_eq!(classify(&thread_body, EXE).0, StackKind::Leak);
    }

    #[test]
    fn a_test_body_inlined_into_libtests_entry_is_the_tests_code() {
        // Release build: the body of `tests::tiny_leak` lives in the function libtest calls,
        // whose only symbol is the generic closure shim.
        let mut entry_frame = exe("core::ops::function::FnOnce::call_once");
        entry_frame.offset = 0x3e350;
        let s = stack(&[entry_frame]);
        assert_eq!(classify(&s, EXE).0, StackKind::Harness, "by names alone");
        assert_eq!(
            classify_test(&s, EXE, Some((0x3e330, 0x3e3ab))).kind,
            StackKind::Leak
        );
        // The same name elsewhere in the binary is not the test's.
        assert_eq!(
            classify_test(&s, EXE, Some((0x1000, 0x1040))).kind,
            StackKind::Harness
        );
    }

    #[test]
    fn unresolved_frames_of_the_test_binary_keep_a_stack_reportable() {
        let mut unknown = exe("");
        unknown.function = None;
        assert!(is_user_frame(&unknown, EXE));
        let mut libc_unknown = f("", "/lib/libc.so.6");
        libc_unknown.function = None;
        assert!(!is_user_frame(&libc_unknown, EXE));
        assert!(!is_user_frame(
            &exe("<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop"),
            EXE
        ));
        assert!(is_user_frame(
            &exe("<leaky::Node as core::ops::drop::Drop>::drop"),
            EXE
        ));
    }
}
