use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const SESSION_MS: u64 = 10_000;
const REBALANCE_MS: u64 = 30_000;

fn kafka_join(member_id: &str, client: &str) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_string(),
        instance_id: None,
        client_id: client.to_string(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".to_string(),
        protocols: vec![("range".to_string(), b"sub".to_vec())],
        topics: Vec::new(),
        member_id_required: false,
    }
}

fn native_join(member_id: &str, topics: &[&str]) -> JoinRequest {
    JoinRequest {
        protocol_type: NATIVE_PROTOCOL_TYPE.to_string(),
        protocols: vec![("roundrobin".to_string(), Vec::new())],
        topics: topics.iter().map(|t| t.to_string()).collect(),
        ..kafka_join(member_id, "native")
    }
}

fn joined_id(replies: &[Reply]) -> Vec<(String, i32)> {
    replies
        .iter()
        .filter_map(|r| match r {
            Reply::Joined {
                member_id,
                generation,
                ..
            } => Some((member_id.clone(), *generation)),
            _ => None,
        })
        .collect()
}

fn group() -> Group {
    Group::new("g".to_string(), GroupLimits::default())
}

#[test]
fn first_member_forms_generation_one_and_leads() {
    let mut g = group();
    let replies = g.join(0, kafka_join("", "c1")).unwrap();
    let joined = joined_id(&replies);
    assert_eq!(joined.len(), 1);
    let (id, generation) = joined[0].clone();
    assert_eq!(generation, 1);
    assert_eq!(g.leader(), Some(id.as_str()));
    assert_eq!(g.state(), GroupState::CompletingRebalance);
    match &replies[0] {
        Reply::Joined {
            members, protocol, ..
        } => {
            assert_eq!(members.len(), 1);
            assert_eq!(protocol.as_deref(), Some("range"));
        }
        other => panic!("{other:?}"),
    }
    let synced = g
        .sync(
            1,
            &id,
            1,
            vec![(id.clone(), b"a0".to_vec())],
            &BTreeMap::new(),
        )
        .unwrap();
    assert_eq!(
        synced,
        vec![Reply::Synced {
            member_id: id.clone(),
            assignment: b"a0".to_vec(),
            partitions: vec![]
        }]
    );
    assert_eq!(g.state(), GroupState::Stable);
    g.heartbeat(2, &id, 1).unwrap();
    assert_eq!(
        g.heartbeat(2, &id, 0),
        Err(GroupError::IllegalGeneration { got: 0, current: 1 })
    );
    assert!(matches!(
        g.heartbeat(2, "nobody", 1),
        Err(GroupError::UnknownMember { .. })
    ));
}

#[test]
fn second_member_rebalances_and_follower_waits_for_leader() {
    let mut g = group();
    let a = joined_id(&g.join(0, kafka_join("", "a")).unwrap())[0]
        .0
        .clone();
    g.sync(
        0,
        &a,
        1,
        vec![(a.clone(), b"all".to_vec())],
        &BTreeMap::new(),
    )
    .unwrap();
    // b joins: a rebalance starts; b waits for a to rejoin.
    assert!(g.join(1, kafka_join("", "b")).unwrap().is_empty());
    assert!(matches!(g.state(), GroupState::PreparingRebalance { .. }));
    assert_eq!(g.heartbeat(2, &a, 1), Err(GroupError::RebalanceInProgress));
    // a commits what it read before it rejoins.
    g.check_commit(&a, 1).unwrap();
    let replies = g.join(3, kafka_join(&a, "a")).unwrap();
    let joined = joined_id(&replies);
    assert_eq!(joined.len(), 2);
    assert!(joined.iter().all(|(_, generation)| *generation == 2));
    let b = joined.iter().find(|(id, _)| *id != a).unwrap().0.clone();
    // Old generation commits are fenced.
    assert!(matches!(
        g.check_commit(&a, 1),
        Err(GroupError::IllegalGeneration { .. })
    ));
    // The follower's sync waits; the leader's answers both.
    assert!(
        g.sync(4, &b, 2, vec![], &BTreeMap::new())
            .unwrap()
            .is_empty()
    );
    let replies = g
        .sync(
            5,
            &a,
            2,
            vec![(a.clone(), b"p0".to_vec()), (b.clone(), b"p1".to_vec())],
            &BTreeMap::new(),
        )
        .unwrap();
    assert_eq!(replies.len(), 2);
    assert!(replies.contains(&Reply::Synced {
        member_id: b.clone(),
        assignment: b"p1".to_vec(),
        partitions: vec![]
    }));
    g.check_commit(&b, 2).unwrap();
}

#[test]
fn session_timeout_removes_a_silent_member() {
    let mut g = group();
    let a = joined_id(&g.join(0, kafka_join("", "a")).unwrap())[0]
        .0
        .clone();
    g.join(0, kafka_join("", "b")).unwrap();
    let replies = g.join(0, kafka_join(&a, "a")).unwrap();
    let b = joined_id(&replies)
        .into_iter()
        .find(|(id, _)| *id != a)
        .unwrap()
        .0;
    g.sync(1, &a, 2, vec![], &BTreeMap::new()).unwrap();
    // a heartbeats, b does not.
    assert!(g.tick(SESSION_MS).is_empty());
    g.heartbeat(SESSION_MS, &a, 2).unwrap();
    let replies = g.tick(SESSION_MS + 2);
    assert!(replies.contains(&Reply::Failed {
        member_id: b.clone(),
        error: GroupError::UnknownMember {
            member_id: b.clone()
        }
    }));
    assert!(matches!(g.state(), GroupState::PreparingRebalance { .. }));
    assert_eq!(g.members().count(), 1);
}

#[test]
fn rebalance_deadline_drops_members_that_did_not_rejoin() {
    let mut g = group();
    let a = joined_id(&g.join(0, kafka_join("", "a")).unwrap())[0]
        .0
        .clone();
    g.sync(0, &a, 1, vec![], &BTreeMap::new()).unwrap();
    g.join(100, kafka_join("", "b")).unwrap();
    // a never rejoins (it keeps heartbeating, which only says REBALANCE_IN_PROGRESS).
    for now in (100..100 + REBALANCE_MS).step_by(5_000) {
        assert_eq!(
            g.heartbeat(now, &a, 1),
            Err(GroupError::RebalanceInProgress)
        );
        assert!(g.tick(now).is_empty());
    }
    let replies = g.tick(100 + REBALANCE_MS);
    let joined = joined_id(&replies);
    assert_eq!(joined.len(), 1);
    assert_ne!(joined[0].0, a);
    assert_eq!(g.leader(), Some(joined[0].0.as_str()));
    assert_eq!(joined[0].1, 2);
}

#[test]
fn leave_of_last_member_empties_and_delete_needs_empty() {
    let mut g = group();
    let a = joined_id(&g.join(0, kafka_join("", "a")).unwrap())[0]
        .0
        .clone();
    assert_eq!(g.delete(), Err(GroupError::NotEmpty));
    g.leave(1, &a).unwrap();
    assert_eq!(g.state(), GroupState::Empty);
    g.check_commit("", -1).unwrap();
    g.delete().unwrap();
    assert_eq!(g.state(), GroupState::Dead);
    assert_eq!(g.join(2, kafka_join("", "a")), Err(GroupError::Dead));
}

#[test]
fn joins_outside_the_limits_are_refused() {
    let limits = GroupLimits {
        members_max: 1,
        ..GroupLimits::default()
    };
    let mut g = Group::new("g".to_string(), limits);
    g.join(0, kafka_join("", "a")).unwrap();
    assert_eq!(
        g.join(0, kafka_join("", "b")),
        Err(GroupError::GroupFull { max: 1 })
    );
    let short = JoinRequest {
        session_timeout_ms: 1,
        ..kafka_join("", "c")
    };
    assert_eq!(
        g.join(0, short),
        Err(GroupError::InvalidSessionTimeout { ms: 1 })
    );
    let other = JoinRequest {
        protocols: vec![("sticky".to_string(), vec![])],
        ..kafka_join("", "c")
    };
    assert_eq!(g.join(0, other), Err(GroupError::InconsistentProtocol));
}

#[test]
fn static_member_returns_under_a_new_id_in_its_place() {
    let mut g = group();
    let request = JoinRequest {
        instance_id: Some("host-1".to_string()),
        ..kafka_join("", "a")
    };
    let first = joined_id(&g.join(0, request.clone()).unwrap())[0].0.clone();
    let second = joined_id(&g.join(1, request).unwrap())[0].0.clone();
    assert_ne!(first, second);
    assert_eq!(g.members().count(), 1);
    assert_eq!(g.leader(), Some(second.as_str()));
    assert!(matches!(
        g.heartbeat(2, &first, g.generation()),
        Err(GroupError::UnknownMember { .. })
    ));
}

#[test]
fn native_group_gets_broker_side_assignment() {
    let mut g = group();
    let a = joined_id(&g.join(0, native_join("", &["t"])).unwrap())[0]
        .0
        .clone();
    g.join(0, native_join("", &["t"])).unwrap();
    let joined = joined_id(&g.join(0, native_join(&a, &["t"])).unwrap());
    let b = joined.iter().find(|(id, _)| *id != a).unwrap().0.clone();
    let partitions = BTreeMap::from([("t".to_string(), 4)]);
    // A follower's sync is enough: the broker assigns.
    let replies = g.sync(1, &b, 2, vec![], &partitions).unwrap();
    match &replies[..] {
        [
            Reply::Synced {
                member_id,
                partitions,
                ..
            },
        ] => {
            assert_eq!(member_id, &b);
            assert_eq!(partitions.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    let replies = g.sync(1, &a, 2, vec![], &partitions).unwrap();
    assert!(matches!(&replies[..], [Reply::Synced { partitions, .. }] if partitions.len() == 2));
}

#[derive(Debug, Clone)]
enum Op {
    Join(usize),
    Sync(usize),
    Heartbeat(usize),
    Leave(usize),
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..5usize).prop_map(Op::Join),
        (0..5usize).prop_map(Op::Sync),
        (0..5usize).prop_map(Op::Heartbeat),
        (0..5usize).prop_map(Op::Leave),
        (0..20_000u64).prop_map(Op::Wait),
    ]
}

proptest! {
    #[test]
    fn random_membership_keeps_the_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let partitions = BTreeMap::from([("t".to_string(), 7), ("u".to_string(), 3)]);
        let mut g = group();
        let mut now = 0u64;
        // Client slot -> member id it was given (if any).
        let mut ids: Vec<Option<String>> = vec![None; 5];
        let mut last_generation = 0;
        for op in ops {
            let replies = match op {
                Op::Join(c) => {
                    let id = ids[c].clone().unwrap_or_default();
                    let topics: &[&str] = if c % 2 == 0 { &["t", "u"] } else { &["t"] };
                    let request = JoinRequest {
                        client_id: format!("c{c}"),
                        ..native_join(&id, topics)
                    };
                    g.join(now, request).unwrap_or_default()
                }
                Op::Sync(c) => match &ids[c] {
                    Some(id) => g.sync(now, id, g.generation(), vec![], &partitions).unwrap_or_default(),
                    None => Vec::new(),
                },
                Op::Heartbeat(c) => {
                    if let Some(id) = &ids[c] {
                        let _ = g.heartbeat(now, id, g.generation());
                    }
                    Vec::new()
                }
                Op::Leave(c) => match ids[c].take() {
                    Some(id) => g.leave(now, &id).unwrap_or_default(),
                    None => Vec::new(),
                },
                Op::Wait(ms) => {
                    now += ms;
                    g.tick(now)
                }
            };
            for reply in &replies {
                if let Reply::Joined { member_id, generation, leader, .. } = reply {
                    prop_assert_eq!(*generation, g.generation());
                    prop_assert!(g.members().any(|m| &m.id == leader));
                    // A new member learns its id from its join answer (ids start with
                    // the client id, "c<slot>-").
                    let slot: usize = member_id[1..2].parse().unwrap();
                    ids[slot] = Some(member_id.clone());
                }
            }
            // Forget ids the group no longer has.
            for slot in ids.iter_mut() {
                if slot.as_ref().is_some_and(|id| !g.members().any(|m| &m.id == id)) {
                    *slot = None;
                }
            }
            prop_assert!(g.generation() >= last_generation);
            last_generation = g.generation();
            prop_assert_eq!(g.members().count() == 0, g.state() == GroupState::Empty);
            if let Some(leader) = g.leader() {
                prop_assert!(g.members().any(|m| m.id == leader));
            }
            // Each partition is assigned to at most one member of the generation, and in
            // a stable group every subscribed partition to exactly one.
            let mut seen = BTreeSet::new();
            for member in g.members() {
                for tp in &member.partitions {
                    prop_assert!(seen.insert(tp.clone()), "{:?} twice", tp);
                }
            }
            if g.state() == GroupState::Stable {
                for member in g.members() {
                    for tp in &member.partitions {
                        prop_assert!(member.topics.contains(&tp.0));
                    }
                }
                let u_wanted = g.members().any(|m| m.topics.iter().any(|t| t == "u"));
                prop_assert_eq!(seen.len(), 7 + if u_wanted { 3 } else { 0 });
            }
        }
    }
}

#[test]
fn member_id_required_hands_out_an_id_that_joins_once_within_the_session() {
    let mut g = group();
    let first = JoinRequest {
        member_id_required: true,
        ..kafka_join("", "c1")
    };
    let Err(GroupError::MemberIdRequired { member_id }) = g.join(0, first.clone()) else {
        panic!("a first join must get a member id");
    };
    assert_eq!(g.members().count(), 0, "no member until it joins again");
    assert!(g.has_pending_ids());
    let joined = joined_id(&g.join(1, kafka_join(&member_id, "c1")).unwrap());
    assert_eq!(joined, vec![(member_id.clone(), 1)]);
    assert!(!g.has_pending_ids());
    // A static member is not asked; an id nobody handed out is unknown.
    let static_member = JoinRequest {
        instance_id: Some("host-1".to_string()),
        ..first.clone()
    };
    assert!(g.join(2, static_member).is_ok());
    assert!(matches!(
        g.join(2, kafka_join("made-up", "c2")),
        Err(GroupError::UnknownMember { .. })
    ));
    // A handed-out id expires with its session timeout.
    let Err(GroupError::MemberIdRequired { member_id: late }) = g.join(3, first) else {
        panic!("a first join must get a member id");
    };
    g.tick(3 + SESSION_MS + 1);
    assert!(!g.has_pending_ids());
    assert!(matches!(
        g.join(4 + SESSION_MS, kafka_join(&late, "c3")),
        Err(GroupError::UnknownMember { .. })
    ));
}

#[test]
fn the_registry_keeps_an_empty_group_that_handed_out_an_id() {
    let mut groups = Groups::new(10, GroupLimits::default());
    let first = JoinRequest {
        member_id_required: true,
        ..kafka_join("", "c1")
    };
    let Err(GroupError::MemberIdRequired { member_id }) =
        groups.get_or_create("g").unwrap().join(0, first)
    else {
        panic!("a first join must get a member id");
    };
    groups.tick(100);
    let group = groups.get_mut("g").expect("kept while its id may join");
    assert_eq!(
        joined_id(&group.join(200, kafka_join(&member_id, "c1")).unwrap()).len(),
        1
    );
}
