//! Renderers of the run's report and the exporters that write them ([`export`]): the
//! JSON report, the page, JUnit XML, GitHub's annotations, flame graphs and pprof profiles
//! ([`artifacts`]), and the summary ([`human`]). The text they share is in [`text`].

pub mod artifacts;
pub mod bench;
#[cfg(test)]
mod consistency;
pub mod cost;
#[cfg(test)]
pub mod expected_text;
pub mod export;
pub mod flamegraph;
pub mod github;
pub mod html;
pub mod human;
pub mod json;
pub mod judged;
pub mod junit;
pub mod markup;
pub mod metrics;
pub mod plot;
pub mod pprof;
#[cfg(test)]
mod rendered;
pub mod suppressions;
pub mod text;
