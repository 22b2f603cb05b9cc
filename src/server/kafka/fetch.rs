//! Fetch: not yet served.

use std::rc::Rc;

use kafka_protocol::messages::{FetchRequest, FetchResponse};

use super::errors::UNKNOWN_SERVER_ERROR;
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn handle(_conn: &Rc<Conn>, header: RequestHeader, _request: FetchRequest) -> Pending {
    let body = FetchResponse::default().with_error_code(UNKNOWN_SERVER_ERROR);
    Pending::Ready(Reply::frame(respond(&header, &body)))
}
