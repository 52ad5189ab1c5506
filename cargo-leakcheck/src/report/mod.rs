//! Writers of the run's results: the JSON report, JUnit XML, flame graphs, and the human
//! summary.

pub mod bench;
pub mod cost;
pub mod flamegraph;
pub mod github;
pub mod html;
pub mod human;
pub mod json;
pub mod judged;
pub mod junit;
pub mod markup;
pub mod plot;
pub mod pprof;
#[cfg(test)]
pub mod snapshot;
#[cfg(test)]
mod snapshots;
pub mod suppressions;
