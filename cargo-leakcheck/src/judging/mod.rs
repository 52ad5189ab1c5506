//! The judging stage: each test's, bench's or service's evidence, loaded
//! ([`crate::evidence::load`]) once its processes have run, handed to the analysis that
//! decides ([`crate::analysis`]); when the run records golden cases, each case's evidence is
//! written beside its verdict ([`capture`]). It starts no process.

pub(crate) mod capture;
pub(crate) mod suite;
pub(crate) mod verdicts;
