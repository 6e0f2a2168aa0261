//! The users and groups of a sandbox, for `user` (commands, sessions,
//! terminals) and `owner`/`group` (files): each a name or a number, looked up
//! in the sandbox's own `/etc/passwd` and `/etc/group`, read through execd's
//! file API line by line (a database of any size is read only up to the entry
//! sought, a line at a time). So an unknown one is refused (E1001, naming it)
//! before anything runs or is written: execd itself would run a command as an
//! unknown uid with group 0 (root's), and write a file before failing to give
//! it an unknown owner.
//!
//! A found entry is memoised host-wide per sandbox and name for a while; a name
//! not found is looked up again each time (a user added with `useradd` a moment
//! ago is found at once). Users that only a name service other than the files
//! knows (LDAP) are not seen.
//!
//! execd runs `/command` as a uid itself; its terminals and bash sessions take
//! none, so those run their shell through `setpriv` (util-linux) as the user
//! ([`shell_as`]). Either way the process gets the user's uid, primary group
//! and supplementary groups, and `HOME`, `USER` and `LOGNAME` from the user's
//! entry unless the request sets them ([`User::identity_env`]). Both look the
//! groups up by uid, so they are those of the uid's first entry: a name that
//! shares its uid with an earlier entry (an alias such as `toor`) is refused as
//! `user` rather than run with another name's groups ([`of_request`]).

use crate::bindings::abx::epp::memo;
use crate::config;
use crate::error::{self, Result, invalid};
use crate::execd::Execd;
use crate::http::encode;
use crate::shell;
use std::collections::HashSet;

/// How long a found entry is reused (a user's uid or home rarely changes).
const TTL_MS: u32 = 600_000;
/// Bytes asked of a database's body at a time.
const CHUNK: usize = 64 * 1024;
/// The longest line kept whole; a longer one is skipped (no passwd or group
/// entry is anywhere near it), so a scan holds at most this much of a file.
const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub gid: u32,
}

/// A name or a number, as the caller gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec<'a> {
    Name(&'a str),
    Id(u32),
}

/// Checks `value` of the parameter `field` (`user`, `owner`, `group`).
fn spec<'a>(value: &'a str, field: &str) -> Result<Spec<'a>> {
    if value.is_empty() {
        return Err(invalid(format!(
            "`{field}` is empty; give a name or a number, or leave it out"
        )));
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().map(Spec::Id).map_err(|_| {
            invalid(format!(
                "`{field}` {value} is not a valid id (at most {})",
                u32::MAX
            ))
        });
    }
    if value
        .chars()
        .any(|c| c == ':' || c == '/' || c.is_whitespace() || c.is_control())
    {
        return Err(invalid(format!(
            "`{field}` `{value}` is not a {} name (no `:`, `/`, spaces or control characters)",
            if field == "group" { "group" } else { "user" }
        )));
    }
    Ok(Spec::Name(value))
}

/// A passwd line (`name:pw:uid:gid:gecos:home:shell`), if it is an entry.
fn parse_user(line: &str) -> Option<User> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 7 || line.starts_with('#') {
        return None;
    }
    Some(User {
        name: f[0].to_string(),
        uid: f[2].parse().ok()?,
        gid: f[3].parse().ok()?,
        home: f[5].to_string(),
    })
}

/// A group line (`name:pw:gid:members`), if it is an entry.
fn parse_group(line: &str) -> Option<Group> {
    let f: Vec<&str> = line.split(':').collect();
    if f.len() < 4 || line.starts_with('#') {
        return None;
    }
    Some(Group {
        name: f[0].to_string(),
        gid: f[2].parse().ok()?,
    })
}

/// The search for one user, fed a passwd file line by line; done at the first
/// entry that matches (a uid stands for its first entry, as for libc).
struct UserScan<'a> {
    spec: Spec<'a>,
    /// The uids of the entries before the match, for a name: whether an
    /// earlier entry has its uid (then that one is what the uid stands for).
    before: HashSet<u32>,
    found: Option<User>,
    shadowed: bool,
}

impl<'a> UserScan<'a> {
    fn new(spec: Spec<'a>) -> UserScan<'a> {
        UserScan {
            spec,
            before: HashSet::new(),
            found: None,
            shadowed: false,
        }
    }

    /// Takes one line; true once the entry is found.
    fn line(&mut self, line: &str) -> bool {
        let Some(user) = parse_user(line) else {
            return false;
        };
        let hit = match self.spec {
            Spec::Name(name) => user.name == name,
            Spec::Id(uid) => user.uid == uid,
        };
        if hit {
            self.shadowed = self.before.contains(&user.uid);
            self.found = Some(user);
            return true;
        }
        if matches!(self.spec, Spec::Name(_)) {
            self.before.insert(user.uid);
        }
        false
    }
}

/// The group of `spec` among group lines, as they come.
fn group_line(line: &str, spec: Spec) -> Option<Group> {
    let group = parse_group(line)?;
    let hit = match spec {
        Spec::Name(name) => group.name == name,
        Spec::Id(gid) => group.gid == gid,
    };
    hit.then_some(group)
}

/// Cuts a body into lines as it arrives, holding at most one line.
#[derive(Default)]
struct LineSplitter {
    carry: Vec<u8>,
    /// Inside a line longer than [`MAX_LINE`], dropped up to its end.
    skipping: bool,
}

impl LineSplitter {
    /// Feeds `f` each line `chunk` completes; true as soon as `f` answers true.
    fn feed(&mut self, mut chunk: &[u8], f: &mut impl FnMut(&str) -> bool) -> bool {
        while let Some(end) = chunk.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&chunk[..end], &chunk[end + 1..]);
            chunk = rest;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            self.carry.extend_from_slice(head);
            let stop = f(&String::from_utf8_lossy(&self.carry));
            self.carry.clear();
            if stop {
                return true;
            }
        }
        if !self.skipping {
            self.carry.extend_from_slice(chunk);
            if self.carry.len() > MAX_LINE {
                self.carry = Vec::new();
                self.skipping = true;
            }
        }
        false
    }

    /// The last line, when the body does not end with a newline.
    fn finish(&mut self, f: &mut impl FnMut(&str) -> bool) -> bool {
        let last = std::mem::take(&mut self.carry);
        !self.skipping && !last.is_empty() && f(&String::from_utf8_lossy(&last))
    }
}

fn memo_key(kind: &str, sandbox_id: &str, value: &str) -> Result<String> {
    let origin = &config::settings()?.origin;
    Ok(format!("{kind}:{origin}:{sandbox_id}:{value}"))
}

/// Reads the sandbox's file `path` line by line, handing each to `each` until
/// it answers true (the rest is not read); false when there is no such file.
/// Only a line at a time is held, whatever the file's size.
pub(crate) fn read_db(
    execd: &mut Execd,
    path: &str,
    mut each: impl FnMut(&str) -> bool,
) -> Result<bool> {
    let query = format!("/files/download?path={}", encode(path));
    let resp = execd.send(|e| e.request("GET", &query), &[])?;
    if resp.status == 404 {
        return Ok(false);
    }
    let mut body = execd.check(resp, path)?.into_reader();
    let mut lines = LineSplitter::default();
    while let Some(chunk) = body
        .read(CHUNK)
        .map_err(|t| error::broken_body(t, execd.target()))?
    {
        if lines.feed(&chunk, &mut each) {
            return Ok(true);
        }
    }
    lines.finish(&mut each);
    Ok(true)
}

/// Why `value` of `field` was not found in `path` of the sandbox.
fn unknown(execd: &Execd, field: &str, value: &str, path: &str, found: bool) -> error::Error {
    let (what, create) = if field == "group" {
        ("group", "groupadd")
    } else {
        ("user", "useradd -m")
    };
    let why = if found {
        format!("it is not in the sandbox's {path}")
    } else {
        format!("the sandbox has no {path}")
    };
    invalid(format!(
        "`{field}`: {what} `{value}` does not exist in sandbox {} ({why}); give an existing \
         name or id, or create it first (commands.run `{create} NAME`)",
        execd.sandbox_id
    ))
}

/// Scans /etc/passwd for `spec`: the entry, and whether an earlier entry has
/// its uid.
fn scan_users(execd: &mut Execd, spec: Spec) -> Result<(bool, Option<(User, bool)>)> {
    let mut scan = UserScan::new(spec);
    let exists = read_db(execd, "/etc/passwd", |line| scan.line(line))?;
    Ok((exists, scan.found.map(|user| (user, scan.shadowed))))
}

/// The user `value` (a name or a uid) given as `field`, and whether an
/// earlier entry of /etc/passwd has its uid. A shadowed name is not memoised
/// (so a memoised entry is the first of its uid).
fn lookup(execd: &mut Execd, value: &str, field: &str) -> Result<(User, bool)> {
    let spec = spec(value, field)?;
    let key = memo_key("user", &execd.sandbox_id, value)?;
    if let Some(user) = memo::get(&key).and_then(|v| decode_user(&v)) {
        return Ok((user, false));
    }
    let (exists, found) = scan_users(execd, spec)?;
    let (user, shadowed) =
        found.ok_or_else(|| unknown(execd, field, value, "/etc/passwd", exists))?;
    if !shadowed {
        memo::put(&key, &encode_user(&user), TTL_MS);
    }
    Ok((user, shadowed))
}

/// The user `value` (a name or a uid) given as `field` (`owner`: execd gives
/// the file the entry's uid, whichever name it is).
pub fn user(execd: &mut Execd, value: &str, field: &str) -> Result<User> {
    lookup(execd, value, field).map(|(user, _)| user)
}

/// The user of a request's `user` parameter, when it has one: one a process
/// can run as with the entry's own groups (see the module's doc).
pub fn of_request(execd: &mut Execd, value: Option<&str>) -> Result<Option<User>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let (user, shadowed) = lookup(execd, value, "user")?;
    if !shadowed {
        return Ok(Some(user));
    }
    let first = scan_users(execd, Spec::Id(user.uid))?.1.map_or_else(
        || "another entry".to_string(),
        |(u, _)| format!("`{}`", u.name),
    );
    Err(invalid(format!(
        "`user`: `{value}` shares uid {uid} with {first}, which comes first in the /etc/passwd \
         of sandbox {sandbox}; a process of uid {uid} gets the first entry's groups (execd and \
         setpriv look them up by uid), not `{value}`'s. Run as {first}, or give `{value}` a uid \
         of its own (commands.run `usermod -u NEW_UID {value}`)",
        uid = user.uid,
        sandbox = execd.sandbox_id,
    )))
}

/// The group `value` (a name or a gid).
pub fn group(execd: &mut Execd, value: &str) -> Result<Group> {
    let spec = spec(value, "group")?;
    let key = memo_key("group", &execd.sandbox_id, value)?;
    if let Some(group) = memo::get(&key).and_then(|v| decode_group(&v)) {
        return Ok(group);
    }
    let mut found = None;
    let exists = read_db(execd, "/etc/group", |line| {
        found = group_line(line, spec);
        found.is_some()
    })?;
    let group = found.ok_or_else(|| unknown(execd, "group", value, "/etc/group", exists))?;
    memo::put(&key, &format!("{}:{}", group.name, group.gid), TTL_MS);
    Ok(group)
}

/// A user as one line (`name:uid:gid:home`: no field of a passwd entry holds a
/// `:`); also the content of a session's marker (crate::sessions).
pub fn encode_user(user: &User) -> String {
    format!("{}:{}:{}:{}", user.name, user.uid, user.gid, user.home)
}

pub fn decode_user(line: &str) -> Option<User> {
    let mut f = line.trim_end_matches('\n').splitn(4, ':');
    Some(User {
        name: f.next()?.to_string(),
        uid: f.next()?.parse().ok()?,
        gid: f.next()?.parse().ok()?,
        home: f.next()?.to_string(),
    })
}

fn decode_group(line: &str) -> Option<Group> {
    let (name, gid) = line.split_once(':')?;
    Some(Group {
        name: name.to_string(),
        gid: gid.parse().ok()?,
    })
}

impl User {
    /// `HOME`, `USER` and `LOGNAME` of the user, less those `envs` sets (the
    /// request's own values win).
    pub fn identity_env<'a>(&'a self, envs: &[(String, String)]) -> Vec<(&'static str, &'a str)> {
        [
            ("HOME", self.home.as_str()),
            ("USER", self.name.as_str()),
            ("LOGNAME", self.name.as_str()),
        ]
        .into_iter()
        .filter(|(k, _)| !envs.iter().any(|(name, _)| name == k))
        .collect()
    }
}

/// `bash` as `user` running `script` (none: an interactive shell) through
/// `setpriv`, with the user's identity variables and then `envs` (checked
/// names) set by `env` as the user. The part that runs as root (execd's shell)
/// uses nothing a caller or the user set: setpriv and env are found in the
/// standard PATH (`command -p`, not `$PATH`), the shell is the one running
/// (`$BASH`), and the variables go to `env`, not into root's environment (so
/// `LD_PRELOAD` or `PATH` in `envs` reach the user's shell only). Without
/// setpriv the line prints why on stderr and exits 127.
fn bash_as(user: &User, envs: &[(String, String)], script: Option<&str>, exec: bool) -> String {
    let missing = shell::quote(&format!(
        "epp: running as user {} needs setpriv (util-linux) in /bin or /usr/bin of the \
         sandbox; install it, or leave `user` out",
        user.name
    ));
    let mut line = format!(
        "__epp_setpriv=$(command -p -v setpriv) && __epp_env=$(command -p -v env) || \
         {{ echo {missing} >&2; exit 127; }}; {}\"$__epp_setpriv\" --reuid={} --regid={} \
         --init-groups \"$__epp_env\"",
        if exec { "exec " } else { "" },
        user.uid,
        user.gid
    );
    let request = envs.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    line.push_str(&shell::assignments(
        user.identity_env(envs).into_iter().chain(request),
    ));
    line.push_str(" \"$BASH\" --norc --noprofile");
    if let Some(script) = script {
        line.push_str(" -c ");
        line.push_str(&shell::quote(script));
    }
    line
}

/// A shell command line that replaces the shell running it with `bash` as
/// `user` (a terminal's, a stdin command's), running `script` or, without
/// one, interactive, with `envs` (names checked by the caller).
pub fn shell_as(user: &User, envs: &[(String, String)], script: Option<&str>) -> String {
    bash_as(user, envs, script, true)
}

/// A shell command line that runs `script` in a `bash` as `user` and goes on
/// after it (a session run's, crate::sessions).
pub fn run_as(user: &User, script: &str) -> String {
    bash_as(user, &[], Some(script), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        # a comment\n\
        broken line\n\
        user:x:1000:1000::/home/user:/bin/sh\n\
        alias:x:1000:1001::/home/alias:/bin/sh\n\
        nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
    const GROUP: &str = "root:x:0:\nstaff:x:50:user\nuser:x:1000:\n";

    /// What a scan of `PASSWD` finds for `spec`, and how many lines it read.
    fn find_user(spec: Spec) -> (Option<(User, bool)>, usize) {
        let mut scan = UserScan::new(spec);
        let read = PASSWD.lines().take_while(|l| !scan.line(l)).count() + 1;
        (scan.found.map(|u| (u, scan.shadowed)), read)
    }

    fn find_group(spec: Spec) -> Option<Group> {
        GROUP.lines().find_map(|l| group_line(l, spec))
    }

    #[test]
    fn users_by_name_and_by_uid() {
        let (found, read) = find_user(Spec::Name("user"));
        let (user, shadowed) = found.unwrap();
        assert_eq!(
            user,
            User {
                name: "user".into(),
                uid: 1000,
                gid: 1000,
                home: "/home/user".into()
            }
        );
        assert!(!shadowed);
        // The scan stops at the entry.
        assert_eq!(read, 4);
        // The first entry of a shared uid; the later name is shadowed by it.
        assert_eq!(find_user(Spec::Id(1000)).0.unwrap().0.name, "user");
        let (alias, shadowed) = find_user(Spec::Name("alias")).0.unwrap();
        assert_eq!((alias.gid, shadowed), (1001, true));
        assert_eq!(find_user(Spec::Id(0)).0.unwrap().0.home, "/root");
        assert_eq!(find_user(Spec::Name("bob")).0, None);
        assert_eq!(find_user(Spec::Id(4242)).0, None);
        assert_eq!(find_user(Spec::Name("broken line")).0, None);
        assert_eq!(decode_user(&encode_user(&user)), Some(user));
    }

    #[test]
    fn groups_by_name_and_by_gid() {
        assert_eq!(find_group(Spec::Name("staff")).unwrap().gid, 50);
        assert_eq!(find_group(Spec::Id(1000)).unwrap().name, "user");
        assert_eq!(find_group(Spec::Name("wheel")), None);
        assert_eq!(
            decode_group("staff:50"),
            Some(Group {
                name: "staff".into(),
                gid: 50
            })
        );
    }

    /// The lines `chunks` make, fed in that order, up to `stop`.
    fn split(chunks: &[&[u8]], stop: Option<&str>) -> Vec<String> {
        let mut seen = Vec::new();
        let mut f = |line: &str| {
            seen.push(line.to_string());
            Some(line) == stop
        };
        let mut lines = LineSplitter::default();
        if !chunks.iter().any(|c| lines.feed(c, &mut f)) {
            lines.finish(&mut f);
        }
        seen
    }

    #[test]
    fn a_database_is_read_a_line_at_a_time() {
        // Lines split across chunks, a last line without a newline.
        assert_eq!(
            split(&[b"ro", b"ot:x\nus", b"er:y\n", b"\nlast"], None),
            ["root:x", "user:y", "", "last"]
        );
        // Stops at the line sought: the rest is never looked at.
        assert_eq!(split(&[b"a\nb\nc\n", b"d\n"], Some("b")), ["a", "b"]);
        // A line longer than MAX_LINE is skipped whole, however it is cut.
        let long = vec![b'x'; MAX_LINE + 10];
        let (one, two) = long.split_at(MAX_LINE / 2);
        assert_eq!(split(&[b"a\n", one, two, b"yz\nb\n"], None), ["a", "b"]);
        assert_eq!(split(&[b"a\n", &long], None), ["a"]);
    }

    #[test]
    fn names_and_numbers_are_checked() {
        assert_eq!(spec("user", "user").unwrap(), Spec::Name("user"));
        assert_eq!(spec("1000", "user").unwrap(), Spec::Id(1000));
        assert_eq!(spec("0", "owner").unwrap(), Spec::Id(0));
        for bad in ["", "a:b", "../x", "a b", "x\n", "99999999999"] {
            let e = spec(bad, "user").unwrap_err();
            assert_eq!(e.kind, error::Kind::Invalid, "{bad}");
            assert!(e.message.contains("`user`"), "{}", e.message);
        }
    }

    #[test]
    fn the_root_part_uses_nothing_the_user_or_the_request_set() {
        let user = parse_user("user:x:1000:1000::/home/user:/bin/sh").unwrap();
        assert_eq!(
            user.identity_env(&[("HOME".into(), "/work".into())]),
            vec![("USER", "user"), ("LOGNAME", "user")]
        );
        let envs = [
            ("HOME".to_string(), "/work".to_string()),
            ("PATH".to_string(), "/nowhere".to_string()),
        ];
        let line = shell_as(&user, &envs, Some("id -un; echo 'it''s'"));
        // setpriv and env from the standard PATH, found before anything runs.
        assert!(
            line.starts_with(
                "__epp_setpriv=$(command -p -v setpriv) && __epp_env=$(command -p -v env) || \
                 { echo 'epp: running as user user needs setpriv"
            ),
            "{line}"
        );
        // The request's variables are `env`'s arguments (set as the user), the
        // shell is the running one.
        assert!(
            line.contains(
                "; exec \"$__epp_setpriv\" --reuid=1000 --regid=1000 --init-groups \
                 \"$__epp_env\" USER='user' LOGNAME='user' HOME='/work' PATH='/nowhere' \
                 \"$BASH\" --norc --noprofile -c 'id -un; echo '\\''it'\\'''\\''s'\\'''"
            ),
            "{line}"
        );
        assert!(!line.contains("export"), "{line}");
        assert!(shell_as(&user, &[], None).ends_with("\"$BASH\" --norc --noprofile"));
        assert!(!run_as(&user, "true").contains("exec"));
    }
}
