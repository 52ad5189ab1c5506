//! Configuration, built once on first use and kept for the life of the process.

use std::sync::LazyLock;

/// The service configuration.
pub struct Config {
    /// Name the service reports.
    pub service_name: String,
    /// Largest number of cache entries the service should keep.
    pub max_cache_entries: usize,
    /// Path prefixes the service answers for.
    pub allowed_prefixes: Vec<String>,
    /// Body of the "404 Not Found" page (about 1.6 KB).
    pub not_found_page: String,
}

static CONFIG: LazyLock<Config> = LazyLock::new(|| Config {
    service_name: std::env::var("DEMO_SERVICE_NAME").unwrap_or_else(|_| "demo".to_owned()),
    max_cache_entries: 1024,
    allowed_prefixes: ["/articles", "/docs", "/static"].map(String::from).to_vec(),
    not_found_page: format!(
        "<html><body><h1>404</h1>{}</body></html>",
        "<p>No such page.</p>".repeat(80)
    ),
});

/// The process-wide configuration (built on the first call).
pub fn get() -> &'static Config {
    &CONFIG
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CLEAN (one-time): the first call builds the configuration in a `LazyLock`, and it is
    /// still allocated when the test ends. That is one-time initialisation, not a leak: a
    /// second call reuses it, and nothing grows.
    #[test]
    fn defaults_are_sane() {
        let config = get();
        assert!(!config.service_name.is_empty());
        assert!(config.max_cache_entries > 0);
        assert_eq!(config.allowed_prefixes.len(), 3);
        assert!(config.not_found_page.contains("404"));
        assert!(std::ptr::eq(config, get()));
    }
}
