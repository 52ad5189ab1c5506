//! The deferred-reclamation runtimes a test binary links, found in its symbol table, for the
//! runtime to drain before it measures a run (see the runtime's `drain` module).
//!
//! crossbeam-epoch's default collector is drained by pinning it repeatedly from a fresh
//! thread: the runtime needs `crossbeam_epoch::default::pin` and `<Guard as Drop>::drop` of
//! the same crossbeam-epoch version. A binary may link several versions, each with its own
//! collector; each version's functions have their own mangled names (the crate's hash is in
//! them), while the copies of one function that inlining leaves in several crates share
//! one. The two functions of a version are paired by the crate hash the v0 mangling spells
//! out. The legacy mangling's hash is the function's, not the crate's, and where a function
//! lies says nothing either (a debug build puts the copy of `pin` next to the crate that
//! calls it, megabytes from `Guard`'s drop), so several versions under the legacy mangling
//! are refused, and then nothing is drained: a guard handed to another version's `drop`
//! would corrupt that version's state. Their tests settle over extra runs, as before.

use leakcheck_protocol::drain::{Collector, MAX_COLLECTORS};
use std::collections::BTreeMap;

/// A function symbol: its raw (mangled) name and address.
pub struct Symbol<'a> {
    pub name: &'a str,
    pub address: u64,
}

/// What a symbol is to the drain.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Pin,
    Unpin,
}

/// Which of the two functions a raw symbol name is, if either. Only names that mention
/// the crate are demangled (demangling every symbol costs more than the rest).
fn role(raw: &str) -> Option<Role> {
    if !raw.contains("crossbeam_epoch") {
        return None;
    }
    let demangled = addr2line::demangle_auto(raw.into(), None);
    match crate::execution::symbolize::strip_hash(&demangled) {
        "crossbeam_epoch::default::pin" => Some(Role::Pin),
        "<crossbeam_epoch::guard::Guard as core::ops::drop::Drop>::drop" => Some(Role::Unpin),
        _ => None,
    }
}

/// The crate hash of a v0-mangled name (`Cs<hash>_15crossbeam_epoch`), if it is one.
fn v0_crate(raw: &str) -> Option<&str> {
    let at = raw.find("_15crossbeam_epoch")?;
    let start = raw[..at].rfind("Cs")?;
    raw.starts_with("_R").then_some(&raw[start..at])
}

/// Why crossbeam-epoch's collectors in a binary cannot be drained.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    /// As many versions of `pin` as of `Guard`'s drop are needed.
    #[error("{pins} versions of crossbeam_epoch::default::pin but {unpins} of Guard's drop")]
    Unmatched {
        /// Versions of `pin`.
        pins: usize,
        /// Versions of `Guard`'s drop.
        unpins: usize,
    },
    /// More versions than the runtime drains.
    #[error("{0} crossbeam-epoch versions (at most {MAX_COLLECTORS} are drained)")]
    TooMany(usize),
    /// Several versions under the legacy mangling.
    #[error(
        "{0} crossbeam-epoch versions, whose functions the legacy mangling does not tell apart"
    )]
    Indistinct(usize),
    /// A `pin` without a partner of its own.
    #[error("crossbeam-epoch's pin and Guard's drop could not be paired by version")]
    Unpaired,
}

/// crossbeam-epoch's collectors in a binary with these function symbols: an empty list
/// when it links none, an error saying why when its functions cannot be paired.
pub fn epoch_collectors<'a>(
    symbols: impl IntoIterator<Item = Symbol<'a>>,
) -> Result<Vec<Collector>, EpochError> {
    // Each distinct name is one version's function; its copies' addresses.
    let mut pins: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut unpins: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for s in symbols {
        match role(s.name) {
            Some(Role::Pin) => pins.entry(s.name).or_default().push(s.address),
            Some(Role::Unpin) => unpins.entry(s.name).or_default().push(s.address),
            None => {}
        }
    }
    if pins.is_empty() || unpins.is_empty() {
        return Ok(Vec::new());
    }
    if pins.len() != unpins.len() {
        return Err(EpochError::Unmatched {
            pins: pins.len(),
            unpins: unpins.len(),
        });
    }
    if pins.len() > MAX_COLLECTORS {
        return Err(EpochError::TooMany(pins.len()));
    }
    let mut out = Vec::new();
    let mut taken: Vec<&str> = Vec::new();
    for (pin_name, pin_at) in &pins {
        let partner = match v0_crate(pin_name) {
            Some(krate) => unpins.keys().find(|u| v0_crate(u) == Some(krate)).copied(),
            None if pins.len() == 1 => unpins.keys().next().copied(),
            None => return Err(EpochError::Indistinct(pins.len())),
        };
        let Some(unpin_name) = partner.filter(|u| !taken.contains(u)) else {
            return Err(EpochError::Unpaired);
        };
        taken.push(unpin_name);
        out.push(Collector {
            pin: pin_at[0],
            unpin: unpins[unpin_name][0],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Names as rustc 1.95 mangles them (legacy), with made-up hashes: two versions.
    const PIN_A: &str = "_ZN15crossbeam_epoch7default3pin17h1f0e2d3c4b5a6978E";
    const DROP_A: &str = "_ZN71_$LT$crossbeam_epoch..guard..Guard$u20$as$u20$core..ops..drop..Drop$GT$4drop17h0011223344556677E";
    const PIN_B: &str = "_ZN15crossbeam_epoch7default3pin17h99aa88bb77cc66ddE";
    const DROP_B: &str = "_ZN71_$LT$crossbeam_epoch..guard..Guard$u20$as$u20$core..ops..drop..Drop$GT$4drop17hffeeddccbbaa9988E";

    /// The two functions as the v0 mangling names them in a crate of hash `k`.
    fn v0_pin(k: &str) -> String {
        format!("_RNvNtCs{k}_15crossbeam_epoch7default3pin")
    }

    fn v0_drop(k: &str) -> String {
        format!("_RNvXNtCs{k}_15crossbeam_epoch5guardNtB2_5GuardNtNtNtCsgEmfK2I1SDS_4core3ops4drop4Drop4drop")
    }

    fn sym(name: &str, address: u64) -> Symbol<'_> {
        Symbol { name, address }
    }

    #[test]
    fn one_version_is_one_collector_whatever_its_copies() {
        let found = epoch_collectors([
            sym(PIN_A, 0x1000),
            sym(PIN_A, 0x9000),
            sym(DROP_A, 0x1200),
            sym("_ZN15crossbeam_epoch7default3pin28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE", 0x1100),
            sym("_ZN4core3ptr4drop17h0123456789abcdefE", 0x1300),
        ])
        .unwrap();
        assert_eq!(
            found,
            [Collector {
                pin: 0x1000,
                unpin: 0x1200
            }]
        );
    }

    #[test]
    fn two_versions_under_the_legacy_mangling_drain_nothing() {
        // However their code lies: a copy's place says nothing of its version.
        let err = epoch_collectors([
            sym(PIN_A, 0x1000),
            sym(DROP_A, 0x1400),
            sym(PIN_B, 0x8000),
            sym(DROP_B, 0x7c00),
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains("2 crossbeam-epoch versions"),
            "{err}"
        );
    }

    #[test]
    fn v0_names_are_paired_by_their_crate_whatever_the_layout() {
        let (pin_a, drop_a) = (v0_pin("1a2b3c"), v0_drop("1a2b3c"));
        let (pin_b, drop_b) = (v0_pin("9z8y7x"), v0_drop("9z8y7x"));
        // Each pin lies closer to the other version's drop: the crate hash decides.
        let found = epoch_collectors([
            sym(&pin_a, 0x1000),
            sym(&drop_b, 0x1010),
            sym(&pin_b, 0x8000),
            sym(&drop_a, 0x8010),
        ])
        .unwrap();
        assert!(found.contains(&Collector {
            pin: 0x1000,
            unpin: 0x8010
        }));
        assert!(found.contains(&Collector {
            pin: 0x8000,
            unpin: 0x1010
        }));
    }

    #[test]
    fn a_pairing_that_is_not_one_to_one_drains_nothing() {
        // Two v0 versions and a drop of a third crate: one pin has no partner.
        let (pa, pb) = (v0_pin("1a2b3c"), v0_pin("9z8y7x"));
        let (da, dc) = (v0_drop("1a2b3c"), v0_drop("5q5q5q"));
        let err = epoch_collectors([
            sym(&pa, 0x1000),
            sym(&pb, 0x1100),
            sym(&da, 0x1050),
            sym(&dc, 0x9000),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("could not be paired"), "{err}");
        // A pin without its drop (the drop was inlined everywhere).
        let err = epoch_collectors([sym(PIN_A, 0x1000), sym(PIN_B, 0x2000), sym(DROP_A, 0x1050)])
            .unwrap_err();
        assert!(err.to_string().contains("2 versions"), "{err}");
    }

    #[test]
    fn a_binary_without_crossbeam_epoch_has_no_collector() {
        assert_eq!(epoch_collectors([sym(DROP_A, 0x10)]), Ok(Vec::new()));
        assert_eq!(
            epoch_collectors([sym("_ZN3std2rt10lang_start17h0123456789abcdefE", 0x10)]),
            Ok(Vec::new())
        );
    }
}
