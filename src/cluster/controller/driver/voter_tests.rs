//! Changes of the controller's voters end to end: real raft-rs over real files, the
//! deterministic network of `sim`. Rounds are ticks of 100 ms at the default config.

use std::collections::BTreeMap;

use super::sim::Sim;
use super::*;

fn config() -> DriverConfig {
    DriverConfig {
        snapshot_every: 8,
        ..DriverConfig::default()
    }
}

/// 5 s of ticks.
const FIVE_SECONDS: u64 = 50;

fn register(id: u16) -> Command {
    Command::RegisterNode {
        id: NodeId(id),
        client_addr: format!("127.0.0.{id}:9092"),
        cluster_addr: format!("127.0.0.{id}:9093"),
        cores: 2,
    }
}

fn create(name: &str) -> Command {
    Command::CreateTopic {
        name: name.to_string(),
        partitions: 3,
        replication_factor: 1,
        settings: BTreeMap::new(),
    }
}

fn started(n: u16) -> Sim {
    let mut sim = Sim::new(n, 7, config());
    let elected = sim.run_until(FIVE_SECONDS, |s| s.leader().is_some());
    assert!(elected.is_some(), "no leader within 5 s of ticks");
    for id in 1..=n {
        sim.commit(&register(id));
    }
    sim
}

/// The voters `node` applied its proposal `proposal` with, once it did.
fn applied_voters(sim: &Sim, node: NodeId, proposal: u64) -> Option<Vec<NodeId>> {
    sim.events[&node].iter().find_map(|e| match e {
        Event::VotersChanged {
            voters,
            proposal: Some(p),
            ..
        } if *p == proposal => Some(voters.clone()),
        _ => None,
    })
}

/// Proposes `change` through the leader until it is applied there (a removal of the
/// leader moves the leadership first); the voters after it.
fn change(sim: &mut Sim, change: VoterChange) -> Vec<NodeId> {
    for _attempt in 0..20 {
        if sim
            .run_until(FIVE_SECONDS, |s| s.leader().is_some())
            .is_none()
        {
            continue;
        }
        let leader = sim.leader().unwrap();
        let proposal = match sim.propose_voters(leader, change) {
            Ok(proposal) => proposal,
            Err(DriverError::Voters(VoterError::LeaderMovingAway(_))) => {
                sim.run_until(FIVE_SECONDS, |s| s.leader().is_some_and(|l| l != leader));
                continue;
            }
            Err(error) => panic!("{change:?} refused: {error}"),
        };
        let done = |s: &Sim| applied_voters(s, leader, proposal).is_some();
        if sim.run_until(FIVE_SECONDS, done).is_some() {
            return applied_voters(sim, leader, proposal).unwrap();
        }
    }
    panic!("{change:?} was not applied in 20 attempts");
}

fn ids(ids: &[u16]) -> Vec<NodeId> {
    ids.iter().map(|i| NodeId(*i)).collect()
}

#[test]
fn a_node_joins_from_a_snapshot_counts_in_the_quorum_and_leaves_again() {
    let mut sim = started(3);
    sim.commit(&create("before"));
    let four = NodeId(4);
    sim.join(four);
    sim.rounds(30);
    assert!(!sim.node(four).is_leader(), "a node not added never leads");
    assert_eq!(sim.node(four).term(), 0, "a node not added never campaigns");
    assert_eq!(change(&mut sim, VoterChange::Add(four)), ids(&[1, 2, 3, 4]));
    sim.commit(&register(4));
    assert!(
        sim.converge(FIVE_SECONDS).is_some(),
        "node 4 did not catch up"
    );
    assert!(
        sim.events[&four]
            .iter()
            .any(|e| matches!(e, Event::Restored { .. })),
        "node 4 starts from the leader's snapshot"
    );
    for node in sim.live() {
        assert_eq!(node.voters(), ids(&[1, 2, 3, 4]), "{}", node.node());
        assert!(node.state().topic("before").is_some());
        assert!(node.state().node(four).is_some());
    }
    // Four voters need three: with node 4 and one other down, nothing commits.
    let leader = sim.leader().unwrap();
    let other = (1..=3).map(NodeId).find(|n| *n != leader).unwrap();
    sim.crash(four);
    sim.crash(other);
    let proposal = sim.propose(&create("stuck")).unwrap().1;
    sim.rounds(20);
    assert!(super::sim::applied_index(&sim.events[&leader], proposal).is_none());
    sim.restart(four);
    sim.restart(other);
    assert!(sim.converge(2 * FIVE_SECONDS).is_some());
    sim.commit(&create("with-four"));
    assert_eq!(change(&mut sim, VoterChange::Remove(four)), ids(&[1, 2, 3]));
    sim.commit(&create("after"));
    let term = sim.node(sim.leader().unwrap()).term();
    sim.rounds(100);
    assert!(!sim.node(four).is_leader(), "a removed node never leads");
    let leader = sim.leader().unwrap();
    assert_eq!(
        sim.node(leader).term(),
        term,
        "the removed node disrupted nobody"
    );
    assert_eq!(sim.node(leader).voters(), ids(&[1, 2, 3]));
}

#[test]
fn removing_the_leader_moves_the_leadership_first() {
    let mut sim = started(3);
    let leader = sim.leader().unwrap();
    let follower = (1..=3).map(NodeId).find(|n| *n != leader).unwrap();
    // Forwarded from a follower: the leader transfers instead of appending it.
    sim.propose_voters(follower, VoterChange::Remove(leader))
        .unwrap();
    let moved = sim.run_until(FIVE_SECONDS, |s| s.leader().is_some_and(|l| l != leader));
    assert!(moved.is_some(), "the leader did not hand over");
    assert!(sim.node(leader).voters().contains(&leader));
    let voters = change(&mut sim, VoterChange::Remove(leader));
    assert!(!voters.contains(&leader) && voters.len() == 2, "{voters:?}");
    sim.commit(&create("two"));
    sim.rounds(100);
    assert!(
        !sim.node(leader).is_leader(),
        "the removed leader never leads again"
    );
    assert!(sim.leader().is_some_and(|l| l != leader));
    // Its removal, proposed on the leader itself, moves the leadership too.
    let now = sim.leader().unwrap();
    let refused = sim.propose_voters(now, VoterChange::Remove(now));
    assert!(
        matches!(refused, Err(DriverError::Voters(VoterError::LeaderMovingAway(n))) if n == now),
        "{refused:?}"
    );
}

#[test]
fn the_last_voter_and_changes_that_change_nothing_are_refused() {
    let mut sim = started(1);
    let one = NodeId(1);
    let refused = |r: Result<u64, DriverError>| match r {
        Err(DriverError::Voters(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    let last = refused(sim.propose_voters(one, VoterChange::Remove(one)));
    assert_eq!(last, VoterError::LastVoter(one));
    assert!(last.to_string().contains("last voter"), "{last}");
    assert_eq!(
        refused(sim.propose_voters(one, VoterChange::Add(one))),
        VoterError::AlreadyVoter(one)
    );
    assert_eq!(
        refused(sim.propose_voters(one, VoterChange::Remove(NodeId(7)))),
        VoterError::NotVoter(NodeId(7))
    );
    // One change at a time.
    sim.propose_voters(one, VoterChange::Add(NodeId(2)))
        .unwrap();
    assert_eq!(
        refused(sim.propose_voters(one, VoterChange::Add(NodeId(3)))),
        VoterError::Pending
    );
}
