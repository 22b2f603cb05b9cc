//! A node's driver on a real glommio executor, its store in a temporary directory and its
//! transport on 127.0.0.1: changes of the voters asked through its `Proposer`.

use std::time::Duration;

use super::*;
use crate::cluster::config::{Peer, PeerAddr};
use crate::cluster::controller::driver::{VoterChange, VoterError};
use crate::cluster::status::ClusterStatus;

fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().port()
}

fn setup(dir: &std::path::Path) -> NodeSetup {
    let port = free_port();
    let peer = Peer {
        node: NodeId(1),
        addr: PeerAddr {
            host: "127.0.0.1".into(),
            port,
        },
    };
    NodeSetup {
        cluster: ClusterConfig {
            node: NodeId(1),
            listen: format!("127.0.0.1:{port}").parse().unwrap(),
            peers: vec![peer],
            advertised_host: None,
            join: None,
        },
        data_dir: dir.to_path_buf(),
        client_addr: String::from("127.0.0.1:9092"),
        cores: 1,
        driver: DriverConfig::default(),
    }
}

#[test]
fn the_voters_change_through_the_proposer_and_the_last_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let setup = setup(dir.path());
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            let view = ClusterView::new(ClusterStatus::alone(NodeId(1), String::new(), 1));
            let node = ClusterNode::start(setup, Arc::clone(&view)).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while view.status().leader != Some(NodeId(1)) {
                assert!(Instant::now() < deadline, "no leader within 10 s");
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            let proposer = node.proposer.clone();
            let last = proposer.change_voters(VoterChange::Remove(NodeId(1))).await;
            assert!(
                matches!(
                    last,
                    Err(ProposeError::Voters(VoterError::LastVoter(NodeId(1))))
                ),
                "{last:?}"
            );
            let again = proposer.change_voters(VoterChange::Add(NodeId(1))).await;
            assert!(
                matches!(
                    again,
                    Err(ProposeError::Voters(VoterError::AlreadyVoter(_)))
                ),
                "{again:?}"
            );
            let voters = proposer.change_voters(VoterChange::Add(NodeId(2))).await;
            assert_eq!(voters.unwrap(), vec![NodeId(1), NodeId(2)]);
            node.stop().await;
        })
        .unwrap()
        .join()
        .unwrap();
}
