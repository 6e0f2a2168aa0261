//! A minimal HTTP/1.1 client on `std::net` alone: keep-alive connections,
//! Content-Length and chunked bodies. Just enough for the benchmark floor;
//! no TLS, no redirects, no proxies.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// Read buffer per connection; large so a 64 MiB stream costs few syscalls.
const READ_BUF: usize = 256 << 10;

pub struct Conn {
    pub authority: String,
    reader: BufReader<TcpStream>,
    /// False once a response said `Connection: close` or a body was abandoned.
    pub reusable: bool,
}

pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl Conn {
    pub fn open(authority: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(authority)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            authority: authority.to_string(),
            reader: BufReader::with_capacity(READ_BUF, stream),
            reusable: true,
        })
    }

    /// Writes a request head (and a small body) in one go.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<()> {
        let mut out = Vec::with_capacity(256 + body.len());
        self.head_into(&mut out, method, path, headers, Some(body.len() as u64));
        out.extend_from_slice(body);
        self.reader.get_mut().write_all(&out)
    }

    /// Writes only the head (announcing `len` body bytes); the body follows with `write_body`.
    pub fn send_head(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        len: u64,
    ) -> io::Result<()> {
        let mut out = Vec::with_capacity(256);
        self.head_into(&mut out, method, path, headers, Some(len));
        self.reader.get_mut().write_all(&out)
    }

    pub fn write_body(&mut self, data: &[u8]) -> io::Result<()> {
        self.reader.get_mut().write_all(data)
    }

    fn head_into(
        &self,
        out: &mut Vec<u8>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        len: Option<u64>,
    ) {
        let _ = write!(
            out,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n",
            self.authority
        );
        for (k, v) in headers {
            let _ = write!(out, "{k}: {v}\r\n");
        }
        if let Some(len) = len {
            if len > 0 || method != "GET" && method != "DELETE" {
                let _ = write!(out, "Content-Length: {len}\r\n");
            }
        }
        out.extend_from_slice(b"\r\n");
    }

    pub fn read_head(&mut self) -> io::Result<Head> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the response",
            ));
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let head = Head { status, headers };
        if head
            .header("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"))
        {
            self.reusable = false;
        }
        Ok(head)
    }

    /// Streams the body to `sink` piece by piece; `sink` returns false to stop
    /// early (the connection is then not reused).
    pub fn read_body(&mut self, head: &Head, mut sink: impl FnMut(&[u8]) -> bool) -> io::Result<()> {
        // No body, whatever the headers say (RFC 9112 §6.3).
        if head.status == 204 || head.status == 304 || head.status < 200 {
            return Ok(());
        }
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
        if chunked {
            return self.read_chunked(sink);
        }
        let Some(mut left) = head.header("content-length").and_then(|v| v.parse::<u64>().ok())
        else {
            // Body until EOF.
            self.reusable = false;
            loop {
                let buf = self.reader.fill_buf()?;
                if buf.is_empty() {
                    return Ok(());
                }
                let n = buf.len();
                let go_on = sink(buf);
                self.reader.consume(n);
                if !go_on {
                    return Ok(());
                }
            }
        };
        while left > 0 {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                return Err(bad("connection closed inside the body"));
            }
            let n = buf.len().min(left as usize);
            let go_on = sink(&buf[..n]);
            self.reader.consume(n);
            left -= n as u64;
            if !go_on && left > 0 {
                self.reusable = false;
                return Ok(());
            }
        }
        Ok(())
    }

    fn read_chunked(&mut self, mut sink: impl FnMut(&[u8]) -> bool) -> io::Result<()> {
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let size_text = line.trim().split(';').next().unwrap_or("");
            let mut left = usize::from_str_radix(size_text, 16)
                .map_err(|_| bad(format!("bad chunk size {line:?}")))?;
            if left == 0 {
                // Trailers, then the blank line.
                loop {
                    line.clear();
                    self.reader.read_line(&mut line)?;
                    if line.trim().is_empty() {
                        return Ok(());
                    }
                }
            }
            while left > 0 {
                let buf = self.reader.fill_buf()?;
                if buf.is_empty() {
                    return Err(bad("connection closed inside a chunk"));
                }
                let n = buf.len().min(left);
                let go_on = sink(&buf[..n]);
                self.reader.consume(n);
                left -= n;
                if !go_on {
                    self.reusable = false;
                    return Ok(());
                }
            }
            let mut crlf = [0u8; 2];
            self.reader.read_exact(&mut crlf)?;
        }
    }

    /// The whole body (small answers).
    pub fn read_all(&mut self, head: &Head) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_body(head, |b| {
            out.extend_from_slice(b);
            true
        })?;
        Ok(out)
    }
}

/// A pool of kept-alive connections to one authority.
pub struct Pool {
    authority: String,
    idle: std::sync::Mutex<Vec<Conn>>,
}

impl Pool {
    pub fn new(authority: &str) -> Pool {
        Pool {
            authority: authority.to_string(),
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn take(&self) -> io::Result<Conn> {
        if let Some(c) = self.idle.lock().unwrap().pop() {
            return Ok(c);
        }
        Conn::open(&self.authority)
    }

    pub fn give(&self, conn: Conn) {
        if conn.reusable {
            self.idle.lock().unwrap().push(conn);
        }
    }
}
