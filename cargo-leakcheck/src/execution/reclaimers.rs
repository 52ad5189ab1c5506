//! The deferred-reclamation runtimes a test binary links, found in its symbol table, for the
//! runtime to drain before it measures a run (see the runtime's `drain` module).
//!
//! The runtime drains a collector by entering and leaving it repeatedly from a fresh thread;
//! it needs the two functions of the same version of the reclaimer's crate (for
//! crossbeam-epoch, `crossbeam_epoch::default::pin` and `<Guard as Drop>::drop`). Each kind
//! is one row of [`finder`]: its crate and the two functions' paths. A binary may link
//! several versions of a crate, each with its own collector; each version's functions have
//! their own mangled names (the crate's hash is in them), while the copies of one function
//! that inlining leaves in several crates share one. The two functions of a version are
//! paired by the crate hash the v0 mangling spells out. The legacy mangling's hash is the
//! function's, not the crate's, and where a function lies says nothing either (a debug
//! build puts the copy of `pin` next to the crate that calls it, megabytes from `Guard`'s
//! drop), so several versions under the legacy mangling are refused, and then that kind is
//! not drained: a guard handed to another version's `drop` would corrupt that version's
//! state. Their tests settle over extra runs, as before.

use leakcheck_protocol::drain::{Collector, Reclaimer, MAX_COLLECTORS};
use std::collections::BTreeMap;

/// A function symbol: its raw (mangled) name and address.
pub struct Symbol<'a> {
    pub name: &'a str,
    pub address: u64,
}

/// How one kind's collectors are found in a symbol table: the row a new kind adds.
struct Finder {
    /// The crate, as its symbols spell it: only names that mention it are demangled
    /// (demangling every symbol costs more than the rest), and the v0 mangling's crate hash
    /// is the one before it.
    krate: &'static str,
    /// The function that enters a collector, demangled without its hash.
    enter: &'static str,
    /// The function that leaves it again, demangled without its hash.
    leave: &'static str,
}

/// The finder of each kind.
fn finder(kind: Reclaimer) -> Finder {
    match kind {
        Reclaimer::CrossbeamEpoch => Finder {
            krate: "crossbeam_epoch",
            enter: "crossbeam_epoch::default::pin",
            leave: "<crossbeam_epoch::guard::Guard as core::ops::drop::Drop>::drop",
        },
    }
}

/// Which of a collector's two functions a symbol is.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ReclaimerRole {
    Enter,
    Leave,
}

impl Finder {
    /// Which of the two functions a raw symbol name is, if either.
    fn role(&self, raw: &str) -> Option<ReclaimerRole> {
        if !raw.contains(self.krate) {
            return None;
        }
        let demangled = addr2line::demangle_auto(raw.into(), None);
        match crate::execution::symbolize::strip_hash(&demangled) {
            f if f == self.enter => Some(ReclaimerRole::Enter),
            f if f == self.leave => Some(ReclaimerRole::Leave),
            _ => None,
        }
    }

    /// The crate hash of a v0-mangled name (`Cs<hash>_15crossbeam_epoch`), if it is one.
    fn v0_crate<'a>(&self, raw: &'a str) -> Option<&'a str> {
        let at = raw.find(&format!("_{}{}", self.krate.len(), self.krate))?;
        let start = raw[..at].rfind("Cs")?;
        raw.starts_with("_R").then_some(&raw[start..at])
    }
}

/// Why a reclaimer's collectors in a binary cannot be drained.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PairingError {
    /// As many versions of the enter function as of the leave function are needed.
    #[error("{enters} versions of {enter} but {leaves} of {leave}")]
    Unmatched {
        enter: &'static str,
        /// Versions of the enter function.
        enters: usize,
        leave: &'static str,
        /// Versions of the leave function.
        leaves: usize,
    },
    /// More versions than the runtime drains.
    #[error("{1} {0} versions (at most {MAX_COLLECTORS} collectors are drained)")]
    TooMany(Reclaimer, usize),
    /// Several versions under the legacy mangling.
    #[error("{1} {0} versions, whose functions the legacy mangling does not tell apart")]
    Indistinct(Reclaimer, usize),
    /// An enter function without a partner of its own.
    #[error("{0}'s {1} and {2} could not be paired by version")]
    Unpaired(Reclaimer, &'static str, &'static str),
}

/// The collectors of every kind in a binary with these function symbols (none when it
/// links no reclaimer), and why a kind's could not be paired, when they cannot.
pub fn collectors<'a>(
    symbols: impl IntoIterator<Item = Symbol<'a>>,
) -> (Vec<Collector>, Vec<PairingError>) {
    let finders = Reclaimer::ALL.map(|k| (k, finder(k)));
    // Each distinct name is one version's function; its copies' addresses, by kind.
    let mut found: BTreeMap<(Reclaimer, ReclaimerRole), BTreeMap<&str, Vec<u64>>> = BTreeMap::new();
    for s in symbols {
        for (kind, f) in &finders {
            if let Some(role) = f.role(s.name) {
                let versions = found.entry((*kind, role)).or_default();
                versions.entry(s.name).or_default().push(s.address);
            }
        }
    }
    let (mut out, mut problems) = (Vec::new(), Vec::new());
    for (kind, f) in &finders {
        let enters = found
            .remove(&(*kind, ReclaimerRole::Enter))
            .unwrap_or_default();
        let leaves = found
            .remove(&(*kind, ReclaimerRole::Leave))
            .unwrap_or_default();
        match pair(*kind, f, &enters, &leaves) {
            Ok(c) if out.len() + c.len() > MAX_COLLECTORS => {
                problems.push(PairingError::TooMany(*kind, c.len()))
            }
            Ok(c) => out.extend(c),
            Err(why) => problems.push(why),
        }
    }
    (out, problems)
}

/// One kind's collectors, from the names of its two functions and their copies' addresses:
/// an empty list when the binary links neither, an error saying why when they cannot be
/// paired.
fn pair(
    kind: Reclaimer,
    f: &Finder,
    enters: &BTreeMap<&str, Vec<u64>>,
    leaves: &BTreeMap<&str, Vec<u64>>,
) -> Result<Vec<Collector>, PairingError> {
    if enters.is_empty() || leaves.is_empty() {
        return Ok(Vec::new());
    }
    if enters.len() != leaves.len() {
        return Err(PairingError::Unmatched {
            enter: f.enter,
            enters: enters.len(),
            leave: f.leave,
            leaves: leaves.len(),
        });
    }
    if enters.len() > MAX_COLLECTORS {
        return Err(PairingError::TooMany(kind, enters.len()));
    }
    let mut out = Vec::new();
    let mut taken: Vec<&str> = Vec::new();
    for (enter_name, enter_at) in enters {
        let partner = match f.v0_crate(enter_name) {
            Some(krate) => leaves
                .keys()
                .find(|l| f.v0_crate(l) == Some(krate))
                .copied(),
            None if enters.len() == 1 => leaves.keys().next().copied(),
            None => return Err(PairingError::Indistinct(kind, enters.len())),
        };
        let Some(leave_name) = partner.filter(|l| !taken.contains(l)) else {
            return Err(PairingError::Unpaired(kind, f.enter, f.leave));
        };
        taken.push(leave_name);
        out.push(Collector {
            kind,
            enter: enter_at[0],
            leave: leaves[leave_name][0],
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

    /// crossbeam-epoch's collectors, or the one problem with them.
    fn epoch_collectors<'a>(
        symbols: impl IntoIterator<Item = Symbol<'a>>,
    ) -> Result<Vec<Collector>, PairingError> {
        match collectors(symbols) {
            (found, problems) if problems.is_empty() => Ok(found),
            (_, mut problems) => Err(problems.remove(0)),
        }
    }

    fn epoch(enter: u64, leave: u64) -> Collector {
        Collector {
            kind: Reclaimer::CrossbeamEpoch,
            enter,
            leave,
        }
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
        assert_eq!(found, [epoch(0x1000, 0x1200)]);
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
        assert!(found.contains(&epoch(0x1000, 0x8010)));
        assert!(found.contains(&epoch(0x8000, 0x1010)));
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
