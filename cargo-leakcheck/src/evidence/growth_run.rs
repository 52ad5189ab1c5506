//! What a bench's or a service's run left, read: its heap snapshots on the time axis of
//! the runtime's timeline, and for a service the snapshot after its load.

use crate::evidence::normalized::{FrameKey, NormalizedProfile};
use crate::evidence::paths::HeldPath;
use crate::evidence::profile::ProfileError;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// One heap snapshot and when it was taken, in seconds since the first.
pub struct Snapshot {
    /// Seconds since the first snapshot.
    pub seconds: f64,
    /// Live bytes per stack (unbiased).
    pub profile: NormalizedProfile,
    /// The program's own collections' lengths at that moment, by index in its table.
    pub lengths: BTreeMap<u32, i64>,
}

/// A snapshot taken a while after the growth window (a service's, once its load ended and
/// a settle pause passed), and how the reachability scan then found each stack held.
pub struct After {
    /// The snapshot, or why it could not be read.
    pub profile: Result<NormalizedProfile, ProfileError>,
    /// Retention paths by the held stack's frames (empty without a scan).
    pub held: HashMap<Vec<FrameKey>, HeldPath>,
    /// The program's own collections' lengths then, when the timeline gives them.
    pub lengths: Option<BTreeMap<u32, i64>>,
}

/// Why a run's snapshots could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotsError {
    /// The runtime's timeline of the dumps could not be read.
    #[error("{}: {source}", path.display())]
    Timeline {
        /// The timeline.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A dump (not the last) could not be read; the error names the file.
    #[error(transparent)]
    Dump(#[from] ProfileError),
}

/// What a bench's or a service's run left, loaded ([`crate::evidence::load`]): its snapshots on the
/// time axis of its timeline, and for a service the snapshot after its load.
pub struct GrowthEvidence {
    /// The tail of its stderr, for a message ([`crate::evidence::stderr_tail`]).
    pub stderr_tail: String,
    /// Oldest first, or why they could not be read.
    pub snapshots: Result<Vec<Snapshot>, SnapshotsError>,
    pub after: Option<After>,
    /// The program's collections, in the order of its table.
    pub collections: std::sync::Arc<crate::evidence::CollectionTable>,
}
