//! The users and groups of a sandbox, for `user` (commands, sessions,
//! terminals) and `owner`/`group` (files): each a name or a number, looked up
//! in the sandbox's own `/etc/passwd` and `/etc/group`, read through execd's
//! file API. So an unknown one is refused (E1001, naming it) before anything
//! runs or is written: execd itself would run a command as an unknown uid with
//! group 0 (root's), and write a file before failing to give it an unknown owner.
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
//! entry unless the request sets them ([`User::identity_env`]).

use crate::bindings::abx::epp::memo;
use crate::config;
use crate::error::{self, Result, invalid};
use crate::execd::Execd;
use crate::http::encode;
use crate::pty::shell_quote;

/// How long a found entry is reused (a user's uid or home rarely changes).
const TTL_MS: u32 = 600_000;
/// The largest user or group database read (far more than any image has).
const MAX_DB: usize = 4 << 20;

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

/// The entry of `spec` in a passwd file (`name:pw:uid:gid:gecos:home:shell`);
/// the first one when several share a uid.
fn find_user(passwd: &str, spec: Spec) -> Option<User> {
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 7 || line.starts_with('#') {
            return None;
        }
        let user = User {
            name: f[0].to_string(),
            uid: f[2].parse().ok()?,
            gid: f[3].parse().ok()?,
            home: f[5].to_string(),
        };
        let hit = match spec {
            Spec::Name(name) => user.name == name,
            Spec::Id(uid) => user.uid == uid,
        };
        hit.then_some(user)
    })
}

/// The entry of `spec` in a group file (`name:pw:gid:members`).
fn find_group(groups: &str, spec: Spec) -> Option<Group> {
    groups.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 4 || line.starts_with('#') {
            return None;
        }
        let group = Group {
            name: f[0].to_string(),
            gid: f[2].parse().ok()?,
        };
        let hit = match spec {
            Spec::Name(name) => group.name == name,
            Spec::Id(gid) => group.gid == gid,
        };
        hit.then_some(group)
    })
}

fn memo_key(kind: &str, sandbox_id: &str, value: &str) -> Result<String> {
    let origin = &config::settings()?.origin;
    Ok(format!("{kind}:{origin}:{sandbox_id}:{value}"))
}

/// A database file of the sandbox; none when it has no such file.
fn read_db(execd: &mut Execd, path: &str) -> Result<Option<String>> {
    let query = format!("/files/download?path={}", encode(path));
    let resp = execd.send(|e| e.request("GET", &query), &[])?;
    if resp.status == 404 {
        return Ok(None);
    }
    let resp = execd.check(resp, path)?;
    let body = resp
        .read_all(MAX_DB)
        .map_err(|t| error::broken_body(t, execd.target()))?;
    Ok(Some(String::from_utf8_lossy(&body).into_owned()))
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

/// The user `value` (a name or a uid) given as `field`.
pub fn user(execd: &mut Execd, value: &str, field: &str) -> Result<User> {
    let spec = spec(value, field)?;
    let key = memo_key("user", &execd.sandbox_id, value)?;
    if let Some(user) = memo::get(&key).and_then(|v| decode_user(&v)) {
        return Ok(user);
    }
    let passwd = read_db(execd, "/etc/passwd")?;
    let user = passwd
        .as_deref()
        .and_then(|p| find_user(p, spec))
        .ok_or_else(|| unknown(execd, field, value, "/etc/passwd", passwd.is_some()))?;
    memo::put(&key, &encode_user(&user), TTL_MS);
    Ok(user)
}

/// The user of a request's `user` parameter, when it has one.
pub fn of_request(execd: &mut Execd, value: Option<&str>) -> Result<Option<User>> {
    value.map(|v| user(execd, v, "user")).transpose()
}

/// The group `value` (a name or a gid).
pub fn group(execd: &mut Execd, value: &str) -> Result<Group> {
    let spec = spec(value, "group")?;
    let key = memo_key("group", &execd.sandbox_id, value)?;
    if let Some(group) = memo::get(&key).and_then(|v| decode_group(&v)) {
        return Ok(group);
    }
    let groups = read_db(execd, "/etc/group")?;
    let group = groups
        .as_deref()
        .and_then(|g| find_group(g, spec))
        .ok_or_else(|| unknown(execd, "group", value, "/etc/group", groups.is_some()))?;
    memo::put(&key, &format!("{}:{}", group.name, group.gid), TTL_MS);
    Ok(group)
}

/// A user as one line (`name:uid:gid:home`: no field of a passwd entry holds a
/// `:`); also the content of a session's user file (crate::sessions).
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

/// `bash` as `user` running `script` (none: an interactive shell), with the
/// user's identity variables (less those in `envs`), through `setpriv`; the
/// prefix exits 127 with a message on stderr when the sandbox has no setpriv.
fn bash_as(user: &User, envs: &[(String, String)], script: Option<&str>, exec: bool) -> String {
    let mut line = format!(
        "command -v setpriv >/dev/null 2>&1 || {{ echo {} >&2; exit 127; }}; \
         {}setpriv --reuid={} --regid={} --init-groups env",
        shell_quote(&format!(
            "epp: running as user {} needs setpriv (util-linux) in the sandbox; install it, \
             or leave `user` out",
            user.name
        )),
        if exec { "exec " } else { "" },
        user.uid,
        user.gid
    );
    for (k, v) in user.identity_env(envs) {
        line.push_str(&format!(" {k}={}", shell_quote(v)));
    }
    line.push_str(" bash --norc --noprofile");
    if let Some(script) = script {
        line.push_str(" -c ");
        line.push_str(&shell_quote(script));
    }
    line
}

/// A shell command line that replaces the shell running it with `bash` as
/// `user` (a terminal's, a stdin command's), running `script` or, without
/// one, interactive.
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

    #[test]
    fn users_by_name_and_by_uid() {
        let user = find_user(PASSWD, Spec::Name("user")).unwrap();
        assert_eq!(
            user,
            User {
                name: "user".into(),
                uid: 1000,
                gid: 1000,
                home: "/home/user".into()
            }
        );
        // The first entry of a shared uid.
        assert_eq!(find_user(PASSWD, Spec::Id(1000)).unwrap().name, "user");
        assert_eq!(find_user(PASSWD, Spec::Id(0)).unwrap().home, "/root");
        assert_eq!(find_user(PASSWD, Spec::Name("bob")), None);
        assert_eq!(find_user(PASSWD, Spec::Id(4242)), None);
        assert_eq!(find_user(PASSWD, Spec::Name("broken line")), None);
        assert_eq!(decode_user(&encode_user(&user)), Some(user));
    }

    #[test]
    fn groups_by_name_and_by_gid() {
        assert_eq!(find_group(GROUP, Spec::Name("staff")).unwrap().gid, 50);
        assert_eq!(find_group(GROUP, Spec::Id(1000)).unwrap().name, "user");
        assert_eq!(find_group(GROUP, Spec::Name("wheel")), None);
        assert_eq!(
            decode_group("staff:50"),
            Some(Group {
                name: "staff".into(),
                gid: 50
            })
        );
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
    fn the_request_sets_identity_variables_first() {
        let user = find_user(PASSWD, Spec::Name("user")).unwrap();
        assert_eq!(
            user.identity_env(&[("HOME".into(), "/work".into())]),
            vec![("USER", "user"), ("LOGNAME", "user")]
        );
        let line = shell_as(&user, &[], Some("id -un; echo 'it''s'"));
        assert!(
            line.contains(
                "exec setpriv --reuid=1000 --regid=1000 --init-groups env HOME='/home/user' \
                 USER='user' LOGNAME='user' bash --norc --noprofile -c 'id -un; echo '\\''it'\\'''\\''s'\\'''"
            ),
            "{line}"
        );
        assert!(shell_as(&user, &[], None).ends_with("bash --norc --noprofile"));
    }
}
