//! The transitions of [`Group`]: join, sync, heartbeat, leave, time passing, commits.

use std::collections::BTreeMap;

use super::member::{JoinRequest, Member, Pending};
use super::{Assignor, Group, GroupError, GroupLimits, GroupState, NATIVE_PROTOCOL_TYPE, Reply};

impl Group {
    pub fn new(id: String, limits: GroupLimits) -> Group {
        Group {
            id,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            instances: BTreeMap::new(),
            member_seq: 0,
            pending_ids: BTreeMap::new(),
            incarnation: 0,
            limits,
        }
    }

    /// Sets which group of this name this is (the registry counts the groups it made), so
    /// that member ids are not reused by a group made again under the same name.
    pub fn set_incarnation(&mut self, incarnation: u64) {
        self.incarnation = incarnation;
    }

    pub fn state(&self) -> GroupState {
        self.state
    }

    pub fn generation(&self) -> i32 {
        self.generation
    }

    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }

    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }

    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }

    /// A JoinGroup. The member's own answer is among the returned replies once the
    /// generation forms, now or from a later call.
    pub fn join(&mut self, now_ms: u64, request: JoinRequest) -> Result<Vec<Reply>, GroupError> {
        self.join_member(now_ms, request)
            .map(|(_, replies)| replies)
    }

    /// [`Group::join`], also naming the member: a first join learns its id here, before
    /// the generation forms (a coordinator waits for that member's reply).
    pub fn join_member(
        &mut self,
        now_ms: u64,
        request: JoinRequest,
    ) -> Result<(String, Vec<Reply>), GroupError> {
        self.check_join(&request)?;
        if request.member_id_required
            && request.member_id.is_empty()
            && request.instance_id.is_none()
        {
            let member_id = self.hand_out_member_id(now_ms, &request)?;
            return Err(GroupError::MemberIdRequired { member_id });
        }
        let member_id = self.admit(now_ms, request)?;
        let mut replies = Vec::new();
        if !matches!(self.state, GroupState::PreparingRebalance { .. }) {
            replies.extend(self.prepare(now_ms));
        }
        if let GroupState::PreparingRebalance { deadline_ms } = &mut self.state {
            let member = &self.members[&member_id];
            *deadline_ms = (*deadline_ms).max(now_ms.saturating_add(member.rebalance_timeout_ms));
        }
        replies.extend(self.complete_if_all_joined());
        Ok((member_id, replies))
    }

    fn check_join(&self, request: &JoinRequest) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::Dead);
        }
        let timeout = request.session_timeout_ms;
        if timeout < self.limits.session_timeout_ms_min
            || timeout > self.limits.session_timeout_ms_max
        {
            return Err(GroupError::InvalidSessionTimeout { ms: timeout });
        }
        let bytes: usize = request
            .protocols
            .iter()
            .map(|(n, m)| n.len() + m.len())
            .sum();
        if bytes > self.limits.metadata_bytes_max {
            return Err(GroupError::MetadataTooLarge { bytes });
        }
        if request.protocols.is_empty() || request.protocol_type.is_empty() {
            return Err(GroupError::InconsistentProtocol);
        }
        if !self.members.is_empty() {
            let same_type = self.protocol_type.as_deref() == Some(request.protocol_type.as_str());
            let shared = request.protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .filter(|m| m.id != request.member_id)
                    .all(|m| m.metadata(name).is_some())
            });
            if !same_type || !shared {
                return Err(GroupError::InconsistentProtocol);
            }
        }
        Ok(())
    }

    /// KIP-394: a first join gets a member id and becomes a member only when it joins
    /// again with it, within its session timeout (a client that never does leaves no
    /// member behind for the rebalance to wait on).
    fn hand_out_member_id(
        &mut self,
        now_ms: u64,
        request: &JoinRequest,
    ) -> Result<String, GroupError> {
        self.pending_ids.retain(|_, until_ms| *until_ms > now_ms);
        let max = self.limits.members_max;
        if self.members.len() >= max || self.pending_ids.len() >= max {
            return Err(GroupError::GroupFull { max });
        }
        let id = self.next_member_id(&request.client_id);
        let until_ms = now_ms.saturating_add(request.session_timeout_ms);
        self.pending_ids.insert(id.clone(), until_ms);
        Ok(id)
    }

    /// True while a handed-out member id may still join (the registry keeps the group).
    pub fn has_pending_ids(&self) -> bool {
        !self.pending_ids.is_empty()
    }

    /// Adds or refreshes the member and returns its id.
    fn admit(&mut self, now_ms: u64, request: JoinRequest) -> Result<String, GroupError> {
        if self.members.is_empty() {
            self.protocol_type = Some(request.protocol_type.clone());
        }
        // The id a new member joins under, if it was handed out (KIP-394).
        let mut handed_out = None;
        let known = if request.member_id.is_empty() {
            // A static member coming back takes its instance's place under a new id, which
            // fences the old one.
            let old = request
                .instance_id
                .as_ref()
                .and_then(|instance| self.instances.get(instance).cloned());
            old.and_then(|old_id| self.members.remove(&old_id).map(|m| (old_id, m)))
                .map(|(old_id, mut m)| {
                    let id = self.next_member_id(&request.client_id);
                    if self.leader.as_deref() == Some(old_id.as_str()) {
                        self.leader = Some(id.clone());
                    }
                    m.id = id.clone();
                    self.members.insert(id.clone(), m);
                    id
                })
        } else if self.members.contains_key(&request.member_id) {
            Some(request.member_id.clone())
        } else if self.pending_ids.remove(&request.member_id).is_some() {
            handed_out = Some(request.member_id.clone());
            None
        } else {
            return Err(GroupError::UnknownMember {
                member_id: request.member_id,
            });
        };
        let id = match known {
            Some(id) => {
                self.members
                    .get_mut(&id)
                    .expect("known member")
                    .refresh(request, now_ms);
                id
            }
            None => {
                if self.members.len() >= self.limits.members_max {
                    return Err(GroupError::GroupFull {
                        max: self.limits.members_max,
                    });
                }
                let id = match handed_out {
                    Some(id) => id,
                    None => self.next_member_id(&request.client_id),
                };
                self.members
                    .insert(id.clone(), Member::new(id.clone(), request, now_ms));
                id
            }
        };
        if let Some(instance) = self.members[&id].instance_id.clone() {
            self.instances.insert(instance, id.clone());
        }
        Ok(id)
    }

    fn next_member_id(&mut self, client_id: &str) -> String {
        self.member_seq += 1;
        let client: String = client_id.chars().take(64).collect();
        format!(
            "{client}-{}-{}-{}",
            self.incarnation, self.generation, self.member_seq
        )
    }

    /// Starts a rebalance: every member must join again; waiting syncs are told so.
    fn prepare(&mut self, now_ms: u64) -> Vec<Reply> {
        let deadline_ms = self
            .members
            .values()
            .map(|m| now_ms.saturating_add(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(now_ms);
        self.state = GroupState::PreparingRebalance { deadline_ms };
        let mut replies = Vec::new();
        for member in self.members.values_mut() {
            if member.pending == Pending::Sync {
                replies.push(Reply::Failed {
                    member_id: member.id.clone(),
                    error: GroupError::RebalanceInProgress,
                });
            }
            if member.pending != Pending::Join {
                member.pending = Pending::Nothing;
            }
        }
        replies
    }

    fn complete_if_all_joined(&mut self) -> Vec<Reply> {
        let all = self.members.values().all(|m| m.pending == Pending::Join);
        if all && matches!(self.state, GroupState::PreparingRebalance { .. }) {
            return self.complete();
        }
        Vec::new()
    }

    /// Forms the next generation from the members that joined; drops the others.
    fn complete(&mut self) -> Vec<Reply> {
        let mut replies = Vec::new();
        let dropped: Vec<String> = self
            .members
            .values()
            .filter(|m| m.pending != Pending::Join)
            .map(|m| m.id.clone())
            .collect();
        for id in dropped {
            self.remove(&id);
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.become_empty();
            return replies;
        }
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self.leader.clone().expect("a member leads");
        let protocol = self.members[&leader]
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .find(|name| self.members.values().all(|m| m.metadata(name).is_some()))
            .expect("join checks that every member shares a protocol");
        self.protocol = Some(protocol.clone());
        self.state = GroupState::CompletingRebalance;
        let listing: Vec<(String, Option<String>, Vec<u8>)> = self
            .members
            .values()
            .map(|m| {
                let metadata = m.metadata(&protocol).expect("checked").to_vec();
                (m.id.clone(), m.instance_id.clone(), metadata)
            })
            .collect();
        for member in self.members.values_mut() {
            member.pending = Pending::Nothing;
            member.assignment.clear();
            member.partitions.clear();
            replies.push(Reply::Joined {
                member_id: member.id.clone(),
                generation: self.generation,
                protocol: Some(protocol.clone()),
                leader: leader.clone(),
                members: if member.id == leader {
                    listing.clone()
                } else {
                    Vec::new()
                },
            });
        }
        replies
    }

    fn become_empty(&mut self) {
        self.state = GroupState::Empty;
        self.protocol = None;
        self.protocol_type = None;
        self.leader = None;
    }

    fn remove(&mut self, member_id: &str) {
        if self.leader.as_deref() == Some(member_id) {
            self.leader = None;
        }
        if let Some(member) = self.members.remove(member_id)
            && let Some(instance) = member.instance_id
            && self.instances.get(&instance).map(String::as_str) == Some(member_id)
        {
            self.instances.remove(&instance);
        }
    }

    fn member_mut(&mut self, member_id: &str) -> Result<&mut Member, GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::Dead);
        }
        self.members
            .get_mut(member_id)
            .ok_or_else(|| GroupError::UnknownMember {
                member_id: member_id.to_string(),
            })
    }

    fn check_generation(&self, generation: i32) -> Result<(), GroupError> {
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration {
                got: generation,
                current: self.generation,
            });
        }
        Ok(())
    }

    /// A SyncGroup. The leader of a Kafka group brings every member's assignment; in a
    /// native group the broker assigns `partitions` (topic → partition count) itself.
    pub fn sync(
        &mut self,
        now_ms: u64,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Vec<u8>)>,
        partitions: &BTreeMap<String, u32>,
    ) -> Result<Vec<Reply>, GroupError> {
        let member = self.member_mut(member_id)?;
        member.last_seen_ms = now_ms;
        if matches!(self.state, GroupState::PreparingRebalance { .. }) {
            return Err(GroupError::RebalanceInProgress);
        }
        self.check_generation(generation)?;
        let member = self.members.get_mut(member_id).expect("checked");
        if self.state == GroupState::Stable {
            return Ok(vec![synced(member)]);
        }
        member.pending = Pending::Sync;
        let native = self.protocol_type.as_deref() == Some(NATIVE_PROTOCOL_TYPE);
        if native {
            self.assign_native(partitions);
        } else if self.leader.as_deref() == Some(member_id) {
            let size: usize = assignments.iter().map(|(_, a)| a.len()).sum();
            if size
                > self
                    .limits
                    .metadata_bytes_max
                    .saturating_mul(self.members.len().max(1))
            {
                return Err(GroupError::MetadataTooLarge { bytes: size });
            }
            for (id, assignment) in assignments {
                if let Some(m) = self.members.get_mut(&id) {
                    m.assignment = assignment;
                }
            }
        } else {
            return Ok(Vec::new());
        }
        self.state = GroupState::Stable;
        let mut replies = Vec::new();
        for m in self.members.values_mut() {
            if m.pending == Pending::Sync {
                m.pending = Pending::Nothing;
                replies.push(synced(m));
            }
        }
        Ok(replies)
    }

    fn assign_native(&mut self, partitions: &BTreeMap<String, u32>) {
        let assignor = self
            .protocol
            .as_deref()
            .and_then(Assignor::from_name)
            .unwrap_or(Assignor::Range);
        let subscriptions = self
            .members
            .values()
            .map(|m| (m.id.clone(), m.topics.clone()))
            .collect();
        for (id, list) in assignor.assign(&subscriptions, partitions) {
            let member = self.members.get_mut(&id).expect("assigned to a member");
            member.assignment = encode_partitions(&list);
            member.partitions = list;
        }
    }

    /// A Heartbeat: keeps the member's session, and says whether a rebalance is on.
    pub fn heartbeat(
        &mut self,
        now_ms: u64,
        member_id: &str,
        generation: i32,
    ) -> Result<(), GroupError> {
        self.member_mut(member_id)?.last_seen_ms = now_ms;
        if matches!(self.state, GroupState::PreparingRebalance { .. }) {
            return Err(GroupError::RebalanceInProgress);
        }
        self.check_generation(generation)
    }

    /// A LeaveGroup (or the native equivalent): the member goes and the rest rebalance.
    pub fn leave(&mut self, now_ms: u64, member_id: &str) -> Result<Vec<Reply>, GroupError> {
        self.member_mut(member_id)?;
        self.remove(member_id);
        Ok(self.after_removal(now_ms))
    }

    fn after_removal(&mut self, now_ms: u64) -> Vec<Reply> {
        if self.members.is_empty() {
            if matches!(self.state, GroupState::PreparingRebalance { .. }) {
                self.generation += 1;
            }
            self.become_empty();
            return Vec::new();
        }
        let mut replies = Vec::new();
        if !matches!(self.state, GroupState::PreparingRebalance { .. }) {
            replies.extend(self.prepare(now_ms));
        }
        replies.extend(self.complete_if_all_joined());
        replies
    }

    /// Time passing: expires sessions, and ends a rebalance at its deadline.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Reply> {
        self.pending_ids.retain(|_, until_ms| *until_ms > now_ms);
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.pending != Pending::Join && m.expired(now_ms))
            .map(|m| m.id.clone())
            .collect();
        let mut replies = Vec::new();
        for id in &expired {
            replies.push(Reply::Failed {
                member_id: id.clone(),
                error: GroupError::UnknownMember {
                    member_id: id.clone(),
                },
            });
            self.remove(id);
        }
        if !expired.is_empty() {
            replies.extend(self.after_removal(now_ms));
        }
        if let GroupState::PreparingRebalance { deadline_ms } = self.state
            && now_ms >= deadline_ms
        {
            replies.extend(self.complete());
        }
        replies
    }

    /// Whether an offset commit from `member_id` at `generation` may be stored. Members with
    /// no id and generation -1 (a consumer that assigns itself, an admin tool) may commit
    /// only to a group with no members. As in Kafka, a member of the current generation may
    /// commit while a rebalance gathers members (it commits what it read before it rejoins),
    /// not while the generation waits for its assignment.
    pub fn check_commit(&self, member_id: &str, generation: i32) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::Dead);
        }
        if member_id.is_empty() && generation < 0 {
            if self.members.is_empty() {
                return Ok(());
            }
            return Err(GroupError::UnknownMember {
                member_id: String::new(),
            });
        }
        if !self.members.contains_key(member_id) {
            return Err(GroupError::UnknownMember {
                member_id: member_id.to_string(),
            });
        }
        self.check_generation(generation)?;
        if self.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }

    /// DeleteGroups: only an empty group goes.
    pub fn delete(&mut self) -> Result<(), GroupError> {
        if !self.members.is_empty() {
            return Err(GroupError::NotEmpty);
        }
        self.state = GroupState::Dead;
        Ok(())
    }
}

fn synced(member: &Member) -> Reply {
    Reply::Synced {
        member_id: member.id.clone(),
        assignment: member.assignment.clone(),
        partitions: member.partitions.clone(),
    }
}

/// A native assignment as bytes: u32 count, then (u16 topic length, topic, u32 partition).
pub fn encode_partitions(list: &[super::TopicPartition]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + list.len() * 16);
    out.extend_from_slice(&(list.len() as u32).to_be_bytes());
    for (topic, partition) in list {
        out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        out.extend_from_slice(topic.as_bytes());
        out.extend_from_slice(&(*partition as u32).to_be_bytes());
    }
    out
}
