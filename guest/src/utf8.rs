//! Text of a byte stream that arrives cut at arbitrary places (terminal
//! frames, log chunks): the bytes of a UTF-8 sequence split across pieces wait
//! for the rest instead of each half becoming U+FFFD; bytes that are not
//! UTF-8 at all do become U+FFFD.

/// The bytes held back between pieces: the start of an unfinished sequence.
#[derive(Debug, Default)]
pub struct Utf8Carry(Vec<u8>);

impl Utf8Carry {
    /// The text of what arrived so far, less an unfinished sequence at its end.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.0.extend_from_slice(bytes);
        let keep = unfinished_tail(&self.0);
        let rest = self.0.split_off(self.0.len() - keep);
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0 = rest;
        text
    }

    /// What is held back, at the end of the stream (an unfinished sequence
    /// stays unfinished: U+FFFD).
    pub fn rest(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0.clear();
        text
    }
}

/// How many bytes at the end of `buf` start a sequence that is not complete yet.
fn unfinished_tail(buf: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match std::str::from_utf8(&buf[at..]) {
            Ok(_) => return 0,
            Err(e) => match e.error_len() {
                None => return buf.len() - (at + e.valid_up_to()),
                // Not UTF-8 here: it stays as it is (U+FFFD); look further.
                Some(bad) => at += e.valid_up_to() + bad,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_sequences_wait_for_their_rest() {
        let text = "aé€😀z";
        let bytes = text.as_bytes();
        // Cut everywhere: the pieces put together are the text.
        for cut in 0..=bytes.len() {
            let mut carry = Utf8Carry::default();
            let mut out = carry.push(&bytes[..cut]);
            out.push_str(&carry.push(&bytes[cut..]));
            out.push_str(&carry.rest());
            assert_eq!(out, text, "cut at {cut}");
        }
        // Byte by byte, too.
        let mut carry = Utf8Carry::default();
        let out: String = bytes.iter().map(|b| carry.push(&[*b])).collect();
        assert_eq!(out, text);
    }

    #[test]
    fn bytes_that_are_not_utf8_become_replacement_characters() {
        let mut carry = Utf8Carry::default();
        // A stray continuation byte, then the first half of `é`.
        assert_eq!(carry.push(b"a\x80b\xc3"), "a\u{fffd}b");
        assert_eq!(carry.push(b"\xa9"), "é");
        // An unfinished sequence at the very end.
        assert_eq!(carry.push(b"\xe2\x82"), "");
        assert_eq!(carry.rest(), "\u{fffd}");
        assert_eq!(carry.rest(), "");
    }
}
