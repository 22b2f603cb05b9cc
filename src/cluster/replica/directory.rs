//! What the cores of a node share about its replicated partitions: which core holds each
//! group's replica (for core 0 to route the group's messages there), and each group's
//! leader as this node's replica knows it (for the placement to route clients there).
//! Written when a replica opens, closes or sees a new leader; read per message and per
//! produce or fetch routed.

use std::collections::HashMap;
use std::sync::RwLock;

use crate::cluster::NodeId;

/// A group's leader as a replica knows it, with the term it leads in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownLeader {
    pub node: NodeId,
    pub term: u64,
}

#[derive(Debug, Default)]
pub struct ReplicaDirectory {
    cores: RwLock<HashMap<u64, u16>>,
    leaders: RwLock<HashMap<u64, KnownLeader>>,
}

impl ReplicaDirectory {
    /// Group `group`'s replica on this node is on `core`.
    pub fn open(&self, group: u64, core: u16) {
        write(&self.cores).insert(group, core);
    }

    /// Group `group` has no replica on this node any more.
    pub fn close(&self, group: u64) {
        write(&self.cores).remove(&group);
        write(&self.leaders).remove(&group);
    }

    /// The core of this node holding group `group`'s replica.
    pub fn core_of(&self, group: u64) -> Option<u16> {
        read(&self.cores).get(&group).copied()
    }

    /// Records the leader this node's replica of `group` knows (`None`: none known).
    pub fn set_leader(&self, group: u64, leader: Option<KnownLeader>) {
        let mut leaders = write(&self.leaders);
        match leader {
            Some(leader) => leaders.insert(group, leader),
            None => leaders.remove(&group),
        };
    }

    pub fn leader_of(&self, group: u64) -> Option<KnownLeader> {
        read(&self.leaders).get(&group).copied()
    }

    /// Every group this node's replica knows the leader of.
    pub fn leaders(&self) -> Vec<(u64, KnownLeader)> {
        read(&self.leaders).iter().map(|(g, l)| (*g, *l)).collect()
    }
}

// A writer that panicked left whole values behind (each change is one map operation).
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_open_lead_and_close() {
        let directory = ReplicaDirectory::default();
        assert_eq!(directory.core_of(7), None);
        directory.open(7, 1);
        assert_eq!(directory.core_of(7), Some(1));
        let leader = KnownLeader {
            node: NodeId(2),
            term: 3,
        };
        directory.set_leader(7, Some(leader));
        assert_eq!(directory.leader_of(7), Some(leader));
        assert_eq!(directory.leaders(), vec![(7, leader)]);
        directory.set_leader(7, None);
        assert_eq!(directory.leader_of(7), None);
        directory.set_leader(7, Some(leader));
        directory.close(7);
        assert_eq!((directory.core_of(7), directory.leader_of(7)), (None, None));
    }
}
