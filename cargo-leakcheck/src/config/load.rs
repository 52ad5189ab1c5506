//! Finding the configuration file and reading it as text.

use crate::config::read::{parse, ConfigError};
use crate::config::settings::{Config, FILE_NAMES};
use std::path::{Path, PathBuf};

/// Finds and reads the configuration: `explicit` (which must exist), else the first of
/// [`FILE_NAMES`] under the workspace root, else the built-in defaults.
pub fn load(explicit: Option<&Path>, root: &Path) -> Result<(Config, Vec<String>), LoadError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match FILE_NAMES
            .iter()
            .map(|n| root.join(n))
            .find(|p| p.is_file())
        {
            Some(p) => p,
            None => return Ok((Config::default(), Vec::new())),
        },
    };
    let bytes = std::fs::read(&path).map_err(|e| LoadError::Read(path.clone(), e))?;
    let text = decode(&bytes).map_err(|why| LoadError::Encoding(path.clone(), why))?;
    let (config, mut warnings) = parse(text, &path).map_err(LoadError::Invalid)?;
    if explicit.is_none() {
        for other in FILE_NAMES
            .iter()
            .map(|n| root.join(n))
            .filter(|p| p.is_file() && *p != path)
        {
            warnings.push(format!(
                "{} is ignored: {} is used",
                other.display(),
                path.display()
            ));
        }
    }
    Ok((config, warnings))
}

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read configuration `{path}`: {1}", path = .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    /// The file is not UTF-8 text.
    #[error("invalid configuration `{path}`: {1}", path = .0.display())]
    Encoding(PathBuf, NotUtf8),
    /// The file has errors.
    #[error(transparent)]
    Invalid(ConfigError),
}

/// Why a configuration file is not UTF-8 text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotUtf8 {
    /// It looks like UTF-16 (which byte order, whether with a byte-order mark).
    #[error("the file is not UTF-8: it looks like {0}; save it as UTF-8")]
    Utf16(&'static str),
    /// Invalid UTF-8 at this line and byte.
    #[error("the file is not valid UTF-8 (line {line}, byte {byte})")]
    Invalid {
        /// 1-based line.
        line: usize,
        /// 0-based byte offset.
        byte: usize,
    },
}

/// The text of a configuration file: UTF-8, with or without a byte-order mark. Anything
/// else gets a reason that says what it looks like (editors on Windows save UTF-16).
pub(super) fn decode(bytes: &[u8]) -> Result<&str, NotUtf8> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    // UTF-16 of ASCII text is valid UTF-8, zero bytes and all (TOML allows none), so it
    // is looked for first: a byte-order mark, or a zero in most odd or even positions.
    let pairs = bytes.len() / 2;
    let zeros_at = |odd: usize| {
        bytes
            .iter()
            .skip(odd)
            .step_by(2)
            .filter(|&&b| b == 0)
            .count()
    };
    let utf16 = if bytes.starts_with(b"\xFF\xFE") {
        Some("UTF-16 (little-endian, with a byte-order mark)")
    } else if bytes.starts_with(b"\xFE\xFF") {
        Some("UTF-16 (big-endian, with a byte-order mark)")
    } else if pairs >= 2 && zeros_at(1) * 4 >= pairs * 3 {
        Some("UTF-16 (little-endian)")
    } else if pairs >= 2 && zeros_at(0) * 4 >= pairs * 3 {
        Some("UTF-16 (big-endian)")
    } else {
        None
    };
    if let Some(kind) = utf16 {
        return Err(NotUtf8::Utf16(kind));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let byte = e.valid_up_to();
        let line = bytes[..byte].iter().filter(|&&b| b == b'\n').count() + 1;
        NotUtf8::Invalid { line, byte }
    })
}
