//! End-to-end tests: run the built `cargo-leakcheck` on copies of the fixture crates and
//! check verdicts, allocation sites, exit codes, the report schema and the artifacts
//! against the table in `expected.rs`.

mod expected;
mod faults;
mod harness;

mod ahead;
mod baseline;
mod bench;
mod canary;
mod ci_examples;
mod ci_sim;
mod cli_errors;
mod config;
mod heap_diff;
mod html_page;
mod nextest;
mod outputs;
mod reruns;
mod run_service;
mod shards;
mod verdicts;
