//! DescribeConfigs: what admin tools ask at start. Topics answer with their settings under
//! Kafka's names; brokers with none.

use std::rc::Rc;

use kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn handle(
    _conn: &Rc<Conn>,
    header: RequestHeader,
    request: DescribeConfigsRequest,
) -> Pending {
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
        })
        .collect();
    Pending::Ready(Reply::frame(respond(
        &header,
        &DescribeConfigsResponse::default().with_results(results),
    )))
}
