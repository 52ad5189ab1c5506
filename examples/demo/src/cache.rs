//! A process-wide response cache in front of a (simulated) slow backend.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// Every response ever rendered, by path. Nothing is ever evicted: that is the bug.
static RESPONSES: LazyLock<Mutex<HashMap<String, Arc<[u8]>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Stands in for an expensive backend call: renders a page of about 1 KiB for `path`.
fn render(path: &str) -> Vec<u8> {
    format!("<html><body><h1>{path}</h1>{:<1000}</body></html>", "").into_bytes()
}

/// Returns the response for `path`, rendering it on the first request only.
pub fn get(path: &str) -> Arc<[u8]> {
    let mut responses = RESPONSES.lock().unwrap();
    let entry = responses.entry(path.to_owned());
    let body = entry.or_insert_with(|| Arc::from(render(path))); // leak-site: repeated_requests_hit_the_cache
    Arc::clone(body)
}

/// Number of cached responses.
pub fn len() -> usize {
    RESPONSES.lock().unwrap().len()
}

/// Sessions handed out so far.
static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// Starts a new visitor session; its id ends up in the links it follows.
pub fn new_session() -> u64 {
    SESSIONS.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LEAK (still reachable): the cache is keyed by the whole path, session id included,
    /// so every visit adds 50 pages (about 50 KiB) that stay in the global cache: run the
    /// test again and it grows again, the classic production leak. A bounded cache
    /// (evicting old entries), or a key without the session, would make this test clean.
    #[test]
    fn repeated_requests_hit_the_cache() {
        let session = new_session();
        let before = len();
        for i in 0..50 {
            let path = format!("/articles/{i}?session={session}");
            let first = get(&path);
            let second = get(&path);
            assert!(
                Arc::ptr_eq(&first, &second),
                "second request must be served from the cache"
            );
        }
        assert_eq!(len() - before, 50);
    }
}
