//! What is worked out from a report's fields rather than stored in them: a test's change
//! against the base run, the bytes the leaking tests retained, the tests not run, what a
//! collection's growth comes to in bytes.

use super::{CollectionId, CollectionReport, NotRun, Report, TestChange, TestReport, Verdict};

impl Report {
    /// The change of a test against the base run, when there is one to say.
    pub fn change_of(&self, t: &TestReport) -> Option<&TestChange> {
        self.baseline
            .as_ref()?
            .tests
            .iter()
            .find(|c| c.package == t.package && c.binary == t.binary && c.name == t.name)
    }

    /// Bytes retained by the tests that leaked, together.
    pub fn leaked_bytes(&self) -> u64 {
        self.tests
            .iter()
            .filter(|t| t.verdict == Verdict::Leak)
            .map(|t| t.retained_bytes)
            .fold(0, u64::saturating_add)
    }
}

impl NotRun {
    /// `tests` (binary id, name) not run for `why`; `None` when there are none.
    pub fn of(mut tests: Vec<String>, why: impl Into<String>) -> Option<NotRun> {
        tests.sort();
        tests.dedup();
        (!tests.is_empty()).then(|| NotRun {
            count: tests.len(),
            why: why.into(),
            tests,
        })
    }
}

impl CollectionId {
    /// What `n` entries come to in bytes, as far as the entry size is known (an entry of
    /// unknown size counts one byte).
    pub fn bytes_of(&self, n: i64) -> u64 {
        (n.max(0) as u64).saturating_mul(self.entry_bytes.max(1))
    }
}

impl CollectionReport {
    /// What the growth adds up to in bytes (see [`CollectionId::bytes_of`]).
    pub fn growth_bytes(&self) -> u64 {
        let entries: i64 = self.growth_per_run.iter().map(|g| (*g).max(0)).sum();
        self.collection.bytes_of(entries)
    }
}
