//! The `abx:epp/memo` import: a small host-wide cache of values that are
//! expensive to fetch and safe to lose (a sandbox's resolved endpoint). Each
//! request runs in a fresh instance, so without it every sandbox operation
//! would ask the lifecycle server for the endpoint again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept at most; the oldest-expiring half is dropped when full.
pub const MAX_ENTRIES: usize = 4096;
/// Longest key and value accepted (bytes); larger ones are ignored.
pub const MAX_KEY: usize = 1024;
pub const MAX_VALUE: usize = 64 * 1024;
/// Longest time an entry may live.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// Bytes of keys and values kept at most (a resolved endpoint is ~200 bytes):
/// a provider that floods the memo cannot make the host hold more.
pub const MAX_BYTES: usize = 4 << 20;

#[derive(Default)]
pub struct Memo {
    entries: Mutex<HashMap<String, (String, Instant)>>,
}

fn weight(entries: &HashMap<String, (String, Instant)>) -> usize {
    entries.iter().map(|(k, (v, _))| k.len() + v.len()).sum()
}

impl Memo {
    pub fn get(&self, key: &str) -> Option<String> {
        let mut entries = self.entries.lock().expect("lock");
        match entries.get(key) {
            Some((value, expires)) if *expires > Instant::now() => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn put(&self, key: String, value: String, ttl: Duration) {
        if key.len() > MAX_KEY || value.len() > MAX_VALUE || ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().expect("lock");
        let full = |entries: &HashMap<String, (String, Instant)>| {
            entries.len() >= MAX_ENTRIES || weight(entries) + key.len() + value.len() > MAX_BYTES
        };
        if !entries.contains_key(&key) && full(&entries) {
            entries.retain(|_, (_, expires)| *expires > now);
            while !entries.is_empty() && full(&entries) {
                let mut by_expiry: Vec<Instant> = entries.values().map(|(_, e)| *e).collect();
                by_expiry.sort();
                let cutoff = by_expiry[by_expiry.len() / 2];
                entries.retain(|_, (_, expires)| *expires > cutoff);
            }
        }
        entries.insert(key, (value, now + ttl.min(MAX_TTL)));
    }

    pub fn forget(&self, key: &str) {
        self.entries.lock().expect("lock").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_expire_forget() {
        let memo = Memo::default();
        memo.put("a".into(), "1".into(), Duration::from_secs(60));
        assert_eq!(memo.get("a").as_deref(), Some("1"));
        memo.forget("a");
        assert_eq!(memo.get("a"), None);
        memo.put("b".into(), "2".into(), Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(memo.get("b"), None);
    }

    #[test]
    fn bounded() {
        let memo = Memo::default();
        memo.put(
            "big".into(),
            "x".repeat(MAX_VALUE + 1),
            Duration::from_secs(60),
        );
        assert_eq!(memo.get("big"), None);
        for i in 0..MAX_ENTRIES + 10 {
            memo.put(
                format!("k{i}"),
                "v".into(),
                Duration::from_secs(60 + i as u64),
            );
        }
        assert!(memo.entries.lock().unwrap().len() <= MAX_ENTRIES);
        assert!(memo.get(&format!("k{}", MAX_ENTRIES + 9)).is_some());
    }

    #[test]
    fn bounded_in_bytes() {
        let memo = Memo::default();
        for i in 0..1000 {
            memo.put(
                format!("flood-{i}"),
                "v".repeat(MAX_VALUE),
                Duration::from_secs(600),
            );
        }
        assert!(weight(&memo.entries.lock().unwrap()) <= MAX_BYTES);
        memo.put("endpoint".into(), "e".into(), Duration::from_secs(60));
        assert_eq!(memo.get("endpoint").as_deref(), Some("e"));
    }
}
