//! InitProducerId: not yet served; answers COORDINATOR_NOT_AVAILABLE so an idempotent
//! producer retries.

use std::rc::Rc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};

use super::errors::{COORDINATOR_NOT_AVAILABLE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn handle(
    _conn: &Rc<Conn>,
    header: RequestHeader,
    request: InitProducerIdRequest,
) -> Pending {
    let code = if request.transactional_id.is_some() {
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    } else {
        COORDINATOR_NOT_AVAILABLE
    };
    let body = InitProducerIdResponse::default()
        .with_error_code(code)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    Pending::Ready(Reply::frame(respond(&header, &body)))
}
