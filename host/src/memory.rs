//! Giving back the memory only start-up needed.
//!
//! Start-up (argument parsing, signature checks, loading the compiled
//! component, the compile cache) runs code a request never runs again, and the
//! kernel maps each page of a program's code with up to 15 neighbours
//! (fault-around): after start-up about 10 MiB of epp-host's own code and
//! read-only data are resident, a fifth to a half of them never needed again
//! (bench/profiling.md, issue 24). Unmapping them once, before serving, lets
//! requests map back only what they run.

/// Unmaps the pages of epp-host's own executable that nothing of this process
/// wrote (its code and read-only data), so that serving faults back only the
/// pages it uses. Safe for exactly those pages: they are private, read-only
/// mappings of the executable, so the kernel maps the same file contents again
/// on the next access; a mapping with any page of its own (relocated data, a
/// debugger's breakpoint) is left alone. Returns the bytes that were resident
/// in the mappings given back; 0 where there is no `/proc`.
pub fn drop_startup_pages() -> u64 {
    #[cfg(target_os = "linux")]
    {
        linux::drop_startup_pages().unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    0
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{Range, exe_mappings, unwritten_resident};
    use std::os::unix::fs::FileExt;

    pub(super) fn drop_startup_pages() -> Option<u64> {
        let exe = std::fs::read_link("/proc/self/exe").ok()?;
        // /proc/self/maps, not smaps: smaps walks the page tables of every
        // mapping, the pool's hundreds included (~5 ms here); the pagemap of
        // the few mappings wanted says what is needed.
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let pagemap = std::fs::File::open("/proc/self/pagemap").ok()?;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
        let mut dropped = 0;
        for range in exe_mappings(&maps, &exe.to_string_lossy()) {
            let Some(resident) = resident_if_unwritten(&pagemap, range, page) else {
                continue;
            };
            // SAFETY: the range is a whole read-only mapping of this process's
            // own executable with no page of its own (its pagemap, read just
            // now; nothing can write to a read-only mapping since), so
            // MADV_DONTNEED only unmaps pages the kernel maps again, unchanged,
            // from the file on the next access.
            let done = unsafe {
                libc::madvise(
                    range.start as *mut libc::c_void,
                    range.end - range.start,
                    libc::MADV_DONTNEED,
                )
            };
            if done == 0 {
                dropped += resident;
            }
        }
        Some(dropped)
    }

    /// The bytes resident in `range`, or `None` if a page of it is this
    /// process's own or its pagemap cannot be read.
    fn resident_if_unwritten(pagemap: &std::fs::File, range: Range, page: usize) -> Option<u64> {
        let pages = (range.end - range.start) / page;
        let mut entries = vec![0u8; pages * 8];
        pagemap
            .read_exact_at(&mut entries, (range.start / page * 8) as u64)
            .ok()?;
        let entries = entries
            .chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().expect("8 bytes")));
        unwritten_resident(entries).map(|n| n * page as u64)
    }
}

/// A mapping's address range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    start: usize,
    end: usize,
}

/// The read-only mappings of `exe` in `maps` (the text of `/proc/self/maps`).
fn exe_mappings(maps: &str, exe: &str) -> Vec<Range> {
    maps.lines()
        .filter_map(|line| {
            let (range, rest) = line.split_once(' ')?;
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            // perms offset dev inode, one space apart, then the path after padding.
            let mut fields = rest.splitn(5, ' ');
            let perms = fields.next()?;
            let path = fields.nth(3)?.trim();
            (end > start && path == exe && (perms == "r-xp" || perms == "r--p"))
                .then_some(Range { start, end })
        })
        .collect()
}

/// Given a mapping's pagemap entries (Documentation/admin-guide/mm/pagemap):
/// how many of its pages are resident, or `None` if one is the process's own
/// (present but not a file page, or swapped: only anonymous pages swap).
fn unwritten_resident(entries: impl Iterator<Item = u64>) -> Option<u64> {
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE: u64 = 1 << 61;
    let mut resident = 0;
    for entry in entries {
        if entry & SWAPPED != 0 || (entry & PRESENT != 0 && entry & FILE == 0) {
            return None;
        }
        resident += u64::from(entry & PRESENT != 0);
    }
    Some(resident)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d000000000-55d000100000 r--p 00000000 fe:00 42                         /opt/epp host
55d000100000-55d000300000 r-xp 00100000 fe:00 42                         /opt/epp host
55d000300000-55d000310000 rw-p 00300000 fe:00 42                         /opt/epp host
55d000320000-55d000330000 r-xp 00000000 fe:00 43                         /opt/epp host (deleted)
7f0000000000-7f0000100000 r-xp 00000000 fe:00 44                         /usr/lib/libc.so.6
7f0000100000-7f0000101000 r-xp 00000000 00:00 0 
";

    #[test]
    fn the_read_only_mappings_of_the_executable_are_found() {
        assert_eq!(
            exe_mappings(MAPS, "/opt/epp host"),
            vec![
                Range {
                    start: 0x55d000000000,
                    end: 0x55d000100000
                },
                Range {
                    start: 0x55d000100000,
                    end: 0x55d000300000
                },
            ]
        );
        assert!(exe_mappings(MAPS, "/opt/epp").is_empty());
    }

    #[test]
    fn a_mapping_with_a_page_of_its_own_is_left_alone() {
        const FILE_PAGE: u64 = (1 << 63) | (1 << 61);
        const NOT_RESIDENT: u64 = 0;
        const OWN_PAGE: u64 = 1 << 63;
        const SWAPPED: u64 = 1 << 62;
        let resident = |entries: &[u64]| unwritten_resident(entries.iter().copied());
        assert_eq!(resident(&[FILE_PAGE, NOT_RESIDENT, FILE_PAGE]), Some(2));
        assert_eq!(resident(&[NOT_RESIDENT]), Some(0));
        assert_eq!(resident(&[FILE_PAGE, OWN_PAGE]), None);
        assert_eq!(resident(&[SWAPPED, FILE_PAGE]), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_running_test_gives_back_its_code_and_keeps_running() {
        // This process's own code: unmapped, then faulted back as it runs on.
        assert!(
            drop_startup_pages() > 0,
            "nothing of the test binary was given back"
        );
        let sum: u64 = (1..=1000u64).sum();
        assert_eq!(sum, 500_500);
    }
}
