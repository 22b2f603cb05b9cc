//! The controller (real raft-rs over real files) across real transports on 127.0.0.1: what
//! the simulated network of `driver/sim.rs` stands in for, end to end.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::channels::local_channel::LocalReceiver;

use super::tests::{peers, run, start};
use super::{Received, Transport};
use crate::cluster::NodeId;
use crate::cluster::controller::driver::{Controller, DriverConfig};
use crate::cluster::controller::raft_store::{RaftStore, controller_dir};
use crate::cluster::controller::state::Command;
use crate::cluster::wire::CONTROLLER_GROUP;

/// Short ticks so an election takes a fraction of a second.
const TICK: Duration = Duration::from_millis(20);

struct Node {
    controller: Rc<RefCell<Controller>>,
    transport: Rc<Transport>,
    driver: glommio::task::JoinHandle<()>,
}

fn open(id: u16, root: &std::path::Path, voters: &[NodeId]) -> Controller {
    let store = RaftStore::open(&controller_dir(&root.join(format!("node{id}")))).unwrap();
    let config = DriverConfig {
        tick: TICK,
        ..DriverConfig::default()
    };
    Controller::open(NodeId(id), voters, store, config).unwrap()
}

/// Ticks the controller every [`TICK`], steps what arrives, and sends what it says.
async fn drive(
    controller: Rc<RefCell<Controller>>,
    transport: Rc<Transport>,
    rx: LocalReceiver<Received>,
) {
    let mut next_tick = Instant::now() + TICK;
    loop {
        let wait = next_tick.saturating_duration_since(Instant::now());
        let got = futures_lite::future::or(rx.recv(), async {
            glommio::timer::sleep(wait).await;
            None
        })
        .await;
        let mut c = controller.borrow_mut();
        if let Some(received) = got {
            // A message raft-rs refuses (from a stale term, say) is its business.
            let _ = c.step(received.message);
        }
        if Instant::now() >= next_tick {
            c.tick();
            next_tick += TICK;
        }
        c.handle_ready().unwrap();
        for m in c.take_messages() {
            let to = NodeId::from_raft_id(m.to).unwrap();
            let _ = transport.send(to, CONTROLLER_GROUP, &m);
        }
    }
}

fn start_node(id: u16, peers: &[crate::cluster::config::Peer], root: &std::path::Path) -> Node {
    let voters: Vec<NodeId> = peers.iter().map(|p| p.node).collect();
    let transport = Rc::new(start(id, peers));
    let rx = transport.register(CONTROLLER_GROUP, 1024);
    let controller = Rc::new(RefCell::new(open(id, root, &voters)));
    let driver =
        glommio::spawn_local(drive(Rc::clone(&controller), Rc::clone(&transport), rx)).detach();
    Node {
        controller,
        transport,
        driver,
    }
}

/// The leader among `nodes`, once one is known to all of them (within 10 s).
async fn leader(nodes: &[&Node]) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let leaders: Vec<Option<NodeId>> = nodes
            .iter()
            .map(|n| n.controller.borrow().leader())
            .collect();
        if let Some(Some(l)) = leaders.first()
            && leaders.iter().all(|x| *x == Some(*l))
            && nodes
                .iter()
                .any(|n| n.controller.borrow().node() == *l && n.controller.borrow().is_leader())
        {
            return *l;
        }
        assert!(
            Instant::now() < deadline,
            "no leader within 10 s: {leaders:?}"
        );
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}

fn register(id: u16) -> Command {
    Command::RegisterNode {
        id: NodeId(id),
        client_addr: format!("127.0.0.{id}:9092"),
        cluster_addr: format!("127.0.0.{id}:9093"),
        cores: 1,
    }
}

/// Proposes on the leader and waits until every node in `nodes` applied it.
async fn commit(nodes: &[&Node], leader: NodeId, id: u16, proposal: u64) {
    let on_leader = nodes
        .iter()
        .find(|n| n.controller.borrow().node() == leader)
        .unwrap();
    on_leader
        .controller
        .borrow_mut()
        .propose(&register(id), proposal)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !nodes
        .iter()
        .all(|n| n.controller.borrow().state().node(NodeId(id)).is_some())
    {
        assert!(
            Instant::now() < deadline,
            "node {id}'s registration not applied everywhere within 10 s"
        );
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_controller_over_three_transports_elects_commits_and_replaces_a_dead_leader() {
    run(|| async {
        let tmp = tempfile::tempdir().unwrap();
        let peers = peers(3);
        let mut nodes: Vec<Node> = (1..=3)
            .map(|id| start_node(id, &peers, tmp.path()))
            .collect();
        let first = leader(&nodes.iter().collect::<Vec<_>>()).await;
        commit(&nodes.iter().collect::<Vec<_>>(), first, 7, 1).await;

        // The leader dies: its driver and transport stop, its sockets close.
        let dead = nodes.remove(
            nodes
                .iter()
                .position(|n| n.controller.borrow().node() == first)
                .unwrap(),
        );
        dead.driver.cancel();
        drop(dead.transport);
        let survivors: Vec<&Node> = nodes.iter().collect();
        let second = leader(&survivors).await;
        assert_ne!(second, first);
        commit(&survivors, second, 8, 2).await;
        for n in &survivors {
            assert!(
                n.controller.borrow().state().node(NodeId(7)).is_some(),
                "nothing committed is lost"
            );
            assert!(n.transport.stats().delivered > 0);
        }
        for n in nodes {
            n.driver.cancel();
        }
    });
}
