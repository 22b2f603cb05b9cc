//! The controller group end to end: 3 and 5 nodes of real raft-rs over real files, with a
//! deterministic network (see `sim`). Rounds are ticks of 100 ms at the default config.

use std::collections::BTreeMap;

use super::sim::Sim;
use super::*;

/// Default timeouts, with snapshots often enough that the tests cross several.
fn config() -> DriverConfig {
    DriverConfig {
        snapshot_every: 8,
        ..DriverConfig::default()
    }
}

/// 5 s of ticks: the bound for a new leader after a crash.
const FIVE_SECONDS: u64 = 50;

fn register(id: u16) -> Command {
    Command::RegisterNode {
        id: NodeId(id),
        client_addr: format!("127.0.0.{id}:9092"),
        cluster_addr: format!("127.0.0.{id}:9093"),
        cores: 2,
    }
}

fn create(name: &str, partitions: u32, replication_factor: u16) -> Command {
    Command::CreateTopic {
        name: name.to_string(),
        partitions,
        replication_factor,
        settings: BTreeMap::new(),
    }
}

/// A cluster of `n` with a leader and every node registered.
fn started(n: u16, seed: u64) -> Sim {
    let mut sim = Sim::new(n, seed, config());
    let elected = sim.run_until(FIVE_SECONDS, |s| s.leader().is_some());
    assert!(elected.is_some(), "no leader within 5 s of ticks");
    for id in 1..=n {
        sim.commit(&register(id));
    }
    sim
}

/// Index -> command applied, as one node saw them.
fn applied(sim: &Sim, node: NodeId) -> BTreeMap<u64, Command> {
    sim.events[&node]
        .iter()
        .filter_map(|e| match e {
            Event::Applied { index, command, .. } => Some((*index, command.clone())),
            Event::Restored { .. } | Event::VotersChanged { .. } => None,
        })
        .collect()
}

/// Every node applied the same command at each index both applied, and all running nodes
/// hold the same state.
fn assert_same_history(sim: &Sim) {
    let voters = sim.voters();
    let histories: Vec<_> = voters.iter().map(|v| applied(sim, *v)).collect();
    for (a, ha) in voters.iter().zip(&histories) {
        for (b, hb) in voters.iter().zip(&histories) {
            for (index, command) in ha {
                if let Some(other) = hb.get(index) {
                    assert_eq!(command, other, "{a} and {b} differ at {index}");
                }
            }
        }
    }
    let states: Vec<_> = sim.live().map(|n| n.state().clone()).collect();
    assert!(states.windows(2).all(|w| w[0] == w[1]), "states differ");
}

#[test]
fn a_leader_is_elected_and_known_to_all() {
    for n in [3, 5] {
        let mut sim = Sim::new(n, 7, config());
        let rounds = sim.run_until(FIVE_SECONDS, |s| s.leader().is_some());
        assert!(rounds.is_some(), "{n} nodes: no leader in 5 s");
        let leader = sim.leader().unwrap();
        sim.rounds(5);
        assert_eq!(sim.leader(), Some(leader));
        assert_eq!(sim.live().filter(|c| c.is_leader()).count(), 1);
        assert!(sim.live().all(|c| c.leader() == Some(leader)), "{n} nodes");
    }
}

#[test]
fn proposals_apply_in_the_same_order_on_every_node_despite_drops() {
    for (n, seed) in [(3u16, 11u64), (5, 12)] {
        let mut sim = started(n, seed);
        sim.drop_per_mille = 100;
        for t in 0..25 {
            sim.commit(&create(&format!("t{t}"), 3, 2));
        }
        sim.drop_per_mille = 0;
        assert!(sim.converge(200).is_some(), "{n} nodes did not converge");
        assert_same_history(&sim);
        let state = sim.live().next().unwrap().state().clone();
        assert_eq!(state.topics().count(), 25);
        assert_eq!(state.nodes().count(), usize::from(n));
    }
}

#[test]
fn twelve_partitions_through_the_controller_are_led_four_four_four() {
    let mut sim = started(3, 5);
    sim.commit(&create("orders", 12, 3));
    assert!(sim.converge(50).is_some());
    for node in sim.live() {
        let topic = node.state().topic("orders").unwrap();
        let mut led = BTreeMap::<NodeId, u32>::new();
        for p in &topic.partitions {
            *led.entry(p.replicas[0].node).or_default() += 1;
        }
        assert_eq!(led.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    }
}

#[test]
fn a_proposal_is_refused_off_the_leader_and_when_invalid() {
    let mut sim = started(3, 3);
    let leader = sim.leader().unwrap();
    let follower = sim.voters().into_iter().find(|v| *v != leader).unwrap();
    let err = sim
        .node_mut(follower)
        .propose(&create("x", 1, 1), 1)
        .unwrap_err();
    assert!(
        matches!(err, DriverError::NotLeader { leader: Some(l) } if l == leader),
        "{err}"
    );
    let err = sim
        .node_mut(leader)
        .propose(&create("x", 1, 4), 2)
        .unwrap_err();
    assert!(
        matches!(
            err,
            DriverError::Refused(CommandError::InvalidReplicationFactor {
                requested: 4,
                live_nodes: 3
            })
        ),
        "{err}"
    );
}

#[test]
fn a_crashed_leader_is_replaced_within_five_seconds_and_nothing_committed_is_lost() {
    for (n, seed) in [(3u16, 21u64), (5, 22)] {
        let mut sim = started(n, seed);
        for t in 0..10 {
            sim.commit(&create(&format!("before{t}"), 2, 1));
        }
        let old = sim.leader().unwrap();
        let old_term = sim.node(old).term();
        sim.crash(old);
        let rounds = sim.run_until(FIVE_SECONDS, |s| s.leader().is_some());
        assert!(rounds.is_some(), "{n} nodes: no new leader within 5 s");
        let new = sim.leader().unwrap();
        assert_ne!(new, old);
        assert!(sim.node(new).term() > old_term);
        for t in 0..10 {
            assert!(sim.node(new).state().topic(&format!("before{t}")).is_some());
        }
        for t in 0..10 {
            sim.commit(&create(&format!("after{t}"), 2, 1));
        }
        sim.restart(old);
        assert!(
            sim.converge(200).is_some(),
            "{n} nodes: the old leader did not catch up"
        );
        assert_same_history(&sim);
        assert_eq!(sim.node(old).state().topics().count(), 20);
    }
}

#[test]
fn an_isolated_node_rejoins_without_deposing_the_leader() {
    let mut sim = started(3, 31);
    let leader = sim.leader().unwrap();
    let term = sim.node(leader).term();
    let loner = sim.voters().into_iter().find(|v| *v != leader).unwrap();
    let loner_term = sim.node(loner).term();
    sim.isolate(loner);
    for t in 0..30 {
        sim.commit(&create(&format!("while-away{t}"), 1, 1));
    }
    sim.rounds(300 - 30); // 30 s cut off in all
    // Pre-vote: it never won a pre-vote, so it never raised its term.
    assert_eq!(sim.node(loner).term(), loner_term);
    assert!(!sim.node(loner).is_leader());
    let err = sim
        .node_mut(loner)
        .propose(&create("x", 1, 1), 99)
        .unwrap_err();
    assert!(matches!(err, DriverError::NotLeader { .. }), "{err}");

    sim.heal(loner);
    assert!(sim.converge(100).is_some(), "the loner did not catch up");
    assert_eq!(sim.leader(), Some(leader), "the leader was deposed");
    assert_eq!(sim.node(leader).term(), term, "the term moved");
    // It was behind the leader's compacted log: it caught up from a snapshot.
    assert!(
        sim.events[&loner]
            .iter()
            .any(|e| matches!(e, Event::Restored { .. }))
    );
    assert_same_history(&sim);
}

#[test]
fn a_leader_cut_off_from_the_quorum_steps_down() {
    let mut sim = started(5, 41);
    let old = sim.leader().unwrap();
    sim.isolate(old);
    // Check-quorum: within an election timeout it knows it has no quorum.
    let stepped_down = sim.run_until(30, |s| !s.node(old).is_leader());
    assert!(stepped_down.is_some(), "the cut-off leader kept leading");
    let err = sim
        .node_mut(old)
        .propose(&create("x", 1, 1), 7)
        .unwrap_err();
    assert!(matches!(err, DriverError::NotLeader { .. }), "{err}");
    let replaced = sim.run_until(FIVE_SECONDS, |s| s.leader().is_some_and(|l| l != old));
    assert!(replaced.is_some());
    sim.commit(&create("without-old", 1, 1));
    sim.heal(old);
    assert!(sim.converge(100).is_some());
    assert!(sim.node(old).state().topic("without-old").is_some());
    assert_same_history(&sim);
}

#[test]
fn restarting_every_node_recovers_the_state_from_its_files() {
    let mut sim = started(3, 51);
    for t in 0..20 {
        sim.commit(&create(&format!("t{t}"), 4, 2));
    }
    // The leader moved to the second replica of t0's partition 0.
    let leader = sim.leader().unwrap();
    let second = sim.node(leader).state().topic("t0").unwrap().partitions[0].replicas[1];
    let hint = Command::SetLeaderHint {
        topic: "t0".into(),
        partition: 0,
        leader: second,
    };
    sim.commit(&hint);
    assert!(sim.converge(50).is_some());
    let before: BTreeMap<NodeId, (u64, ClusterState)> = sim
        .live()
        .map(|n| (n.node(), (n.applied(), n.state().clone())))
        .collect();
    assert!(
        sim.live().all(|n| n.log_range().0 > 1),
        "the logs were compacted"
    );
    for id in sim.voters() {
        sim.crash(id);
    }
    for id in sim.voters() {
        sim.restart(id);
    }
    // Before any tick or message: the snapshot, then the committed entries after it.
    sim.ready_all();
    for node in sim.live() {
        let (applied, state) = &before[&node.node()];
        assert_eq!(node.applied(), *applied, "{}", node.node());
        assert_eq!(node.state(), state, "{}", node.node());
    }
    sim.commit(&create("after-restart", 1, 1));
    assert!(sim.converge(50).is_some());
    assert_same_history(&sim);
    assert_eq!(sim.live().next().unwrap().state().topics().count(), 21);
}
