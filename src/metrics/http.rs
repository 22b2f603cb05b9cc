//! The metrics endpoint's HTTP, sans-IO: a request head is parsed by `httparse` from a
//! bounded buffer, and answered with one response, after which the connection closes.
//! Only `GET` and `HEAD` of `/metrics` (any query string) are served.

/// Largest request head read; anything longer is refused with 431.
pub const REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;
/// Headers a request may have.
const HEADERS_MAX: usize = 64;

/// What a complete request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `GET /metrics`, or `HEAD` (`head_only`: the same head, no body).
    Metrics {
        head_only: bool,
    },
    NotFound,
    MethodNotAllowed,
}

/// A request that cannot be served, and the status that says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("request head is over {REQUEST_HEAD_MAX_BYTES} bytes")]
    HeadTooLarge,
    #[error("malformed request: {0}")]
    Malformed(String),
}

impl HttpError {
    pub fn status(&self) -> Status {
        match self {
            HttpError::HeadTooLarge => Status::HeadTooLarge,
            HttpError::Malformed(_) => Status::BadRequest,
        }
    }
}

/// Parses the request head at the front of `buf`: `Ok(None)` while incomplete.
pub fn parse_request(buf: &[u8]) -> Result<Option<Target>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) if buf.len() >= REQUEST_HEAD_MAX_BYTES => {
            return Err(HttpError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadTooLarge),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    }
    let (Some(method), Some(path)) = (request.method, request.path) else {
        return Err(HttpError::Malformed("no request line".into()));
    };
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Ok(Some(Target::MethodNotAllowed)),
    };
    Ok(Some(if path == "/metrics" {
        Target::Metrics { head_only }
    } else {
        Target::NotFound
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    HeadTooLarge,
    Unavailable,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::HeadTooLarge => "431 Request Header Fields Too Large",
            Status::Unavailable => "503 Service Unavailable",
        }
    }
}

/// Encodes a response head for a body of `body_len` bytes; the connection closes after it.
pub fn response_head(status: Status, content_type: &str, body_len: usize) -> String {
    let allow = if status == Status::MethodNotAllowed {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {body_len}\r\n{allow}Connection: close\r\n\r\n",
        status.line()
    )
}

/// A whole plain-text response (errors).
pub fn plain_response(status: Status, message: &str) -> Vec<u8> {
    let body = format!("{message}\n");
    let mut out = response_head(status, "text/plain; charset=utf-8", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let get = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n";
        assert_eq!(
            parse_request(get),
            Ok(Some(Target::Metrics { head_only: false }))
        );
        assert_eq!(
            parse_request(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Ok(Some(Target::Metrics { head_only: true }))
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\n\r\n"),
            Ok(Some(Target::NotFound))
        );
        assert_eq!(
            parse_request(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Ok(Some(Target::MethodNotAllowed))
        );
        assert_eq!(parse_request(&get[..get.len() - 2]), Ok(None));
        assert_eq!(parse_request(b""), Ok(None));
    }

    #[test]
    fn bad_and_oversized_heads() {
        assert!(matches!(
            parse_request(b"GET /metrics HTTP/9\r\n\r\n"),
            Err(HttpError::Malformed(_))
        ));
        assert!(matches!(
            parse_request(b"\x16\x03\x01\x00\xa5\x01\x00\x00"),
            Err(HttpError::Malformed(_))
        ));
        let mut long = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
        long.resize(REQUEST_HEAD_MAX_BYTES, b'a');
        assert_eq!(parse_request(&long), Err(HttpError::HeadTooLarge));
        let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
        for i in 0..=HEADERS_MAX {
            many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse_request(&many), Err(HttpError::HeadTooLarge));
    }

    #[test]
    fn heads() {
        let head = response_head(Status::Ok, "text/plain", 12);
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(head.contains("Content-Length: 12\r\n"));
        assert!(head.ends_with("Connection: close\r\n\r\n"));
        let refused = String::from_utf8(plain_response(Status::MethodNotAllowed, "no")).unwrap();
        assert!(refused.contains("Allow: GET, HEAD\r\n"));
        assert!(refused.ends_with("\r\n\r\nno\n"));
    }
}
