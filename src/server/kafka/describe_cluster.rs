//! DescribeCluster: the same brokers as Metadata (one per place of the placement; on one
//! node: node id = core, the host the client reached, that core's shard port), the cluster
//! id, and the placement's controller (core 0 of one node, which creates and deletes
//! topics). No broker is ever fenced. Asking for the cluster's
//! controllers (endpoint type 2, v1+) is `MISMATCHED_ENDPOINT_TYPE` (114), as a Kafka broker
//! answers it: clients ask controllers for them on the controllers' own listener.
//!
//! With the ACL authorizer, as Kafka's broker: the brokers are answered to every principal
//! (Metadata shows them to everyone); the cluster's authorized operations (KIP-430), when
//! asked, need Describe on the cluster, else they are 0.

use std::rc::Rc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::acl_codes::authorized_operations;
use super::metadata::{CLUSTER_ID, brokers, node_id};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::{Denied, Need};
use crate::security::acl::{CLUSTER_NAME, Operation, ResourceType};

const ENDPOINT_BROKERS: i8 = 1;
const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
/// "Not computed", as Kafka sends when authorized operations were not asked for.
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;
/// What listing the cluster's authorized operations needs.
const DESCRIBE_CLUSTER: Need =
    Need::On(ResourceType::Cluster, Operation::Describe, Denied::Request);

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DescribeClusterRequest,
) -> Pending {
    let operations = if !request.include_cluster_authorized_operations {
        OPERATIONS_NOT_ASKED
    } else if conn.allowed(DESCRIBE_CLUSTER, CLUSTER_NAME) {
        authorized_operations(conn, ResourceType::Cluster, CLUSTER_NAME)
    } else {
        0
    };
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(ENDPOINT_BROKERS)
        .with_cluster_id(StrBytes::from_static_str(CLUSTER_ID))
        .with_controller_id(node_id(conn.shard.placement().controller()))
        .with_cluster_authorized_operations(operations);
    if header.api_version >= 1 && request.endpoint_type != ENDPOINT_BROKERS {
        response = response
            .with_error_code(MISMATCHED_ENDPOINT_TYPE)
            .with_error_message(Some(StrBytes::from_static_str(
                "pagurus serves brokers only; its controller is broker 0",
            )));
    } else {
        response = response.with_brokers(
            brokers(conn)
                .into_iter()
                .map(|b| {
                    DescribeClusterBroker::default()
                        .with_broker_id(b.node_id)
                        .with_host(b.host)
                        .with_port(b.port)
                })
                .collect(),
        );
    }
    Pending::Ready(Reply::frame(respond(&header, &response)))
}
