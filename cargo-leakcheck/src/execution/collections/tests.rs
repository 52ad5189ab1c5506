//! The walk, on this very test binary: statics of every shape the walk follows, filled in,
//! and each entry of the table followed through this process's memory as the runtime
//! follows it.

use super::*;
use leakcheck_protocol::collections::{evaluate, Entries, Memory, Read, ABSENT};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicPtr;
use std::sync::{Arc, LazyLock, Mutex, OnceLock, RwLock};

static SEEN: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
static NEVER_SET: OnceLock<Mutex<Vec<u8>>> = OnceLock::new();
static WINDOW: Mutex<VecDeque<u32>> = Mutex::new(VecDeque::new());
static SHARED: OnceLock<Arc<Mutex<HashMap<u64, u64>>>> = OnceLock::new();
static LAZY: LazyLock<RwLock<Vec<String>>> = LazyLock::new(Default::default);
static MAYBE: Mutex<Option<Box<Deadlines>>> = Mutex::new(None);
static NOTHING: Mutex<Option<Box<Deadlines>>> = Mutex::new(None);
static LOG: Mutex<String> = Mutex::new(String::new());
static SHARDS: [Mutex<Vec<u16>>; 3] = [const { Mutex::new(Vec::new()) }; 3];
static STATE: Mutex<State> = Mutex::new(State {
    ids: Vec::new(),
    count: 0,
});
static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// A value behind a raw pointer, as `Box::into_raw` leaves it (lazy_static 0.2's cell).
static RAW: AtomicPtr<Mutex<Vec<u32>>> = AtomicPtr::new(std::ptr::null_mut());
static RAW_NULL: AtomicPtr<Mutex<Vec<u32>>> = AtomicPtr::new(std::ptr::null_mut());
/// A raw pointer to bytes: not followed.
static RAW_BYTES: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

struct State {
    ids: Vec<u64>,
    count: u64,
}

/// Behind a `Box`, in an `Option`: the walk reads it, the test does not.
#[allow(dead_code)]
struct Deadlines {
    by_time: BTreeMap<u64, u64>,
}

thread_local! {
    static LOCAL: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// A scoped pointer, as runtimes keep their current context: not followed.
    static LOCAL_RAW: std::cell::Cell<*const Mutex<Vec<u8>>> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Fills the statics once, as a test binary's code would.
fn fill() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let seen = SEEN.get_or_init(Default::default);
        seen.lock().unwrap().extend([1, 2, 3]);
        WINDOW.lock().unwrap().extend([7; 5]);
        SHARED
            .get_or_init(Default::default)
            .lock()
            .unwrap()
            .extend([(1, 1), (2, 2)]);
        LAZY.write().unwrap().push("x".into());
        *MAYBE.lock().unwrap() = Some(Box::new(Deadlines {
            by_time: [(1, 1), (2, 2), (3, 3), (4, 4)].into(),
        }));
        LOG.lock().unwrap().push_str("hello");
        SHARDS[0].lock().unwrap().push(1);
        SHARDS[2].lock().unwrap().extend([1, 2]);
        let mut state = STATE.lock().unwrap();
        state.ids.extend([5; 6]);
        state.count = 1;
        COUNT.store(7, std::sync::atomic::Ordering::Relaxed);
        LOCAL.with(|l| l.borrow_mut().push(1));
        let raw = Box::into_raw(Box::new(Mutex::new(vec![1, 2])));
        RAW.store(raw, std::sync::atomic::Ordering::Release);
    });
    std::hint::black_box((&NEVER_SET, &NOTHING, &RAW_NULL, &RAW_BYTES));
    LOCAL_RAW.with(|l| std::hint::black_box(l.get()));
}

/// This binary's table, walked once.
fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let _busy = crate::CORES.read().unwrap_or_else(|e| e.into_inner());
        read(&std::fs::read(std::env::current_exe().unwrap()).unwrap())
    })
}

fn find(root: &str) -> &'static Collection {
    table()
        .collections
        .iter()
        .find(|c| c.root.ends_with(root))
        .unwrap_or_else(|| panic!("{root} is not in the table"))
}

/// This process's memory, read through the kernel as the runtime reads it.
struct Own;

impl Memory for Own {
    fn read(&mut self, address: u64, out: &mut [u8]) -> bool {
        let local = libc::iovec {
            iov_base: out.as_mut_ptr().cast(),
            iov_len: out.len(),
        };
        let remote = libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: out.len(),
        };
        // SAFETY: reads into `out`; the kernel checks the remote range.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        n == out.len() as isize
    }
}

/// The collection's length now, followed from its static as the runtime does.
fn length(c: &Collection) -> Read {
    let entry = Entries::of(c.program.as_bytes()).next().expect("one entry");
    assert!(!entry.thread_local);
    // The load bias, from one static whose address both the table and the process know.
    let seen = Entries::of(find("::SEEN").program.as_bytes())
        .next()
        .unwrap();
    let bias = std::ptr::addr_of!(SEEN) as u64 - seen.address;
    evaluate(entry.steps(), bias + entry.address, &mut Own)
}

#[test]
fn every_shape_of_static_is_followed_to_its_length() {
    fill();
    for (root, len) in [
        ("::SEEN", 3),
        ("::WINDOW", 5),
        ("::SHARED", 2),
        ("::LAZY", 1),
        ("::MAYBE", 4),
        ("::LOG", 5),
        ("::SHARDS", 3),
        ("::RAW", 2),
    ] {
        assert_eq!(length(find(root)).reading, len, "{root}");
    }
    // Not set yet, or `None`: no collection there.
    assert_eq!(length(find("::NEVER_SET")).reading, ABSENT);
    assert_eq!(length(find("::NOTHING")).reading, ABSENT);
    assert_eq!(
        length(find("::RAW_NULL")).reading,
        ABSENT,
        "a null raw pointer"
    );
}

#[test]
fn each_collection_is_named_by_its_root_its_field_and_its_type() {
    fill();
    let seen = find("::SEEN");
    assert_eq!(seen.type_name, "HashSet<u64>");
    assert!(!seen.thread_local && !seen.bytes && seen.field.is_empty());
    assert_eq!(seen.entry_size, 8);
    assert!(seen
        .file
        .as_deref()
        .is_some_and(|f| f.ends_with("tests.rs")));
    assert!(seen.line.is_some());
    let state = find("::STATE");
    assert_eq!(
        (state.field.as_str(), state.type_name.as_str()),
        (".ids", "Vec<u64>")
    );
    assert_eq!(find("::LOG").type_name, "String");
    assert!(find("::LOG").bytes);
    assert_eq!(find("::SHARED").type_name, "HashMap<u64, u64>");
    assert_eq!(find("::MAYBE").type_name, "BTreeMap<u64, u64>");
    assert_eq!(find("::MAYBE").field, ".by_time");
    assert_eq!(find("::MAYBE").entry_size, 16);
    // A thread-local, named as `thread_local!` names it.
    let local = find("::LOCAL");
    assert!(local.thread_local);
    assert_eq!(local.type_name, "Vec<u8>");
    // Nothing that is not a collection.
    for root in ["::COUNT", "::RAW_BYTES", "::LOCAL_RAW"] {
        assert!(!table().collections.iter().any(|c| c.root.ends_with(root)));
    }
    assert_eq!(find("::RAW").type_name, "Vec<u32>");
}

#[test]
fn the_buffer_of_a_collection_is_where_its_elements_are() {
    fill();
    let window = length(find("::WINDOW"));
    let buffer = WINDOW.lock().unwrap().as_slices().0.as_ptr() as u64;
    assert_eq!(window.buffer, buffer);
    let seen = length(find("::SEEN"));
    assert_ne!(seen.buffer, 0, "a table that holds entries has its buffer");
}

#[test]
fn the_table_the_runtime_reads_names_the_build_first() {
    let text = table().render("ab01");
    assert!(text.starts_with("b ab01\nc "), "{}", &text[..20]);
    assert_eq!(
        Entries::of(text.as_bytes()).count(),
        table().collections.len(),
        "every collection's entry decodes"
    );
}
