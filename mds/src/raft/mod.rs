//! Replicated metadata (issue 37): the metadata changes as a Raft log, with openraft (0.9, storage-v2)
//! doing the consensus. A change is the `WriteSet` a transaction commits ([`LogCmd`]); the log takes the
//! journal's place: the leader proposes each commit in commit order, acknowledges it once a majority has
//! it, and every replica applies committed ones to its own database. Design notes and openraft's API as
//! read from its source: `results/issue37/`.
//!
//! - `log`: the log's storage, segment files with the journal's framing ([`log::LogStore`]).
//! - `replica`: one replica: the network between replicas, taking the lead, serving while leading.
//! - `state`: the state machine, the MDS database ([`state::StoreSm`]): applied entries into the store's
//!   overlay, snapshots of the whole database.

pub mod log;
pub mod replica;
pub mod state;

use crate::journal::WriteSet;
use serde::{Deserialize, Serialize};

/// A replica's id in the Raft group (its position in the configuration's `[[mds]]` list, plus one).
pub type NodeId = u64;

/// One log entry's command: a committed transaction's writes, with who proposed it (a leadership's
/// random stream id and the proposal's number there), so the leader knows which applied entries its
/// overlay already has.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogCmd {
    /// The leader's proposal stream (random per leadership; 0: none).
    pub stream: u64,
    /// The proposal's overlay commit number at the leader.
    pub seq: u64,
    pub writes: WriteSet,
}

openraft::declare_raft_types!(
    /// The metadata service's Raft types.
    pub MdsRaft:
        D = LogCmd,
        R = (),
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<MdsRaft>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime
);
