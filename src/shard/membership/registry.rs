//! The groups one core coordinates, bounded in number.

use std::collections::BTreeMap;

use super::{Group, GroupLimits, GroupState, Reply};

/// Why a group could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this core already coordinates {max} groups")]
pub struct GroupLimitReached {
    pub max: usize,
}

/// Every group whose coordinator is this core.
#[derive(Debug, Clone)]
pub struct Groups {
    groups: BTreeMap<String, Group>,
    groups_max: usize,
    limits: GroupLimits,
    /// Groups made so far (member ids of a group made again differ from the old ones').
    made: u64,
}

impl Groups {
    pub fn new(groups_max: usize, limits: GroupLimits) -> Groups {
        Groups {
            groups: BTreeMap::new(),
            groups_max,
            limits,
            made: 0,
        }
    }

    /// The group, made Empty if it does not exist (a join makes groups, as in Kafka).
    pub fn get_or_create(&mut self, id: &str) -> Result<&mut Group, GroupLimitReached> {
        if !self.groups.contains_key(id) {
            if self.groups.len() >= self.groups_max {
                return Err(GroupLimitReached {
                    max: self.groups_max,
                });
            }
            self.made += 1;
            let mut group = Group::new(id.to_string(), self.limits);
            group.set_incarnation(self.made);
            self.groups.insert(id.to_string(), group);
        }
        Ok(self.groups.get_mut(id).expect("inserted"))
    }

    pub fn get(&self, id: &str) -> Option<&Group> {
        self.groups.get(id)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Group> {
        self.groups.get_mut(id)
    }

    /// Deletes an empty group at once (DeleteGroups); a group with members stays.
    pub fn delete(&mut self, id: &str) -> Result<bool, super::GroupError> {
        let Some(group) = self.groups.get_mut(id) else {
            return Ok(false);
        };
        group.delete()?;
        self.groups.remove(id);
        Ok(true)
    }

    /// Groups held now.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Time passing for every group; dead and empty ones are forgotten (an empty group's
    /// committed offsets stay, in the offsets shards), except an empty one that handed out
    /// member ids still to be joined with.
    pub fn tick(&mut self, now_ms: u64) -> Vec<(String, Reply)> {
        let mut replies = Vec::new();
        for (id, group) in &mut self.groups {
            replies.extend(group.tick(now_ms).into_iter().map(|r| (id.clone(), r)));
        }
        // An empty group that handed out member ids waits for them (KIP-394).
        self.groups.retain(|_, g| match g.state() {
            GroupState::Dead => false,
            GroupState::Empty => g.has_pending_ids(),
            _ => true,
        });
        replies
    }

    /// (group id, state name, protocol type) of every group.
    pub fn list(&self) -> impl Iterator<Item = (&str, &'static str, Option<&str>)> {
        self.groups
            .values()
            .map(|g| (g.id.as_str(), g.state().name(), g.protocol_type()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_bounded_and_dead_ones_go() {
        let mut groups = Groups::new(1, GroupLimits::default());
        groups.get_or_create("a").unwrap();
        assert_eq!(
            groups.get_or_create("b").unwrap_err(),
            GroupLimitReached { max: 1 }
        );
        groups.get_mut("a").unwrap().delete().unwrap();
        groups.tick(0);
        assert!(groups.get("a").is_none());
        groups.get_or_create("b").unwrap();
        assert_eq!(groups.list().count(), 1);
    }
}
