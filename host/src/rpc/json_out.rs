//! Answers and notifications as JSON text: byte for byte what
//! `serde_json::to_vec` writes (compact, keys in order), but strings are
//! escaped by skipping runs of plain bytes sixteen at a time (SSE2). serde_json looks
//! every byte up in a table; for a `files.read` answer or streamed output that
//! per-byte loop led the host's instruction profile (bench/profiling.md).

use serde_json::Value;

/// `value` as compact JSON text.
pub fn to_vec(value: &Value) -> Vec<u8> {
    // Sized up front: growing from a small buffer copies a big answer (a file
    // read) several times and faults in every page of each copy.
    let mut out = Vec::with_capacity(size_hint(value));
    write_value(&mut out, value);
    out
}

/// About how many bytes `value` takes as JSON (ASCII text with an escape
/// every 32 bytes or fewer, a newline per line of text, fits; numbers are
/// counted short). An answer that outgrows it is copied once more: a streamed
/// read's text cost that whole copy when it was counted without escapes.
fn size_hint(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + s.len() / 32 + 2,
        Value::Array(items) => 2 + items.iter().map(|v| size_hint(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + size_hint(v))
                .sum::<usize>()
        }
    }
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Numbers are rare and small: serde_json's own formatting (itoa, ryu).
        Value::Number(n) => serde_json::to_writer(&mut *out, n).expect("writing to a Vec"),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_value(out, item);
            }
            out.push(b'}');
        }
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that needs escaping in a JSON string (a
/// control character, `"` or `\`). Bit tricks: the lowest set bit is always
/// exact (borrows only run upwards), higher ones may be false alarms, so
/// callers use only the lowest.
fn escape_mask(word: u64) -> u64 {
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGHS;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    below(word, 0x20) | below(quote, 1) | below(backslash, 1)
}

/// The escape of a byte that needs one (serde_json's choice: short forms where
/// JSON has them, else `\u00XX` in lower case), or none.
fn escape(b: u8) -> Option<&'static [u8]> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    const fn table() -> [[u8; 6]; 32] {
        let mut t = [[0u8; 6]; 32];
        let mut i = 0;
        while i < 32 {
            t[i] = [b'\\', b'u', b'0', b'0', HEX[i >> 4], HEX[i & 0xf]];
            i += 1;
        }
        t
    }
    static CONTROL: [[u8; 6]; 32] = table();
    Some(match b {
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        b'\n' => b"\\n",
        b'\r' => b"\\r",
        b'\t' => b"\\t",
        0x08 => b"\\b",
        0x0c => b"\\f",
        0x00..=0x1f => &CONTROL[usize::from(b)],
        _ => return None,
    })
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut plain = 0; // start of the run of bytes not yet copied
    loop {
        let at = next_escape(bytes, plain);
        out.extend_from_slice(&bytes[plain..at]);
        let Some(&b) = bytes.get(at) else { break };
        out.extend_from_slice(escape(b).expect("next_escape finds only bytes that need one"));
        plain = at + 1;
    }
    out.push(b'"');
}

/// The index of the first byte at or after `from` that needs escaping, or
/// `bytes.len()`. Sixteen bytes at a time with SSE2 (part of every x86-64),
/// else eight with word tricks; the rest one by one.
fn next_escape(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(at) = sse2::next_escape(bytes, &mut i) {
            return at;
        }
    }
    while i + 8 <= bytes.len() {
        let word = u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let mask = escape_mask(word);
        if mask != 0 {
            return i + (mask.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    bytes[i..]
        .iter()
        .position(|&b| escape(b).is_some())
        .map_or(bytes.len(), |p| i + p)
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use core::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };

    /// Scans whole 16-byte blocks from `*i`: the first byte that needs
    /// escaping, or none with `*i` left at the first byte not yet scanned.
    pub fn next_escape(bytes: &[u8], i: &mut usize) -> Option<usize> {
        // SAFETY: SSE2 is in the x86-64 baseline, and every load reads 16
        // bytes inside `bytes` (`*i + 16 <= len`), unaligned loads allowed.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let control = _mm_set1_epi8(0x1f);
            while *i + 16 <= bytes.len() {
                let x = _mm_loadu_si128(bytes.as_ptr().add(*i).cast::<__m128i>());
                // x <= 0x1f (unsigned) exactly when max(x, 0x1f) == 0x1f.
                let low = _mm_cmpeq_epi8(_mm_max_epu8(x, control), control);
                let hit = _mm_or_si128(
                    low,
                    _mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                );
                let mask = _mm_movemask_epi8(hit) as u32;
                if mask != 0 {
                    return Some(*i + mask.trailing_zeros() as usize);
                }
                *i += 16;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn same(value: &Value) {
        assert_eq!(
            String::from_utf8(to_vec(value)).unwrap(),
            String::from_utf8(serde_json::to_vec(value).unwrap()).unwrap()
        );
    }

    #[test]
    fn every_character_class_at_every_offset() {
        let specials: Vec<char> = (0u8..0x80)
            .map(char::from)
            .chain(['é', '€', '𝄞', '\u{2028}', '\u{7f}', '\u{80}', '\u{ff}'])
            .collect();
        for c in specials {
            for at in 0..20 {
                let mut s: String = "abcdefghijklmnopqrst".chars().take(at).collect();
                s.push(c);
                s.push_str("xyz0123456789");
                same(&Value::String(s));
            }
        }
        let all: String = (0u8..0x80).map(char::from).collect();
        same(&Value::String(all.repeat(9)));
        same(&Value::String(String::new()));
    }

    #[test]
    fn the_lowest_flag_is_exact() {
        // Every byte value at every position of a word, among plain and
        // high bytes that could confuse the bit tricks.
        for b in 0u8..=255 {
            for at in 0..8 {
                for fill in [b'a', 0x7f, 0x80, 0xff, 0x21, 0x5d, 0x23] {
                    let mut word = [fill; 8];
                    word[at] = b;
                    let mask = escape_mask(u64::from_le_bytes(word));
                    let first = word.iter().position(|&x| escape(x).is_some());
                    let got = (mask != 0).then(|| (mask.trailing_zeros() / 8) as usize);
                    assert_eq!(got, first, "byte {b:#x} at {at} among {fill:#x}");
                }
            }
        }
    }

    #[test]
    fn next_escape_finds_the_first_at_every_offset() {
        // Blocks of 16, words of 8 and the byte-wise tail all agree with a
        // plain search, whatever the start and the length.
        for len in 0..40 {
            for b in [b'"', b'\\', 0, b'\n', 0x1f, 0x20, 0x7f, 0x80, 0xff, b'a'] {
                for at in 0..len {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = b;
                    for from in 0..=len {
                        let want = (from..len)
                            .find(|&k| escape(bytes[k]).is_some())
                            .unwrap_or(len);
                        assert_eq!(
                            next_escape(&bytes, from),
                            want,
                            "{b:#x} at {at} of {len} from {from}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn long_text_with_line_breaks() {
        let line = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n";
        same(&Value::String(line.repeat(1000)));
        same(&Value::String("x".repeat(100_003)));
    }

    #[test]
    fn whole_messages() {
        same(&json!({
            "jsonrpc": "2.0", "id": 7, "result": {
                "content": "a\"b\\c\u{1}\u{1f}", "size": 18446744073709551615u64, "neg": -3,
                "f": 1.5, "big": 1e300, "tiny": -0.0, "none": null, "yes": true, "no": false,
                "list": [[], {}, [1, "two", {"three": [null]}]], "ключ\n": "значение",
            }
        }));
        same(&json!({"jsonrpc": "2.0", "method": "commands.output",
                     "params": {"stream": "stdout", "data": "x\n".repeat(50), "request_id": "r-1"}}));
        same(&json!([]));
        same(&json!("top"));
    }
}
