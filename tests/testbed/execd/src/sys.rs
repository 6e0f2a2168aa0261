//! The few raw libc calls the stand-in needs: user/group lookups (FileInfo owner names,
//! `owner`/`group` in permission requests, `uid` on `/command`), process-group signals and
//! pseudo-terminals. Everything unsafe lives here.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Go's error text for an errno, e.g. "no such file or directory" (glibc's wording with a
/// lower-case first letter, which is what Go's syscall table says for the common errnos).
pub fn errno_text(e: &io::Error) -> String {
    let s = e.to_string();
    let s = match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    };
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
        None => s,
    }
}

/// Go's `*PathError` text: "<op> <path>: <errno text>".
pub fn path_err(op: &str, path: &str, e: &io::Error) -> String {
    format!("{op} {path}: {}", errno_text(e))
}

/// Calls a `get*_r` style function, growing the scratch buffer on ERANGE.
fn with_buf<T>(mut f: impl FnMut(&mut Vec<libc::c_char>) -> Result<Option<T>, i32>) -> Option<T> {
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        match f(&mut buf) {
            Ok(v) => return v,
            Err(libc::ERANGE) if buf.len() < (1 << 20) => buf.resize(buf.len() * 4, 0),
            Err(_) => return None,
        }
    }
}

struct User {
    name: String,
    uid: u32,
    gid: u32,
}

fn passwd(by: Result<u32, &CStr>) -> Option<User> {
    with_buf(|buf| {
        // SAFETY: pw/result point to live stack values, buf is a valid scratch buffer.
        unsafe {
            let mut pw: libc::passwd = std::mem::zeroed();
            let mut result: *mut libc::passwd = std::ptr::null_mut();
            let rc = match by {
                Ok(uid) => libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result),
                Err(name) => libc::getpwnam_r(
                    name.as_ptr(),
                    &mut pw,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut result,
                ),
            };
            if rc != 0 {
                return Err(rc);
            }
            if result.is_null() {
                return Ok(None);
            }
            Ok(Some(User {
                name: CStr::from_ptr(pw.pw_name).to_string_lossy().into_owned(),
                uid: pw.pw_uid,
                gid: pw.pw_gid,
            }))
        }
    })
}

fn group(by: Result<u32, &CStr>) -> Option<(String, u32)> {
    with_buf(|buf| {
        // SAFETY: as in `passwd`.
        unsafe {
            let mut gr: libc::group = std::mem::zeroed();
            let mut result: *mut libc::group = std::ptr::null_mut();
            let rc = match by {
                Ok(gid) => libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut result),
                Err(name) => libc::getgrnam_r(
                    name.as_ptr(),
                    &mut gr,
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut result,
                ),
            };
            if rc != 0 {
                return Err(rc);
            }
            if result.is_null() {
                return Ok(None);
            }
            Ok(Some((
                CStr::from_ptr(gr.gr_name).to_string_lossy().into_owned(),
                gr.gr_gid,
            )))
        }
    })
}

/// Owner name for FileInfo; the numeric id when the user is unknown (as execd does).
pub fn user_name(uid: u32) -> String {
    passwd(Ok(uid)).map_or_else(|| uid.to_string(), |u| u.name)
}

pub fn group_name(gid: u32) -> String {
    group(Ok(gid)).map_or_else(|| gid.to_string(), |g| g.0)
}

pub fn uid_by_name(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    passwd(Err(&c)).map(|u| u.uid)
}

pub fn gid_by_name(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    group(Err(&c)).map(|g| g.1)
}

/// Primary gid and all group ids of a user, like Go's `user.LookupId` + `GroupIds`.
pub fn user_groups(uid: u32) -> Option<(u32, Vec<u32>)> {
    let user = passwd(Ok(uid))?;
    let name = CString::new(user.name).ok()?;
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        // SAFETY: groups has room for n entries; getgrouplist updates n.
        let rc =
            unsafe { libc::getgrouplist(name.as_ptr(), user.gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            return Some((user.gid, groups));
        }
        if n <= groups.len() as libc::c_int {
            n = groups.len() as libc::c_int * 2;
        }
    }
}

/// Drops privileges in a forked child (called from `pre_exec`, so only async-signal-safe
/// syscalls and no allocation).
pub fn switch_credentials(uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    // SAFETY: plain syscalls on valid pointers.
    unsafe {
        if libc::setgroups(groups.len() as _, groups.as_ptr()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `kill(-pgid, sig)`.
pub fn kill_group(pgid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(-pgid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether any process of the group still exists (signal 0 probe).
pub fn group_alive(pgid: i32) -> bool {
    !matches!(kill_group(pgid, 0), Err(e) if e.raw_os_error() == Some(libc::ESRCH))
}

/// Opens a pseudo-terminal pair with close-on-exec set atomically, so a command spawned
/// concurrently never inherits the master (which would keep the terminal alive forever).
pub fn open_pty(cols: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: the fds returned by the libc calls are checked and owned immediately.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if m < 0 {
            return Err(io::Error::last_os_error());
        }
        let master = OwnedFd::from_raw_fd(m);
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut name = [0 as libc::c_char; 128];
        let rc = libc::ptsname_r(m, name.as_mut_ptr(), name.len());
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if s < 0 {
            return Err(io::Error::last_os_error());
        }
        let slave = OwnedFd::from_raw_fd(s);
        set_winsize(master.as_raw_fd(), cols, rows)?;
        Ok((master, slave))
    }
}

pub fn set_winsize(fd: RawFd, cols: u16, rows: u16) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer.
    if unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a valid fd.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In the forked child of a PTY shell: new session with the terminal on fd 0 as its
/// controlling tty (what creack/pty's Setsid+Setctty do for execd).
pub fn become_tty_session_leader() -> io::Result<()> {
    // SAFETY: async-signal-safe syscalls only.
    unsafe {
        if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Raw read/write used on the (non-blocking) PTY master.
pub fn read_fd(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

pub fn write_fd(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `chown` following symlinks, -1 meaning "leave unchanged" (Go's `os.Chown`).
pub fn chown(path: &str, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c is a valid C string.
    let rc = unsafe {
        libc::chown(
            c.as_ptr(),
            uid.unwrap_or(u32::MAX) as libc::uid_t,
            gid.unwrap_or(u32::MAX) as libc::gid_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
