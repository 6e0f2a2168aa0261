//! The secrets sweep: every `epp-host` the harness starts gets the testbed's API
//! key and a registry password, both recognisable (`KEY-<hex>-SECRET`,
//! `PW-<hex>-SECRET`), and every line it writes to stdout and stderr is searched
//! for them (whole, and their random middle alone, in case a secret is cut).
//! A hit fails the test that started the host. And a scanner of a running
//! host's guest memory (the linear-memory pool of its wasmtime engine), read
//! from `/proc/<pid>/mem`.

use std::io::{Read, Seek, SeekFrom};
use std::sync::OnceLock;

/// A random 16-hex-digit token.
pub fn token() -> String {
    let mut bytes = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The registry password every host gets: `$EPP_E2E_REGISTRY_PASSWORD`, else
/// one made up for this test binary.
pub fn registry_password() -> &'static str {
    static PW: OnceLock<String> = OnceLock::new();
    PW.get_or_init(|| {
        std::env::var("EPP_E2E_REGISTRY_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| format!("PW-{}-SECRET", token()))
    })
}

/// The strings that must never show: each secret, and the random middle of each
/// (`KEY-<middle>-SECRET`) when it has one of at least 8 characters.
pub fn needles() -> &'static [String] {
    static NEEDLES: OnceLock<Vec<String>> = OnceLock::new();
    NEEDLES.get_or_init(|| {
        let mut out = Vec::new();
        for secret in [crate::testbed().api_key.as_str(), registry_password()] {
            if secret.len() < 8 {
                continue;
            }
            out.push(secret.to_string());
            let middle = secret
                .split_once('-')
                .and_then(|(_, rest)| rest.rsplit_once('-'))
                .map(|(m, _)| m);
            if let Some(m) = middle.filter(|m| m.len() >= 8) {
                out.push(m.to_string());
            }
        }
        out
    })
}

/// The first needle found in `text`.
pub fn leak(text: &str) -> Option<&'static str> {
    needles()
        .iter()
        .find(|n| text.contains(n.as_str()))
        .map(String::as_str)
}

/// `text` with every needle replaced, so a failure message does not spread it.
pub fn redacted(text: &str) -> String {
    needles()
        .iter()
        .fold(text.to_string(), |t, n| t.replace(n.as_str(), "<SECRET>"))
}

/// Adds one host's sweep to `$EPP_FIGURES_DIR/sweep.txt` (default
/// `target/reliability/`): `lines=N bytes=B stderr_bytes=E leaks=L`.
pub fn tally(lines: u64, bytes: u64, stderr_bytes: u64, leaks: usize) {
    use std::io::Write as _;
    let dir = std::env::var_os("EPP_FIGURES_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::target_dir().join("reliability"));
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("sweep.txt"))
    {
        let _ = writeln!(
            f,
            "lines={lines} bytes={bytes} stderr_bytes={stderr_bytes} leaks={leaks}"
        );
    }
}

/// What a scan of a host's guest memory found.
#[derive(Debug, Clone)]
pub struct MemoryScan {
    /// Linear memories found (live instances and warm pool slots).
    pub memories: usize,
    /// Bytes of them read.
    pub read_bytes: u64,
    /// Occurrences of each needle, in the order given.
    pub hits: Vec<usize>,
}

struct Mapping {
    start: u64,
    end: u64,
    rw: bool,
    image: bool,
}

fn mappings(pid: u32) -> std::io::Result<Vec<Mapping>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(maps
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (start, end) = parts.next()?.split_once('-')?;
            let perms = parts.next()?;
            let path = parts.nth(3).unwrap_or("");
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                rw: perms.starts_with("rw"),
                image: perms.starts_with("rw")
                    && (path.ends_with(".cwasm") || path.contains("wasm-memory-image")),
            })
        })
        .collect())
}

/// Reads the guest memory of the wasmtime host `pid` and counts each needle.
///
/// wasmtime maps a provider's linear memory as its initial image (a private,
/// copy-on-write mapping of the compiled `.cwasm` file, or of a memfd without
/// the cache) plus anonymous read-write pages around it for the stack and the
/// heap, inside a slot of its pooling allocator that is otherwise inaccessible.
/// So a linear memory is exactly a maximal run of address-contiguous
/// read-write mappings that contains such an image mapping; host memory (heap,
/// thread arenas, stacks) never does.
pub fn scan_guest_memory(pid: u32, needles: &[&str]) -> std::io::Result<MemoryScan> {
    let maps = mappings(pid)?;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < maps.len() {
        if !maps[i].rw {
            i += 1;
            continue;
        }
        let first = i;
        while i + 1 < maps.len() && maps[i + 1].rw && maps[i + 1].start == maps[i].end {
            i += 1;
        }
        if maps[first..=i].iter().any(|m| m.image) {
            runs.push((first, i));
        }
        i += 1;
    }
    if runs.is_empty() {
        return Err(std::io::Error::other(format!(
            "no wasm memory image mapped in /proc/{pid}/maps: no linear memory found"
        )));
    }
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem"))?;
    let mut hits = vec![0usize; needles.len()];
    let mut read_bytes = 0u64;
    for &(first, last) in &runs {
        let (start, end) = (maps[first].start, maps[last].end);
        let mut buf = vec![0u8; (end - start) as usize];
        mem.seek(SeekFrom::Start(start))?;
        mem.read_exact(&mut buf)?;
        read_bytes += buf.len() as u64;
        for (n, needle) in needles.iter().enumerate() {
            hits[n] += buf
                .windows(needle.len())
                .filter(|w| *w == needle.as_bytes())
                .count();
        }
    }
    Ok(MemoryScan {
        memories: runs.len(),
        read_bytes,
        hits,
    })
}
