//! Starting and stopping this node's cluster membership (`cluster::node`) with the broker:
//! the view every core reads, the shard's placement table, and the controller on core 0
//! when `serve` has the cluster flags, with the node's topics following it ([`topics`]).

mod members;
mod topics;

use std::rc::Rc;
use std::sync::Arc;

use futures_lite::FutureExt;

use crate::cluster::NodeId;
use crate::cluster::controller::driver::DriverConfig;
use crate::cluster::node::{ClusterNode, NodeSetup};
use crate::cluster::replica::host::{ReplicaEnvelope, ReplicaHost};
use crate::cluster::status::{ClusterStatus, ClusterView, Role};
use crate::cluster::table::ClusterTable;
use crate::config::BrokerConfig;
use crate::server::ServeError;
use crate::shard::Shard;
use crate::shard::mesh::Mesh;

/// The view the cores share: a one-node cluster without the cluster flags, else this node
/// with no leader known until the controller says so.
pub(crate) fn view(config: &BrokerConfig) -> Arc<ClusterView> {
    let cores = u16::try_from(config.cores).unwrap_or(u16::MAX);
    match &config.cluster {
        None => {
            let node = config
                .node_id
                .and_then(|id| u16::try_from(id).ok())
                .map_or(NodeId(0), NodeId);
            ClusterView::new(ClusterStatus::alone(node, client_addr(config), cores))
        }
        Some(cluster) => {
            let view = ClusterView::new(ClusterStatus {
                node: cluster.node,
                role: Role::Follower,
                term: 0,
                leader: None,
                applied: 0,
                nodes: Vec::new(),
                voters: cluster.members(),
            });
            seed_topics(&config.data_dir, &view);
            view
        }
    }
}

/// A restarted node's view starts with the topics and nodes its controller had applied
/// (read from its files; the nodes place the groups from the first request): the cores open their partitions before the controller runs, and without
/// it every partition of a topic on disk would look like this node's (the one-node rule
/// answers for a topic the view lacks), and be made here.
fn seed_topics(data_dir: &std::path::Path, view: &ClusterView) {
    use crate::cluster::controller::driver::committed_state;
    use crate::cluster::controller::raft_store::{RaftStore, controller_dir};
    let dir = controller_dir(data_dir);
    // A first start: nothing applied, and nothing made here before the checks of the start.
    if !dir.join("raft_state").exists() {
        return;
    }
    let state = RaftStore::open(&dir)
        .map_err(|e| e.to_string())
        .and_then(|store| committed_state(&store).map_err(|e| e.to_string()));
    match state {
        Ok(state) => {
            view.set_owners(crate::cluster::node::owners_of(&state));
            view.set_members(crate::cluster::node::members_of(&state));
        }
        // The controller's own start reports it and refuses.
        Err(error) => tracing::warn!(%error, "the controller's applied topics are not known yet"),
    }
}

/// Where clients reach this node: `--advertised-host` (else, when `--listen` is a wildcard
/// address, this node's host in `--cluster-peers`; else `--listen`'s address) and the
/// `--listen` port.
fn client_addr(config: &BrokerConfig) -> String {
    let port = config.listen.port();
    let cluster = config.cluster.as_ref();
    let host = match cluster.and_then(|c| c.advertised_host.clone()) {
        Some(host) => host,
        None if config.listen.ip().is_unspecified() => cluster
            .and_then(|c| c.peers.iter().find(|p| p.node == c.node))
            .map_or_else(|| config.listen.ip().to_string(), |p| p.addr.host.clone()),
        None => config.listen.ip().to_string(),
    };
    crate::cluster::config::PeerAddr { host, port }.to_host_port()
}

/// Core `core`'s shard: on a cluster node its placement answers from the controller's
/// topics ([`ClusterTable`]), else the one-node table.
pub(crate) fn shard(
    core: usize,
    config: &Arc<BrokerConfig>,
    mesh: Mesh,
    view: &Arc<ClusterView>,
) -> Shard {
    match &config.cluster {
        Some(cluster) => {
            let table = ClusterTable::new(config, cluster.node, Arc::clone(view));
            Shard::with_placement(core, Arc::clone(config), mesh, Box::new(table))
        }
        None => Shard::new(core, Arc::clone(config), mesh),
    }
}

/// This core's replica host on a cluster node, joined to the replica mesh (`None` on a
/// broker started alone); set on the shard before it loads its partitions.
pub(crate) async fn replica_host(
    shard: &Shard,
    view: &Arc<ClusterView>,
    mesh: Option<ReplicaMesh>,
) -> Result<Option<Rc<ReplicaHost>>, ServeError> {
    let (Some(cluster), Some(mesh)) = (&shard.config.cluster, mesh) else {
        return Ok(None);
    };
    let joined = async { Some(mesh.join().await) }
        .or(async {
            glommio::timer::sleep(super::MESH_JOIN_TIMEOUT).await;
            None
        })
        .await;
    let (senders, receivers) = match joined {
        Some(Ok(joined)) => joined,
        Some(Err(e)) => {
            return Err(ServeError::Cluster(format!(
                "replica mesh join failed: {e}"
            )));
        }
        None => {
            return Err(ServeError::Cluster(format!(
                "the cores did not join their replica mesh within {:?}; start again",
                super::MESH_JOIN_TIMEOUT
            )));
        }
    };
    let host = ReplicaHost::new(cluster.node, shard.core, Arc::clone(view), Some(senders));
    host.start_receivers(receivers);
    shard.set_replica_host(Rc::clone(&host) as Rc<dyn crate::shard::replicated::ReplicaHost>);
    Ok(Some(host))
}

/// The channels between a node's cores for its replicas' messages.
pub(crate) type ReplicaMesh = glommio::channels::channel_mesh::MeshBuilder<
    ReplicaEnvelope,
    glommio::channels::channel_mesh::Full,
>;

/// On core 0 of a node started with the cluster flags: joins the cluster (the transport
/// listens, the controller opens), sends topic creations and deletions to the controller
/// and makes on this node what it applies. `None` elsewhere.
pub(crate) async fn start(
    shard: &Rc<Shard>,
    replicas: Option<&Rc<ReplicaHost>>,
) -> Result<Option<ClusterNode>, ServeError> {
    let config = &shard.config;
    let (Some(cluster), Some(view)) = (&config.cluster, shard.cluster_view()) else {
        return Ok(None);
    };
    if shard.core != 0 {
        return Ok(None);
    }
    let setup = NodeSetup {
        cluster: cluster.clone(),
        data_dir: config.data_dir.clone(),
        client_addr: client_addr(config),
        cores: u16::try_from(config.cores).unwrap_or(u16::MAX),
        driver: DriverConfig::default(),
    };
    let mut node = ClusterNode::start(setup, Arc::clone(view))
        .await
        .map_err(|e| ServeError::Cluster(e.to_string()))?;
    shard.set_topic_controller(Rc::new(topics::ControllerTopics {
        proposer: node.proposer.clone(),
        shard: Rc::downgrade(shard),
        members: members::Members {
            me: cluster.node,
            cluster_id: node.cluster_id,
            view: Arc::clone(view),
        },
    }));
    if let Some(changes) = node.take_changes() {
        glommio::spawn_local(topics::follow(Rc::clone(shard), Arc::clone(view), changes)).detach();
    }
    if let (Some(host), Some((sender, received))) = (replicas, node.take_partitions()) {
        host.set_transport(sender);
        let host = Rc::clone(host);
        // Core 0 routes every partition group's message to its replica's core.
        glommio::spawn_local(async move {
            while let Some(received) = received.recv().await {
                host.deliver(received.group, received.message);
            }
        })
        .detach();
    }
    Ok(Some(node))
}
