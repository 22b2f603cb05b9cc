//! A native group member's logic, sans-IO: what to send next (join, heartbeat, commits),
//! and what a broker answer means for it. The drivers ([`crate::client::blocking::GroupConsumer`],
//! [`crate::client::glommio::GroupConsumer`]) do the I/O.
//!
//! The broker assigns the partitions (protocol type `pagurus`): a join answers with the
//! member's generation and partitions. The member heartbeats every third of its session
//! timeout; an answer that says the group is rebalancing (or that the generation moved on)
//! makes it commit what it read and join again under its id, one that says the group no
//! longer has it makes it join again from scratch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::client::ClientError;
use crate::protocol::native::{ErrorCode, JoinGroup, JoinedGroup};

/// How a member joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub group: String,
    pub topics: Vec<String>,
    pub client_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    pub session_timeout: Duration,
    /// Longest the broker waits for members to rejoin in a rebalance (and a join waits).
    pub rebalance_timeout: Duration,
    /// `range` or `roundrobin`.
    pub assignor: String,
}

impl GroupConfig {
    pub fn new(group: &str, topics: &[&str]) -> GroupConfig {
        GroupConfig {
            group: group.to_string(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            client_id: String::from("pagurus"),
            instance_id: None,
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            assignor: String::from("range"),
        }
    }

    pub fn heartbeat_interval(&self) -> Duration {
        self.session_timeout / 3
    }
}

/// What a broker's refusal of a group call means for the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Join again under the same member id (a rebalance, a newer generation).
    Rejoin,
    /// Join again with no member id (the group forgot this member).
    RejoinFresh,
    /// Not a group matter: the caller handles the error.
    Fail,
}

/// Whether an error from a heartbeat or commit calls for a rejoin.
pub fn next_after(error: &ClientError) -> Next {
    match error.code() {
        Some(ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration) => Next::Rejoin,
        Some(ErrorCode::UnknownMember) => Next::RejoinFresh,
        _ => Next::Fail,
    }
}

/// A member's place in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberState {
    /// Must join (again); `member_id` is empty for a fresh join.
    Unjoined,
    /// In generation `generation` with these partitions.
    Joined {
        generation: i32,
        partitions: Vec<(String, u32)>,
    },
}

/// One member of a group: its id, state, positions, and when to heartbeat.
#[derive(Debug, Clone)]
pub struct Membership {
    pub config: GroupConfig,
    pub member_id: String,
    pub state: MemberState,
    next_heartbeat: Instant,
    /// Next offset to read, per assigned partition.
    positions: BTreeMap<(String, u32), u64>,
    /// Last offset committed (or found committed), per partition.
    committed: BTreeMap<(String, u32), u64>,
    /// Next partition to read, round robin.
    turn: usize,
}

impl Membership {
    pub fn new(config: GroupConfig) -> Membership {
        Membership {
            config,
            member_id: String::new(),
            state: MemberState::Unjoined,
            next_heartbeat: Instant::now(),
            positions: BTreeMap::new(),
            committed: BTreeMap::new(),
            turn: 0,
        }
    }

    /// The join request to send now.
    pub fn join_request(&self) -> JoinGroup<'_> {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        JoinGroup {
            group: self.config.group.as_bytes(),
            member_id: self.member_id.as_bytes(),
            instance_id: self.config.instance_id.as_deref().unwrap_or("").as_bytes(),
            client_id: self.config.client_id.as_bytes(),
            session_timeout_ms: ms(self.config.session_timeout),
            rebalance_timeout_ms: ms(self.config.rebalance_timeout),
            assignor: self.config.assignor.as_bytes(),
            topics: self.config.topics.iter().map(|t| t.as_bytes()).collect(),
        }
    }

    /// Takes the join answer; returns the partitions new to this member, whose start the
    /// driver looks up (committed offset, or its reset point) and gives to [`Membership::seek`].
    pub fn joined(&mut self, joined: JoinedGroup, now: Instant) -> Vec<(String, u32)> {
        self.member_id = joined.member_id;
        self.positions
            .retain(|tp, _| joined.partitions.contains(tp));
        self.committed
            .retain(|tp, _| joined.partitions.contains(tp));
        let new = joined
            .partitions
            .iter()
            .filter(|tp| !self.positions.contains_key(*tp))
            .cloned()
            .collect();
        self.state = MemberState::Joined {
            generation: joined.generation,
            partitions: joined.partitions,
        };
        self.next_heartbeat = now + self.config.heartbeat_interval();
        new
    }

    /// After a refusal: join again, keeping the id or not.
    pub fn rejoin(&mut self, next: Next) {
        if next == Next::RejoinFresh {
            self.member_id.clear();
        }
        self.state = MemberState::Unjoined;
    }

    pub fn generation(&self) -> Option<i32> {
        match &self.state {
            MemberState::Joined { generation, .. } => Some(*generation),
            MemberState::Unjoined => None,
        }
    }

    /// The partitions of the current generation (none while unjoined).
    pub fn partitions(&self) -> &[(String, u32)] {
        match &self.state {
            MemberState::Joined { partitions, .. } => partitions,
            MemberState::Unjoined => &[],
        }
    }

    pub fn heartbeat_due(&self, now: Instant) -> bool {
        self.generation().is_some() && now >= self.next_heartbeat
    }

    pub fn heartbeat_sent(&mut self, now: Instant) {
        self.next_heartbeat = now + self.config.heartbeat_interval();
    }

    /// Time until the next heartbeat (zero when due or unjoined).
    pub fn until_heartbeat(&self, now: Instant) -> Duration {
        self.next_heartbeat.saturating_duration_since(now)
    }

    /// Sets where a partition is read next; `committed` says it is the group's commit.
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64, committed: bool) {
        let key = (topic.to_string(), partition);
        if committed {
            self.committed.insert(key.clone(), offset);
        }
        self.positions.insert(key, offset);
    }

    pub fn position(&self, topic: &str, partition: u32) -> Option<u64> {
        self.positions.get(&(topic.to_string(), partition)).copied()
    }

    /// Positions that moved since their last commit.
    pub fn uncommitted(&self) -> Vec<(String, u32, u64)> {
        self.positions
            .iter()
            .filter(|(tp, offset)| self.committed.get(*tp) != Some(*offset))
            .map(|((t, p), o)| (t.clone(), *p, *o))
            .collect()
    }

    /// Fetches one poll makes at most: every assigned partition once without waiting, then
    /// the next one again with the poll's wait ([`Membership::next_partition`] each time).
    pub fn fetches_per_poll(&self) -> usize {
        match self.partitions().len() {
            0 => 0,
            n => n + 1,
        }
    }

    /// The next assigned partition to read, round robin; none while unassigned.
    pub fn next_partition(&mut self) -> Option<(String, u32)> {
        let partitions = self.partitions();
        let next = partitions.get(self.turn % partitions.len().max(1)).cloned();
        self.turn = self.turn.wrapping_add(1);
        next
    }

    /// Takes what a fetch of `topic`/`partition` from `from` found: `Ok(Some(next))` (the
    /// offset after its last batch) moves the position there; `Ok(None)` (nothing new)
    /// keeps it. An `OffsetOutOfRange` whose log start is past `from` (retention deleted
    /// the position) moves it to the log start and is no error. True when the fetch
    /// brought batches.
    pub fn fetched(
        &mut self,
        topic: &str,
        partition: u32,
        from: u64,
        outcome: Result<Option<u64>, ClientError>,
    ) -> Result<bool, ClientError> {
        match outcome {
            Ok(Some(next)) => {
                self.seek(topic, partition, next, false);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(ClientError::Broker { code, earliest, .. })
                if ErrorCode::from_u16(code) == Some(ErrorCode::OffsetOutOfRange)
                    && from < earliest =>
            {
                self.seek(topic, partition, earliest, false);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    pub fn committed_at(&mut self, topic: &str, partition: u32, offset: u64) {
        self.committed
            .insert((topic.to_string(), partition), offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_generation_keeps_positions_of_partitions_kept() {
        let mut m = Membership::new(GroupConfig::new("g", &["t"]));
        assert!(m.generation().is_none());
        let now = Instant::now();
        let joined = |generation, partitions: &[u32]| JoinedGroup {
            member_id: "m-1".into(),
            generation,
            leader: "m-1".into(),
            partitions: partitions.iter().map(|p| ("t".to_string(), *p)).collect(),
        };
        let new = m.joined(joined(1, &[0, 1]), now);
        assert_eq!(new.len(), 2);
        m.seek("t", 0, 5, true);
        m.seek("t", 1, 7, false);
        assert_eq!(m.uncommitted(), vec![("t".to_string(), 1, 7)]);
        m.rejoin(Next::Rejoin);
        assert_eq!(m.member_id, "m-1");
        let new = m.joined(joined(2, &[1, 2]), now);
        assert_eq!(new, vec![("t".to_string(), 2)]);
        assert_eq!(m.position("t", 0), None);
        assert_eq!(m.position("t", 1), Some(7));
        m.rejoin(Next::RejoinFresh);
        assert!(m.member_id.is_empty());
        assert!(m.partitions().is_empty());
        assert_eq!(m.fetches_per_poll(), 0);
        assert_eq!(m.next_partition(), None);
    }

    #[test]
    fn polls_go_round_robin_and_fetches_move_positions() {
        let mut m = Membership::new(GroupConfig::new("g", &["t"]));
        let joined = JoinedGroup {
            member_id: "m-1".into(),
            generation: 1,
            leader: "m-1".into(),
            partitions: vec![("t".to_string(), 0), ("t".to_string(), 1)],
        };
        m.joined(joined, Instant::now());
        m.seek("t", 0, 0, false);
        m.seek("t", 1, 0, false);
        assert_eq!(m.fetches_per_poll(), 3);
        let order: Vec<u32> = (0..3).map(|_| m.next_partition().unwrap().1).collect();
        assert_eq!(order, vec![0, 1, 0]);
        assert!(matches!(m.fetched("t", 1, 0, Ok(Some(10))), Ok(true)));
        assert_eq!(m.position("t", 1), Some(10));
        assert!(matches!(m.fetched("t", 1, 10, Ok(None)), Ok(false)));
        let out_of_range = |earliest| ClientError::Broker {
            code: ErrorCode::OffsetOutOfRange as u16,
            name: "OffsetOutOfRange",
            message: String::new(),
            earliest,
            latest: 50,
        };
        // Retention passed the position: on at the log start, no error.
        assert!(matches!(
            m.fetched("t", 0, 0, Err(out_of_range(20))),
            Ok(false)
        ));
        assert_eq!(m.position("t", 0), Some(20));
        // Past the end: the caller's error.
        assert!(m.fetched("t", 0, 60, Err(out_of_range(20))).is_err());
    }
}
