//! A replica's Raft hard state (term, vote, commit) and conf state: one small file,
//! `raft_state` in the partition's directory, in the controller's layout (magic `PGRS`,
//! version, term, vote, commit, the conf state, CRC32C; `raft_store::codec`).
//!
//! raft-rs requires the hard state durable before the messages that depend on it are sent
//! (a vote promised, then forgotten in a crash, lets two leaders win one term). So every
//! change replaces the file durably (temp file, fdatasync, rename, directory fsync) before
//! [`ReplicaRaftState::store`] returns.
//!
//! Crash table:
//!
//! | step | a crash there leaves | open |
//! |------|----------------------|------|
//! | write `raft_state.tmp`, fdatasync | the old `raft_state` and a `.tmp` | the old state; `.tmp` is ignored and replaced by the next write |
//! | rename over `raft_state` | the old file or the new, whole | either: the new one was not acted on yet |
//! | fsync the directory | the new file | the new state |
//!
//! A file that does not decode (CRC, magic, length) is refused: it is not something a crash
//! leaves, and a replica that forgets its vote breaks Raft's safety.

use std::path::{Path, PathBuf};

use raft::eraftpb::{ConfState, HardState};

use crate::cluster::controller::raft_store::codec::{decode_raft_state, encode_raft_state};
use crate::cluster::controller::raft_store::{RaftStoreError, read_limited};
use crate::storage::fs::write_file_durable;

/// The file in the partition's directory.
pub const RAFT_STATE_FILE: &str = "raft_state";
/// The largest file opened: a conf state of at most a few hundred replicas is far smaller.
const RAFT_STATE_BYTES_MAX: u64 = 64 * 1024;

/// A replica's durable Raft state and its copy in memory.
#[derive(Debug)]
pub struct ReplicaRaftState {
    dir: PathBuf,
    hard: HardState,
    conf: ConfState,
}

impl ReplicaRaftState {
    /// Reads the state kept in `partition_dir`; a replica never started has the empty one
    /// (term 0, no vote, nothing committed, no configuration).
    pub fn open(partition_dir: &Path) -> Result<ReplicaRaftState, RaftStoreError> {
        let (hard, conf) = match read_limited(partition_dir, RAFT_STATE_FILE, RAFT_STATE_BYTES_MAX)?
        {
            Some(bytes) => decode_raft_state(&bytes).map_err(|m| RaftStoreError::Damaged {
                path: partition_dir.join(RAFT_STATE_FILE),
                offset: 0,
                reason: m.what,
            })?,
            None => Default::default(),
        };
        Ok(ReplicaRaftState {
            dir: partition_dir.to_path_buf(),
            hard,
            conf,
        })
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf
    }

    /// Makes `hard` (and `conf`, when given) durable; nothing is written when neither
    /// changed. raft-rs never moves a term or a commit back: storing one that does is a
    /// bug upstream of this file, and stops here.
    pub fn store(
        &mut self,
        hard: &HardState,
        conf: Option<&ConfState>,
    ) -> Result<(), RaftStoreError> {
        assert!(
            hard.term >= self.hard.term && hard.commit >= self.hard.commit,
            "a replica's term and commit only grow: {:?} after {:?}",
            hard,
            self.hard
        );
        let conf = conf.unwrap_or(&self.conf);
        if *hard == self.hard && *conf == self.conf {
            return Ok(());
        }
        let bytes = encode_raft_state(hard, conf);
        write_file_durable(&self.dir, RAFT_STATE_FILE, &bytes)?;
        self.hard = hard.clone();
        self.conf = conf.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hard(term: u64, vote: u64, commit: u64) -> HardState {
        HardState {
            term,
            vote,
            commit,
            ..Default::default()
        }
    }

    #[test]
    fn a_stored_state_is_read_back_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = ReplicaRaftState::open(dir.path()).unwrap();
        assert_eq!(*state.hard_state(), HardState::default());
        assert_eq!(*state.conf_state(), ConfState::default());
        let conf = ConfState::from((vec![1, 2, 3], vec![]));
        state.store(&hard(3, 2, 17), Some(&conf)).unwrap();
        state.store(&hard(4, 0, 17), None).unwrap();
        let reopened = ReplicaRaftState::open(dir.path()).unwrap();
        assert_eq!(*reopened.hard_state(), hard(4, 0, 17));
        assert_eq!(reopened.conf_state().voters, [1, 2, 3]);
    }

    #[test]
    fn a_temp_file_left_by_a_crash_is_ignored_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = ReplicaRaftState::open(dir.path()).unwrap();
        state.store(&hard(2, 1, 5), None).unwrap();
        // A crash before the rename leaves the temp file of a newer state: not acted on.
        let newer = encode_raft_state(&hard(9, 9, 9), &ConfState::default());
        std::fs::write(dir.path().join("raft_state.tmp"), &newer).unwrap();
        let reopened = ReplicaRaftState::open(dir.path()).unwrap();
        assert_eq!(*reopened.hard_state(), hard(2, 1, 5));

        let path = dir.path().join(RAFT_STATE_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let err = ReplicaRaftState::open(dir.path()).unwrap_err();
        assert!(matches!(err, RaftStoreError::Damaged { .. }), "{err}");
    }

    #[test]
    #[should_panic(expected = "only grow")]
    fn a_term_moving_back_is_a_bug_that_stops() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = ReplicaRaftState::open(dir.path()).unwrap();
        state.store(&hard(5, 1, 3), None).unwrap();
        let _ = state.store(&hard(4, 1, 3), None);
    }
}
