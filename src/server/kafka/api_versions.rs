//! ApiVersions: exactly the served table (`protocol::kafka::apis::SERVED`), with no tagged
//! fields at v3 (librdkafka 2.0.2 misreads them).

use kafka_protocol::messages::ApiVersionsRequest;

use super::{Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::protocol::kafka::apis::api_versions_response;

pub(super) fn handle(header: &RequestHeader, _request: ApiVersionsRequest) -> Pending {
    Pending::Ready(Reply::frame(respond(header, &api_versions_response(None))))
}
