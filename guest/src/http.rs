//! A small blocking HTTP/1.1 client over `wasi:http`: requests with a whole or
//! a streamed body, responses read whole or chunk by chunk. Redirects are never
//! followed; the host decides where a request may go.

use std::time::Duration;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, FutureIncomingResponse, Headers, IncomingBody, IncomingResponse, Method,
    OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::{InputStream, OutputStream, StreamError};

/// How a request failed below HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// The host's network policy refused the destination.
    Denied,
    /// Nothing listens there, or the name does not resolve.
    Refused(String),
    /// Connect, first byte or between bytes took too long.
    Timeout(String),
    /// The connection broke or the answer was malformed.
    Broken(String),
    /// The request itself could not be formed (a bug or a bad URL).
    Invalid(String),
}

fn transport(e: &ErrorCode) -> Transport {
    match e {
        ErrorCode::HttpRequestDenied => Transport::Denied,
        ErrorCode::DnsError(_)
        | ErrorCode::ConnectionRefused
        | ErrorCode::DestinationNotFound
        | ErrorCode::DestinationUnavailable
        | ErrorCode::DestinationIpProhibited
        | ErrorCode::DestinationIpUnroutable => Transport::Refused(format!("{e:?}")),
        ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::DnsTimeout
        | ErrorCode::HttpResponseTimeout => Transport::Timeout(format!("{e:?}")),
        other => Transport::Broken(format!("{other:?}")),
    }
}

/// An absolute `http(s)://authority/path?query` URL, split for `wasi:http`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    pub authority: String,
    pub path_and_query: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, Transport> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(Transport::Invalid(format!("`{url}` is not an http(s) URL")));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(Transport::Invalid(format!("`{url}` has no host")));
        }
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        Ok(Url {
            https,
            authority: authority.to_string(),
            path_and_query: path,
        })
    }

    /// `scheme://authority`, for messages.
    pub fn origin(&self) -> String {
        format!(
            "{}://{}",
            if self.https { "https" } else { "http" },
            self.authority
        )
    }
}

/// Timeouts of one request.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub between_bytes: Duration,
}

impl Timeouts {
    /// Ordinary API calls that change something.
    pub const API: Timeouts = Timeouts {
        connect: Duration::from_secs(10),
        first_byte: Duration::from_secs(60),
        between_bytes: Duration::from_secs(60),
    };

    /// Small reads (`GET` of a sandbox, a list, an endpoint, a file's info, a
    /// command's status or logs): 30 s, like the official SDKs' request timeout,
    /// so a stalled server ends the request with E5004 after 30 s (reads that
    /// time out are not retried; docs/reliability.md).
    pub const READ: Timeouts = Timeouts {
        connect: Duration::from_secs(10),
        first_byte: Duration::from_secs(30),
        between_bytes: Duration::from_secs(30),
    };

    pub fn first_byte(mut self, d: Duration) -> Timeouts {
        self.first_byte = d;
        self
    }

    pub fn between_bytes(mut self, d: Duration) -> Timeouts {
        self.between_bytes = d;
        self
    }
}

/// A request header that asks the host to send this request without its
/// secret headers (abx:epp: the host removes it), to see what an anonymous
/// client of a URL would get.
pub const ANONYMOUS_HEADER: &str = "epp-anonymous";

/// A request to send.
pub struct Request {
    pub method: &'static str,
    pub url: Url,
    pub headers: Vec<(String, String)>,
    pub timeouts: Timeouts,
}

impl Request {
    /// A request with the default timeouts of its kind: [`Timeouts::READ`] for
    /// `GET`, [`Timeouts::API`] otherwise.
    pub fn new(method: &'static str, url: Url) -> Request {
        Request {
            method,
            url,
            headers: Vec::new(),
            timeouts: if method == "GET" {
                Timeouts::READ
            } else {
                Timeouts::API
            },
        }
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Request {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    pub fn headers(mut self, headers: &[(String, String)]) -> Request {
        self.headers.extend(headers.iter().cloned());
        self
    }

    pub fn timeouts(mut self, timeouts: Timeouts) -> Request {
        self.timeouts = timeouts;
        self
    }

    fn build(&self) -> Result<(OutgoingRequest, OutgoingBody, RequestOptions), Transport> {
        let entries: Vec<(String, Vec<u8>)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone().into_bytes()))
            .collect();
        let headers = Headers::from_list(&entries)
            .map_err(|e| Transport::Invalid(format!("header rejected by the host: {e:?}")))?;
        let req = OutgoingRequest::new(headers);
        let method = match self.method {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "HEAD" => Method::Head,
            other => Method::Other(other.to_string()),
        };
        let bad =
            |what: &str| Transport::Invalid(format!("invalid {what} in {}", self.url.origin()));
        req.set_method(&method).map_err(|_| bad("method"))?;
        req.set_scheme(Some(if self.url.https {
            &Scheme::Https
        } else {
            &Scheme::Http
        }))
        .map_err(|_| bad("scheme"))?;
        req.set_authority(Some(&self.url.authority))
            .map_err(|_| bad("authority"))?;
        req.set_path_with_query(Some(&self.url.path_and_query))
            .map_err(|_| bad("path"))?;
        let body = req.body().map_err(|_| bad("body"))?;
        let options = RequestOptions::new();
        let ns = |d: Duration| d.as_nanos().min(u128::from(u64::MAX)) as u64;
        // A host may not support some timeouts; that is not an error.
        let _ = options.set_connect_timeout(Some(ns(self.timeouts.connect)));
        let _ = options.set_first_byte_timeout(Some(ns(self.timeouts.first_byte)));
        let _ = options.set_between_bytes_timeout(Some(ns(self.timeouts.between_bytes)));
        Ok((req, body, options))
    }

    /// Sends the request with a whole body (or none) and waits for the answer's head.
    pub fn send(self, body: &[u8]) -> Result<Response, Transport> {
        let mut upload = self.start()?;
        if !body.is_empty() {
            upload.write(body)?;
        }
        upload.finish()
    }

    /// Starts the request; the body is written through the returned `Upload`.
    pub fn start(self) -> Result<Upload, Transport> {
        let (req, body, options) = self.build()?;
        let future = outgoing_handler::handle(req, Some(options)).map_err(|e| transport(&e))?;
        let stream = body
            .write()
            .map_err(|_| Transport::Invalid("request body already taken".into()))?;
        Ok(Upload {
            stream: Some(stream),
            body: Some(body),
            future,
            answer: None,
        })
    }
}

/// A request whose body is being written.
pub struct Upload {
    stream: Option<OutputStream>,
    body: Option<OutgoingBody>,
    future: FutureIncomingResponse,
    /// The answer once it arrived (the future hands it out only once).
    answer: Option<Result<IncomingResponse, ErrorCode>>,
}

impl Upload {
    /// Writes all of `data`, waiting when the host's buffer is full.
    pub fn write(&mut self, data: &[u8]) -> Result<(), Transport> {
        let mut at = 0;
        self.pump(data.len() as u64, |stream, n| {
            stream.write(&data[at..][..n as usize])?;
            at += n as usize;
            Ok(n)
        })
    }

    /// Moves exactly `len` bytes from `source` into the body with `splice`
    /// (the host moves them; they never enter this component's memory),
    /// waiting when the host's buffer is full.
    pub fn splice_from(&mut self, source: &InputStream, len: u64) -> Result<(), Transport> {
        self.pump(len, |stream, n| stream.splice(source, n))
    }

    /// Puts `len` bytes into the body, `put` moving up to the given number at
    /// a time and answering how many it moved (0: its source ran dry, which
    /// only the host's source of a `splice` can).
    fn pump(
        &mut self,
        mut len: u64,
        mut put: impl FnMut(&OutputStream, u64) -> Result<u64, StreamError>,
    ) -> Result<(), Transport> {
        while len > 0 {
            let stream = self.stream.as_ref().expect("upload already finished");
            let permit = match stream.check_write() {
                Ok(n) => n,
                Err(e) => return Err(self.write_failed(e)),
            };
            if permit == 0 {
                if let Some(early) = self.early_response() {
                    return Err(early);
                }
                self.stream.as_ref().expect("open").subscribe().block();
                continue;
            }
            match put(self.stream.as_ref().expect("open"), permit.min(len)) {
                Ok(0) => {
                    return Err(Transport::Broken(format!(
                        "the host's source ended {len} bytes before the end it announced"
                    )));
                }
                Ok(n) => len -= n,
                Err(e) => return Err(self.write_failed(e)),
            }
        }
        Ok(())
    }

    /// Takes the answer if it is there, keeping it for later.
    fn poll_answer(&mut self) -> Option<&Result<IncomingResponse, ErrorCode>> {
        if self.answer.is_none() {
            match self.future.get() {
                Some(Ok(answer)) => self.answer = Some(answer),
                Some(Err(())) | None => return None,
            }
        }
        self.answer.as_ref()
    }

    /// If the server already answered (e.g. 413, 401), reports that instead of a
    /// write error (the answer itself stays available to `finish_with`).
    fn early_response(&mut self) -> Option<Transport> {
        match self.poll_answer()? {
            Ok(resp) => Some(Transport::Broken(format!(
                "the server answered HTTP {} before the upload finished",
                resp.status()
            ))),
            Err(e) => Some(transport(e)),
        }
    }

    fn write_failed(&mut self, e: StreamError) -> Transport {
        // The body broke because the request failed or was answered: the
        // response future says which, and soon.
        let waited = wasip2::clocks::monotonic_clock::subscribe_duration(2_000_000_000);
        let answer = self.future.subscribe();
        wasip2::io::poll::poll(&[&answer, &waited]);
        self.early_response().unwrap_or_else(|| match e {
            StreamError::LastOperationFailed(err) => Transport::Broken(err.to_debug_string()),
            StreamError::Closed => {
                Transport::Broken("the connection closed during the upload".into())
            }
        })
    }

    /// Writes the last bytes and waits for the answer. A server may answer as
    /// soon as it has parsed what it needs; that answer counts, not the write.
    pub fn finish_with(mut self, tail: &[u8]) -> Result<Response, Transport> {
        match self.write(tail) {
            Ok(()) => self.finish(),
            Err(e) => match self.answer.take() {
                Some(Ok(resp)) => Response::new(resp),
                _ => Err(e),
            },
        }
    }

    /// Ends the body and waits for the response head.
    pub fn finish(mut self) -> Result<Response, Transport> {
        if let Some(stream) = self.stream.take() {
            // With a Content-Length the host closes the stream as soon as the
            // last byte is taken: `Closed` after the whole body is success.
            let flushed = stream.blocking_flush();
            drop(stream);
            if let Err(e @ StreamError::LastOperationFailed(_)) = flushed {
                return Err(self.write_failed(e));
            }
        }
        if let Some(body) = self.body.take() {
            OutgoingBody::finish(body, None).map_err(|e| transport(&e))?;
        }
        loop {
            if let Some(answer) = self.answer.take() {
                return answer.map_err(|e| transport(&e)).and_then(Response::new);
            }
            match self.future.get() {
                Some(Ok(answer)) => self.answer = Some(answer),
                Some(Err(())) => return Err(Transport::Broken("response already taken".into())),
                None => self.future.subscribe().block(),
            }
        }
    }
}

/// A response whose body has not been read yet.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    body: BodyReader,
}

impl Response {
    fn new(resp: IncomingResponse) -> Result<Response, Transport> {
        let status = resp.status();
        let headers = resp
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_ascii_lowercase(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect();
        let body = resp
            .consume()
            .map_err(|_| Transport::Broken("response body already taken".into()))?;
        let stream = body
            .stream()
            .map_err(|_| Transport::Broken("response body stream already taken".into()))?;
        Ok(Response {
            status,
            headers,
            body: BodyReader {
                stream: Some(stream),
                body: Some(body),
                _response: resp,
                done: false,
            },
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The whole body, up to `limit` bytes (more is an error).
    pub fn read_all(mut self, limit: usize) -> Result<Vec<u8>, Transport> {
        let mut out = Vec::new();
        while let Some(chunk) = self.body.read(64 * 1024)? {
            if out.len() + chunk.len() > limit {
                return Err(Transport::Broken(format!(
                    "answer larger than {limit} bytes"
                )));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    pub fn into_reader(self) -> BodyReader {
        self.body
    }
}

/// A response body read chunk by chunk.
pub struct BodyReader {
    // Field order is drop order: the stream before its body before the response.
    stream: Option<InputStream>,
    body: Option<IncomingBody>,
    _response: IncomingResponse,
    done: bool,
}

impl BodyReader {
    /// Up to `max` bytes, waiting for at least one; none at the end.
    pub fn read(&mut self, max: usize) -> Result<Option<Vec<u8>>, Transport> {
        self.step(|stream| stream.blocking_read(max as u64))
    }

    /// Moves up to `max` bytes into `sink` with `splice` (the host moves them;
    /// they never enter this component's memory): waits for at least one, then
    /// takes what else has already arrived. Answers how many; none at the end.
    pub fn splice_into(&mut self, sink: &OutputStream, max: u64) -> Result<Option<u64>, Transport> {
        let Some(mut moved) = self.step(|stream| sink.blocking_splice(stream, max))? else {
            return Ok(None);
        };
        while moved < max {
            match self.step(|stream| sink.splice(stream, max - moved))? {
                Some(0) | None => break,
                Some(n) => moved += n,
            }
        }
        Ok(Some(moved))
    }

    /// One operation on the body's stream: its answer, none once the body
    /// ended (then and after), or what broke it.
    fn step<T>(
        &mut self,
        op: impl FnOnce(&InputStream) -> Result<T, StreamError>,
    ) -> Result<Option<T>, Transport> {
        if self.done {
            return Ok(None);
        }
        let stream = self.stream.as_ref().expect("stream present until done");
        match op(stream) {
            Ok(answer) => Ok(Some(answer)),
            Err(StreamError::Closed) => {
                self.done = true;
                self.stream = None;
                if let Some(body) = self.body.take() {
                    drop(IncomingBody::finish(body));
                }
                Ok(None)
            }
            Err(StreamError::LastOperationFailed(e)) => {
                self.done = true;
                // wasi:http says what broke the body as a typed code; the host
                // maps its own failures to these (a stalled body is a read timeout).
                Err(match wasip2::http::types::http_error_code(&e) {
                    Some(code) => match transport(&code) {
                        Transport::Denied | Transport::Refused(_) => {
                            Transport::Broken(format!("{code:?}"))
                        }
                        other => other,
                    },
                    None => Transport::Broken(e.to_debug_string()),
                })
            }
        }
    }
}

impl Drop for BodyReader {
    fn drop(&mut self) {
        self.stream = None;
        self.body = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8080/v1/sandboxes?x=1").unwrap();
        assert_eq!(
            (u.https, u.authority.as_str(), u.path_and_query.as_str()),
            (false, "127.0.0.1:8080", "/v1/sandboxes?x=1")
        );
        let u = Url::parse("https://h").unwrap();
        assert_eq!(u.path_and_query, "/");
        let u = Url::parse("http://h?q").unwrap();
        assert_eq!(u.path_and_query, "/?q");
        assert!(Url::parse("ftp://h").is_err());
        assert!(Url::parse("http:///x").is_err());
    }
}

/// Percent-encodes a query value or path segment (RFC 3986 unreserved kept).
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod encode_tests {
    #[test]
    fn encodes() {
        assert_eq!(super::encode("a b/ü&=x"), "a%20b%2F%C3%BC%26%3Dx");
    }
}
