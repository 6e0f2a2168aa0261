//! Output collected for a request that is answered once its stream ends
//! (without `stream: true`), bounded by `--max-output-bytes`: text of each
//! output stream cut at a character boundary, items kept whole or not at all.

use serde_json::Value;

/// What a stream left for its answer, within one budget of bytes.
pub struct Collected {
    /// Text per output stream (case wire name), in the order first seen.
    texts: Vec<(&'static str, String)>,
    /// Items per list key.
    items: Vec<(&'static str, Vec<Value>)>,
    room: usize,
    pub truncated: bool,
}

impl Collected {
    /// Room for `room` bytes; `texts` and `lists` name what the answer always
    /// carries (empty when nothing came).
    pub fn new(room: usize, texts: &[&'static str], lists: &[&'static str]) -> Collected {
        Collected {
            texts: texts.iter().map(|t| (*t, String::new())).collect(),
            items: lists.iter().map(|l| (*l, Vec::new())).collect(),
            room,
            truncated: false,
        }
    }

    /// Takes `n` bytes of room, or says there is not enough (and marks the cut).
    fn take(&mut self, n: usize) -> bool {
        if n <= self.room {
            self.room -= n;
            return true;
        }
        self.truncated = true;
        false
    }

    /// Keeps `text` of output stream `stream`, cut at a character boundary
    /// when the room runs out.
    pub fn push_text(&mut self, stream: &'static str, text: &str) {
        let cut = if self.take(text.len()) {
            text.len()
        } else {
            let mut cut = std::mem::take(&mut self.room);
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            cut
        };
        let target = match self.texts.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, t)) => t,
            None => {
                self.texts.push((stream, String::new()));
                &mut self.texts.last_mut().expect("just pushed").1
            }
        };
        target.push_str(&text[..cut]);
    }

    /// Keeps `item` (about `size` bytes) in list `key`, whole or not at all:
    /// half an image is no image.
    pub fn push_item(&mut self, key: &'static str, item: Value, size: usize) {
        if !self.take(size) {
            return;
        }
        match self.items.iter_mut().find(|(k, _)| *k == key) {
            Some((_, list)) => list.push(item),
            None => self.items.push((key, vec![item])),
        }
    }

    /// Everything collected, as (key, value) for the answer.
    pub fn into_fields(self) -> impl Iterator<Item = (&'static str, Value)> {
        let texts = self.texts.into_iter().map(|(k, t)| (k, Value::String(t)));
        let items = self.items.into_iter().map(|(k, l)| (k, Value::Array(l)));
        texts.chain(items)
    }
}

#[cfg(test)]
mod tests {
    use super::Collected;
    use serde_json::{Value, json};

    fn fields(c: Collected) -> Vec<(&'static str, Value)> {
        c.into_fields().collect()
    }

    #[test]
    fn collected_output_stops_at_its_room_on_a_character_boundary() {
        let mut c = Collected::new(6, &["stdout", "stderr"], &[]);
        c.push_text("stdout", "abc");
        c.push_text("stderr", "éé"); // 4 bytes, only 3 left: one é fits
        assert!(c.truncated);
        c.push_text("stdout", "x");
        assert_eq!(
            fields(c),
            [("stdout", json!("abc")), ("stderr", json!("é"))]
        );
    }

    #[test]
    fn items_are_kept_whole_or_not_at_all() {
        let mut c = Collected::new(10, &["stdout"], &["results"]);
        c.push_item("results", json!(1), 10);
        assert!(!c.truncated);
        c.push_item("results", json!(2), 1);
        assert!(c.truncated);
        assert_eq!(fields(c), [("stdout", json!("")), ("results", json!([1]))]);
    }
}
