//! Requests by type and error code, per core: fixed arrays of `Cell`s indexed by the
//! request's kind and the error's code, so counting one is two array writes.

use std::cell::Cell;

use crate::protocol::kafka::apis::SERVED;
use crate::protocol::native::{ApiKey, ErrorCode};

/// What a request was, for the `type` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Native(ApiKey),
    /// A native frame whose api could not be read (too large, or malformed before the api).
    NativeUnknown,
    /// One batch from a HermitMQ v1 producer.
    HermitProduce,
    /// One HermitMQ v1 consumer session.
    HermitConsume,
    /// One HermitMQ v1 commit.
    HermitCommit,
    /// A Kafka request of the served API at this index of [`SERVED`].
    Kafka(u8),
    /// A Kafka request for an API or version not served, or that did not decode.
    KafkaUnknown,
}

const NATIVE_KINDS: usize = ApiKey::ALL.len();
/// Every request kind: one per native api, the four others of native and HermitMQ v1, one
/// per served Kafka API and Kafka's unknown.
pub const KINDS: usize = NATIVE_KINDS + 4 + SERVED.len() + 1;
const KAFKA_FIRST: usize = NATIVE_KINDS + 4;
pub const CODES: usize = ErrorCode::ALL.len();

impl RequestKind {
    /// The kind of a request of the served Kafka API `key`.
    pub fn kafka(key: kafka_protocol::messages::ApiKey) -> RequestKind {
        SERVED
            .iter()
            .position(|served| served.key == key)
            .and_then(|at| u8::try_from(at).ok())
            .map_or(RequestKind::KafkaUnknown, RequestKind::Kafka)
    }

    fn index(self) -> usize {
        match self {
            RequestKind::Native(api) => ApiKey::ALL
                .iter()
                .position(|&a| a == api)
                .expect("every api is in ALL"),
            RequestKind::NativeUnknown => NATIVE_KINDS,
            RequestKind::HermitProduce => NATIVE_KINDS + 1,
            RequestKind::HermitConsume => NATIVE_KINDS + 2,
            RequestKind::HermitCommit => NATIVE_KINDS + 3,
            RequestKind::Kafka(at) => KAFKA_FIRST + usize::from(at),
            RequestKind::KafkaUnknown => KAFKA_FIRST + SERVED.len(),
        }
    }

    fn from_index(index: usize) -> RequestKind {
        match index.checked_sub(NATIVE_KINDS) {
            None => RequestKind::Native(ApiKey::ALL[index]),
            Some(0) => RequestKind::NativeUnknown,
            Some(1) => RequestKind::HermitProduce,
            Some(2) => RequestKind::HermitConsume,
            Some(3) => RequestKind::HermitCommit,
            Some(at) if at - 4 < SERVED.len() => {
                RequestKind::Kafka(u8::try_from(at - 4).expect("fewer than 256 served APIs"))
            }
            Some(at) if at - 4 == SERVED.len() => RequestKind::KafkaUnknown,
            Some(_) => panic!("request kind index {index} out of range"),
        }
    }

    /// `(protocol, type)` labels.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            RequestKind::Native(api) => ("native", api.name()),
            RequestKind::NativeUnknown => ("native", "Unknown"),
            RequestKind::HermitProduce => ("hermit", "Produce"),
            RequestKind::HermitConsume => ("hermit", "Consume"),
            RequestKind::HermitCommit => ("hermit", "Commit"),
            RequestKind::Kafka(at) => ("kafka", SERVED[usize::from(at)].name),
            RequestKind::KafkaUnknown => ("kafka", "Unknown"),
        }
    }
}

fn code_index(code: ErrorCode) -> usize {
    ErrorCode::ALL
        .iter()
        .position(|&c| c == code)
        .expect("every code is in ALL")
}

/// One core's request counters.
#[derive(Debug)]
pub struct RequestCounters {
    requests: [Cell<u64>; KINDS],
    errors: [[Cell<u64>; CODES]; KINDS],
}

impl Default for RequestCounters {
    fn default() -> Self {
        RequestCounters {
            requests: [const { Cell::new(0) }; KINDS],
            errors: [const { [const { Cell::new(0) }; CODES] }; KINDS],
        }
    }
}

impl RequestCounters {
    /// Counts a request, whatever its outcome.
    pub fn request(&self, kind: RequestKind) {
        let cell = &self.requests[kind.index()];
        cell.set(cell.get() + 1);
    }

    /// Counts an error answer (or, for HermitMQ v1, which has none, a refusal).
    pub fn error(&self, kind: RequestKind, code: ErrorCode) {
        let cell = &self.errors[kind.index()][code_index(code)];
        cell.set(cell.get() + 1);
    }

    /// Non-zero counts only: `(kind, requests, [(code, errors)])`.
    pub fn snapshot(&self) -> Vec<RequestCount> {
        (0..KINDS)
            .filter_map(|i| {
                let requests = self.requests[i].get();
                let errors: Vec<(ErrorCode, u64)> = self.errors[i]
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.get() > 0)
                    .map(|(code, c)| (ErrorCode::ALL[code], c.get()))
                    .collect();
                (requests > 0 || !errors.is_empty()).then(|| RequestCount {
                    kind: RequestKind::from_index(i),
                    requests,
                    errors,
                })
            })
            .collect()
    }
}

/// Counts of one request kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestCount {
    pub kind: RequestKind,
    pub requests: u64,
    pub errors: Vec<(ErrorCode, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_count() {
        for i in 0..KINDS {
            assert_eq!(RequestKind::from_index(i).index(), i);
        }
        let c = RequestCounters::default();
        c.request(RequestKind::Native(ApiKey::Produce));
        c.request(RequestKind::Native(ApiKey::Produce));
        c.error(RequestKind::Native(ApiKey::Produce), ErrorCode::CrcMismatch);
        c.error(RequestKind::NativeUnknown, ErrorCode::FrameTooLarge);
        let snap = c.snapshot();
        assert_eq!(snap.len(), 2);
        assert_eq!(snap[0].kind, RequestKind::Native(ApiKey::Produce));
        assert_eq!(snap[0].requests, 2);
        assert_eq!(snap[0].errors, vec![(ErrorCode::CrcMismatch, 1)]);
        assert_eq!(snap[1].kind.labels(), ("native", "Unknown"));
        assert_eq!(snap[1].requests, 0);
    }
}
