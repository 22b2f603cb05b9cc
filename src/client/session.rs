//! The sans-IO half of a client connection: correlation ids, the requests in flight, and
//! matching each response frame to the request it answers. The blocking and the glommio
//! clients both drive a [`Session`]; neither holds protocol state of its own.
//!
//! A session never touches a socket. The driver writes what [`Session::request`] encoded
//! (or a frame it built in place, registered with [`Session::register`]), reads bytes into
//! its own buffer, asks [`next_frame`] whether a whole response is there, and hands each
//! frame to [`Session::accept`], which checks it against the oldest request in flight and
//! gives back the token the driver attached to that request.

use std::collections::VecDeque;

use crate::client::ClientError;
use crate::protocol::native::{
    self, ErrorCode, GroupDescription, MetadataResponse, Request, ResponseHeader,
};

/// Largest response frame a client accepts (a fetch answers at most 64 MiB plus a batch).
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Checks the broker's preface.
pub fn check_broker_preface(preface: &[u8; native::PREFACE_LEN]) -> Result<(), ClientError> {
    let version = native::check_preface(preface).map_err(protocol)?;
    if version != native::VERSION {
        return Err(ClientError::Protocol(format!(
            "broker speaks version {version}, not {}",
            native::VERSION
        )));
    }
    Ok(())
}

/// The length of a response frame (prefix included) from its 4-byte prefix, checked: at
/// least a response header, at most [`RESPONSE_BYTES_MAX`].
pub fn frame_len(prefix: [u8; native::FRAME_LEN_BYTES]) -> Result<usize, ClientError> {
    let body = u32::from_be_bytes(prefix) as usize;
    if body < native::RESPONSE_HEADER_LEN {
        return Err(ClientError::Protocol(format!(
            "response frame of {body} bytes, shorter than its header"
        )));
    }
    if body > RESPONSE_BYTES_MAX {
        return Err(ClientError::Protocol(format!(
            "response frame of {body} bytes (the client accepts {RESPONSE_BYTES_MAX})"
        )));
    }
    Ok(native::FRAME_LEN_BYTES + body)
}

/// Whether `input` starts with a whole response frame: `Ok(Some(frame_bytes))` if so
/// (length prefix included), `Ok(None)` if more bytes are needed.
pub fn next_frame(input: &[u8]) -> Result<Option<usize>, ClientError> {
    let Some(prefix) = input.first_chunk::<{ native::FRAME_LEN_BYTES }>() else {
        return Ok(None);
    };
    let len = frame_len(*prefix)?;
    Ok((input.len() >= len).then_some(len))
}

/// Requests in flight on one connection, each with the driver's token `T`.
#[derive(Debug)]
pub struct Session<T> {
    next_correlation_id: u32,
    in_flight: VecDeque<(u32, T)>,
}

impl<T> Default for Session<T> {
    fn default() -> Self {
        Session {
            next_correlation_id: 1,
            in_flight: VecDeque::new(),
        }
    }
}

impl<T> Session<T> {
    /// Encodes `request` onto `out` and records it as in flight; returns its correlation id.
    pub fn request(&mut self, out: &mut Vec<u8>, request: &Request<'_>, token: T) -> u32 {
        let correlation_id = self.register(token);
        native::encode_request(out, correlation_id, request);
        correlation_id
    }

    /// Records a request the driver encodes itself (e.g. a [`ProduceFrame`] built in place)
    /// under the returned correlation id. The driver must send it before any request
    /// registered after it.
    ///
    /// [`ProduceFrame`]: crate::client::produce::ProduceFrame
    pub fn register(&mut self, token: T) -> u32 {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        self.in_flight.push_back((correlation_id, token));
        correlation_id
    }

    /// Requests sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Takes one whole response frame (as [`next_frame`] measured it, length prefix
    /// included): checks that it answers the oldest request in flight (the broker answers
    /// in request order) and returns that request's token with the response header.
    pub fn accept(&mut self, frame: &[u8]) -> Result<(T, ResponseHeader), ClientError> {
        let (header, _) =
            native::decode_response(&frame[native::FRAME_LEN_BYTES..]).map_err(protocol)?;
        match self.in_flight.front() {
            Some(&(expected, _)) if expected == header.correlation_id => {}
            Some(&(expected, _)) => {
                return Err(ClientError::Protocol(format!(
                    "answer to request {} arrived while request {expected} was the oldest in flight",
                    header.correlation_id
                )));
            }
            None => {
                return Err(ClientError::Protocol(format!(
                    "answer to request {} arrived with no request in flight",
                    header.correlation_id
                )));
            }
        }
        let (_, token) = self.in_flight.pop_front().expect("checked above");
        Ok((token, header))
    }

    /// Ends every request in flight (the connection failed); returns their tokens.
    pub fn fail_all(&mut self) -> impl Iterator<Item = T> + '_ {
        self.in_flight.drain(..).map(|(_, token)| token)
    }
}

/// A response frame matched to its request: the header and the frame's bytes, owned (`B =
/// Vec<u8>` or `bytes::Bytes`) or borrowed.
#[derive(Debug, Clone)]
pub struct Reply<B> {
    pub header: ResponseHeader,
    frame: B,
}

impl<B: AsRef<[u8]>> Reply<B> {
    pub fn new(header: ResponseHeader, frame: B) -> Self {
        Reply { header, frame }
    }

    /// The body after the response header, or the broker's error.
    pub fn body(&self) -> Result<&[u8], ClientError> {
        let body = &self.frame.as_ref()[native::FRAME_LEN_BYTES + native::RESPONSE_HEADER_LEN..];
        if self.header.error == ErrorCode::None as u16 {
            Ok(body)
        } else {
            Err(ClientError::from_response(self.header.error, body))
        }
    }

    /// Success with no body expected.
    pub fn done(&self) -> Result<(), ClientError> {
        self.body().map(|_| ())
    }

    /// A produce answer: (base offset, next offset).
    pub fn produced(&self) -> Result<(u64, u64), ClientError> {
        native::decode_produce_response(self.body()?).map_err(protocol)
    }

    /// A list-offsets or fetch-offset answer.
    pub fn offset(&self) -> Result<u64, ClientError> {
        native::decode_offset_response(self.body()?).map_err(protocol)
    }

    pub fn metadata(&self) -> Result<MetadataResponse, ClientError> {
        native::decode_metadata_response(self.body()?).map_err(protocol)
    }

    pub fn cluster_status(&self) -> Result<native::ClusterStatusResponse, ClientError> {
        native::decode_cluster_status_response(self.body()?).map_err(protocol)
    }

    pub fn groups(&self) -> Result<Vec<String>, ClientError> {
        native::decode_list_groups_response(self.body()?).map_err(protocol)
    }

    pub fn group(&self) -> Result<GroupDescription, ClientError> {
        native::decode_describe_group_response(self.body()?).map_err(protocol)
    }

    pub fn joined(&self) -> Result<native::JoinedGroup, ClientError> {
        native::decode_join_group_response(self.body()?).map_err(protocol)
    }

    /// A fetch answer, every batch checked against its CRC.
    pub fn fetched(&self) -> Result<crate::client::consume::FetchedBatches<'_>, ClientError> {
        crate::client::consume::FetchedBatches::decode(self.body()?)
    }
}

pub(crate) fn protocol(e: impl std::fmt::Display) -> ClientError {
    ClientError::Protocol(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(correlation_id: u32, error: ErrorCode) -> Vec<u8> {
        let mut out = Vec::new();
        native::encode_empty_response(&mut out, correlation_id, error);
        out
    }

    #[test]
    fn answers_match_the_oldest_request() {
        let mut session = Session::default();
        let mut out = Vec::new();
        let a = session.request(&mut out, &Request::ListGroups, "a");
        let b = session.register("b");
        assert_eq!(b, a + 1);
        assert_eq!(session.in_flight(), 2);
        let mut input = frame(a, ErrorCode::None);
        input.extend(frame(b, ErrorCode::UnknownGroup));
        assert_eq!(next_frame(&input[..5]).unwrap(), None);
        let len = next_frame(&input).unwrap().unwrap();
        let (token, header) = session.accept(&input[..len]).unwrap();
        assert_eq!((token, header.correlation_id), ("a", a));
        let rest = &input[len..];
        let len = next_frame(rest).unwrap().unwrap();
        let (token, header) = session.accept(&rest[..len]).unwrap();
        assert_eq!(token, "b");
        let reply = Reply::new(header, &rest[..len]);
        assert_eq!(
            reply.done().unwrap_err().code(),
            Some(ErrorCode::UnknownGroup)
        );
        assert_eq!(session.in_flight(), 0);
    }

    #[test]
    fn out_of_order_and_unasked_answers_are_errors() {
        let mut session = Session::default();
        let a = session.register(());
        assert!(session.accept(&frame(a + 7, ErrorCode::None)).is_err());
        session.accept(&frame(a, ErrorCode::None)).unwrap();
        assert!(session.accept(&frame(a + 1, ErrorCode::None)).is_err());
        assert!(
            next_frame(&[0, 0, 0, 2, 0, 0]).is_err(),
            "shorter than a header"
        );
        assert!(
            next_frame(&[0x7f, 0xff, 0xff, 0xff]).is_err(),
            "over the limit"
        );
    }
}
