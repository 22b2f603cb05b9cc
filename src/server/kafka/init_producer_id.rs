//! InitProducerId: hands out producer ids for idempotent producers (epoch 0). Ids are the
//! broker's start time in ms times 1024 plus a broker-wide counter, so a restarted broker
//! never hands out an id the previous run gave (unless it gave more than 1024 per ms of
//! uptime). Transactions are not served: a transactional id gets
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use std::rc::Rc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

static NEXT_PRODUCER_ID: OnceLock<AtomicI64> = OnceLock::new();

fn next_producer_id() -> i64 {
    NEXT_PRODUCER_ID
        .get_or_init(|| {
            let now_ms = i64::try_from(crate::clock::now_ns() / 1_000_000).unwrap_or(0);
            AtomicI64::new(now_ms.saturating_mul(1024))
        })
        .fetch_add(1, Ordering::Relaxed)
}

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: InitProducerIdRequest,
) -> Pending {
    let idempotent_writer = conn.may(
        super::errors::acl(KafkaApi::InitProducerId),
        ResourceType::Cluster,
        crate::security::acl::CLUSTER_NAME,
    );
    let body = if !idempotent_writer {
        InitProducerIdResponse::default()
            .with_error_code(super::errors::CLUSTER_AUTHORIZATION_FAILED)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    } else if request.transactional_id.is_some() {
        InitProducerIdResponse::default()
            .with_error_code(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    } else if request.producer_id.0 >= 0 {
        // A producer bumping its epoch (after a sequence error): the same id, the next epoch.
        InitProducerIdResponse::default()
            .with_producer_id(request.producer_id)
            .with_producer_epoch(request.producer_epoch.saturating_add(1).max(0))
    } else {
        InitProducerIdResponse::default()
            .with_producer_id(ProducerId(next_producer_id()))
            .with_producer_epoch(0)
    };
    Pending::Ready(Reply::frame(respond(&header, &body)))
}
