//! Which test a report is about, as the analysis receives it.

use crate::model::TargetKind;

/// Identifies a test for the report.
pub struct TestIdentity<'a> {
    /// Package name.
    pub package: &'a str,
    /// Target name.
    pub binary: &'a str,
    /// Target kind.
    pub kind: TargetKind,
    /// libtest name.
    pub name: &'a str,
}
