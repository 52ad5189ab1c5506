//! How a command-line flag's value becomes a setting of the command line's layer: each flag
//! of `cli::SettingFlags` names the function here that checks it. A problem is the text of
//! the usage error, naming the flag.

use crate::config::size::parse_size;

/// A value clap already checked, as the setting it gives.
pub fn given<V: Given>(_flag: &str, v: &V) -> Result<Option<V::Setting>, String> {
    Ok(v.setting())
}

/// What a flag clap already checked gives: an optional value, the value given; a switch,
/// on when given (not given, the command line does not say).
pub trait Given {
    /// The setting's type.
    type Setting;
    /// The setting, or None when the flag is not given.
    fn setting(&self) -> Option<Self::Setting>;
}

impl<T: Clone> Given for Option<T> {
    type Setting = T;
    fn setting(&self) -> Option<T> {
        self.clone()
    }
}

impl Given for bool {
    type Setting = bool;
    fn setting(&self) -> Option<bool> {
        self.then_some(true)
    }
}

/// A size: `0B`, `512B`, `4KiB`, `1MiB`.
pub fn size(flag: &str, v: &Option<String>) -> Result<Option<u64>, String> {
    v.as_deref()
        .map(|t| parse_size(t).map_err(|e| format!("{flag}: {e}")))
        .transpose()
}

/// A number of seconds, at least 1.
pub fn seconds(flag: &str, v: &Option<u64>) -> Result<Option<u64>, String> {
    match v {
        Some(0) => Err(format!("{flag} must be at least 1 second")),
        _ => Ok(*v),
    }
}
