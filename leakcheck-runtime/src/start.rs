//! The program's `main`, wrapped: the exit handler's work is done as `main` returns, before
//! the program's own clean-up.
//!
//! glibc's `exit` runs the `atexit` handlers in reverse order of registration and then the
//! ELF destructors (`_dl_fini`, itself registered by `__libc_start_main` after this
//! library's constructor ran). The exit handler this runtime registers from its constructor
//! would therefore run last, in a process whose libraries have already freed their state:
//! a library that frees a table in an `atexit` handler or a destructor, and aborts when used
//! after that (AWS-LC's random generator), would crash the test's extra runs, and memory a
//! test grew through it would be gone before it is measured. So this library interposes
//! `__libc_start_main`, which every dynamically linked executable's start code calls through
//! its procedure linkage table, and hands it a `main` of its own that calls the program's
//! and then, on the same thread and with the program's state as `main` left it, does what
//! the exit handler would have done (see [`crate::rerun::main_returned`]). A program that
//! ends by calling `exit` itself still has that done by the exit handler.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

type Main = extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;
type StartMain = unsafe extern "C" fn(
    Main,
    c_int,
    *mut *mut c_char,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
) -> c_int;

/// The program's own `main`.
static PROGRAM_MAIN: AtomicUsize = AtomicUsize::new(0);

/// glibc's `__libc_start_main`, called with [`wrapped_main`] in place of the program's.
///
/// # Safety
/// Called by the executable's start code only, with the arguments it passes glibc.
#[no_mangle]
pub unsafe extern "C" fn __libc_start_main(
    main: Main,
    argc: c_int,
    argv: *mut *mut c_char,
    init: *mut c_void,
    fini: *mut c_void,
    rtld_fini: *mut c_void,
    stack_end: *mut c_void,
) -> c_int {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the next definition after
    // this library, libc's (its default version, the one every executable linked against
    // glibc 2.34 or later calls, and an alias of the older one).
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__libc_start_main".as_ptr()) } as usize;
    if real == 0 {
        // Without it the program cannot start at all.
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
    PROGRAM_MAIN.store(main as usize, Ordering::Release);
    // SAFETY: `real` is glibc's `__libc_start_main`, whose signature this is; every argument
    // but `main` is passed on unchanged, and `wrapped_main` has `main`'s signature.
    unsafe {
        std::mem::transmute::<usize, StartMain>(real)(
            wrapped_main,
            argc,
            argv,
            init,
            fini,
            rtld_fini,
            stack_end,
        )
    }
}

extern "C" fn wrapped_main(argc: c_int, argv: *mut *mut c_char, envp: *mut *mut c_char) -> c_int {
    let main = PROGRAM_MAIN.load(Ordering::Acquire);
    // SAFETY: the address `__libc_start_main` was handed as `main` by the start code.
    let main = unsafe { std::mem::transmute::<usize, Main>(main) };
    crate::rerun::main_starting();
    let status = main(argc, argv, envp);
    crate::rerun::main_returned(status);
    status
}
