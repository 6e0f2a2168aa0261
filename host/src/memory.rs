//! Giving back the memory only start-up needed.
//!
//! Start-up (argument parsing, signature checks, loading the compiled
//! component, the compile cache) runs code a request never runs again, and the
//! kernel maps each page of a program's code with up to 15 neighbours
//! (fault-around): after start-up about 10 MiB of epp-host's own code and
//! read-only data are resident, about a fifth of them never needed again
//! (bench/profiling.md, issue 24). Unmapping them once, before serving, lets a
//! request map back only what it runs.

/// Unmaps the pages of epp-host's own executable that nothing of this process
/// wrote (its code and read-only data), so that serving faults back only the
/// pages it uses. Safe for exactly those pages: they are private, read-only
/// mappings of the executable, so the kernel maps the same file contents again
/// on the next access; a mapping with any page of its own (relocated data,
/// a debugger's breakpoint) is left alone. Returns the bytes that were
/// resident in the mappings given back; 0 where there is no `/proc`.
pub fn drop_startup_pages() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
            return 0;
        };
        let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
            return 0;
        };
        let mut dropped = 0;
        for mapping in own_clean_mappings(&smaps, &exe.to_string_lossy()) {
            // SAFETY: the range is a whole mapping of this process's own
            // executable that is read-only and has no private page (checked
            // from smaps just now; nothing writes to a read-only mapping), so
            // MADV_DONTNEED only unmaps pages the kernel maps again from the
            // file, unchanged, on the next access.
            let done = unsafe {
                libc::madvise(
                    mapping.start as *mut libc::c_void,
                    mapping.len,
                    libc::MADV_DONTNEED,
                )
            };
            if done == 0 {
                dropped += mapping.resident;
            }
        }
        dropped
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// A mapping of the executable that may be given back.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    len: usize,
    /// Bytes resident in it.
    resident: u64,
}

/// The read-only mappings of `exe` in `smaps` (the text of
/// `/proc/self/smaps`) that hold no anonymous page.
fn own_clean_mappings(smaps: &str, exe: &str) -> Vec<Mapping> {
    let mut found = Vec::new();
    // The mapping being read while it qualifies so far, with its anonymous
    // kilobytes once read: it is kept only if that is 0.
    let mut current: Option<(Mapping, Option<u64>)> = None;
    for line in smaps.lines() {
        if let Some((range, rest)) = header(line) {
            found.extend(unwritten(current.take()));
            // perms offset dev inode, one space apart, then the path after padding.
            let mut fields = rest.splitn(5, ' ');
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).unwrap_or("").trim();
            if path == exe && (perms == "r-xp" || perms == "r--p") {
                current = Some((
                    Mapping {
                        start: range.0,
                        len: range.1 - range.0,
                        resident: 0,
                    },
                    None,
                ));
            }
            continue;
        }
        let Some((mapping, anonymous)) = current.as_mut() else {
            continue;
        };
        let mut fields = line.split_whitespace();
        match (
            fields.next(),
            fields.next().and_then(|v| v.parse::<u64>().ok()),
        ) {
            (Some("Rss:"), Some(kib)) => mapping.resident = kib * 1024,
            (Some("Anonymous:"), Some(kib)) => *anonymous = Some(kib),
            _ => {}
        }
    }
    found.extend(unwritten(current.take()));
    found
}

fn unwritten(entry: Option<(Mapping, Option<u64>)>) -> Option<Mapping> {
    match entry {
        Some((mapping, Some(0))) => Some(mapping),
        _ => None,
    }
}

/// The address range of a mapping's first line in smaps, and the rest of it.
fn header(line: &str) -> Option<((usize, usize), &str)> {
    let (range, rest) = line.split_once(' ')?;
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    (end > start).then_some(((start, end), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d000000000-55d000100000 r--p 00000000 fe:00 42 /opt/epp-host
Size:               1024 kB
Rss:                 600 kB
Anonymous:             0 kB
55d000100000-55d000300000 r-xp 00100000 fe:00 42 /opt/epp-host
Size:               2048 kB
Rss:                1500 kB
Anonymous:             0 kB
55d000300000-55d000310000 r--p 00300000 fe:00 42 /opt/epp-host
Size:                 64 kB
Rss:                  64 kB
Anonymous:            64 kB
55d000310000-55d000320000 rw-p 00310000 fe:00 42 /opt/epp-host
Size:                 64 kB
Rss:                  64 kB
Anonymous:             8 kB
55d000320000-55d000330000 r-xp 00000000 fe:00 43 /opt/epp-host-old (deleted)
Size:                 64 kB
Rss:                  64 kB
Anonymous:             0 kB
7f0000000000-7f0000100000 r-xp 00000000 fe:00 44 /usr/lib/libc.so.6
Size:               1024 kB
Rss:                 900 kB
Anonymous:             0 kB
7f0000100000-7f0000101000 r-xp 00000000 00:00 0
Size:                  4 kB
Rss:                   4 kB
Anonymous:             4 kB
";

    #[test]
    fn only_read_only_unwritten_mappings_of_the_executable_qualify() {
        let found = own_clean_mappings(SMAPS, "/opt/epp-host");
        assert_eq!(
            found,
            vec![
                Mapping {
                    start: 0x55d000000000,
                    len: 0x100000,
                    resident: 600 << 10
                },
                Mapping {
                    start: 0x55d000100000,
                    len: 0x200000,
                    resident: 1500 << 10
                },
            ]
        );
    }

    #[test]
    fn a_mapping_whose_anonymous_count_is_missing_is_left_alone() {
        let smaps = "55d000100000-55d000300000 r-xp 00100000 fe:00 42 /opt/epp-host\nRss: 8 kB\n";
        assert!(own_clean_mappings(smaps, "/opt/epp-host").is_empty());
    }

    #[test]
    fn a_path_with_a_suffix_is_not_the_executable() {
        assert!(own_clean_mappings(SMAPS, "/opt/epp-host-old").is_empty());
    }

    #[test]
    fn the_running_test_gives_back_its_code_and_keeps_running() {
        // This process's own text: dropped, then faulted back as it runs on.
        let first = drop_startup_pages();
        assert!(first > 0, "nothing of the test binary was resident");
        let sum: u64 = (1..=1000u64).sum();
        assert_eq!(sum, 500_500);
    }
}
