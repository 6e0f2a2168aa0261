//! process.manage: processes are read from /proc inside the sandbox and
//! signalled with `kill`, both through helper commands.

use crate::bindings::exports::abx::epp::infra::ProcessInfo;
use crate::commands::run_to_end;
use crate::error::{self, Result, invalid, not_found};

/// Prints `P<TAB>pid<TAB>ppid<TAB>uid<TAB>cmdline` per process (skipping itself
/// and its children) and `U<TAB>name<TAB>uid` per /etc/passwd entry.
const LIST_SCRIPT: &str = r#"self=$$
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ -r "$d/status" ] || continue
  ppid=; uid=
  while IFS=$' \t' read -r k v rest; do
    case "$k" in PPid:) ppid=$v;; Uid:) uid=$v;; esac
  done < "$d/status" 2>/dev/null
  [ -n "$ppid" ] || continue
  [ "$pid" = "$self" ] && continue
  [ "$ppid" = "$self" ] && continue
  cmd=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null)
  [ -n "$cmd" ] || cmd="[$(cat "$d/comm" 2>/dev/null)]"
  printf 'P\t%s\t%s\t%s\t%s\n' "$pid" "$ppid" "$uid" "${cmd% }"
done
while IFS=: read -r name _ uid _; do printf 'U\t%s\t%s\n' "$name" "$uid"; done < /etc/passwd 2>/dev/null
exit 0"#;

pub fn list(sandbox_id: &str) -> Result<Vec<ProcessInfo>> {
    let (code, out, err) = run_to_end(sandbox_id, LIST_SCRIPT, 30_000)?;
    if code != 0 {
        return Err(error::upstream(format!(
            "listing processes in sandbox {sandbox_id} failed (exit {code}): {}",
            err.trim()
        )));
    }
    Ok(parse_listing(&out))
}

fn parse_listing(out: &str) -> Vec<ProcessInfo> {
    let users: std::collections::HashMap<&str, &str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("U\t"))
        .filter_map(|l| l.split_once('\t'))
        .map(|(name, uid)| (uid, name))
        .collect();
    let mut procs: Vec<ProcessInfo> = out
        .lines()
        .filter_map(|l| l.strip_prefix("P\t"))
        .filter_map(|l| {
            let mut f = l.splitn(4, '\t');
            let pid = f.next()?.parse().ok()?;
            let ppid = f.next()?.parse().ok()?;
            let uid = f.next()?;
            let cmdline = f.next().unwrap_or("").to_string();
            Some(ProcessInfo {
                pid,
                ppid,
                user: users
                    .get(uid)
                    .map(|u| u.to_string())
                    .unwrap_or_else(|| uid.to_string()),
                cmdline,
            })
        })
        .collect();
    procs.sort_by_key(|p| p.pid);
    procs
}

/// Signal names `kill -s` accepts everywhere, by number.
const SIGNALS: &[(&str, u8)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
];

/// `SIGTERM`, `term`, `15` → 15.
fn signal_number(signal: &str) -> Result<u8> {
    let s = signal.trim().to_ascii_uppercase();
    if let Ok(n) = s.parse::<u8>() {
        if (1..=64).contains(&n) {
            return Ok(n);
        }
    }
    let name = s.strip_prefix("SIG").unwrap_or(&s);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            invalid(format!(
                "`{signal}` is not a signal; use a name like SIGTERM or SIGKILL, or a number 1-64"
            ))
        })
}

pub fn signal(sandbox_id: &str, pid: u32, signal: &str) -> Result<()> {
    let number = signal_number(signal)?;
    if pid == 0 {
        return Err(invalid("pid 0 is not a process"));
    }
    let (code, _, err) = run_to_end(sandbox_id, &format!("kill -{number} {pid}"), 30_000)?;
    match code {
        0 => Ok(()),
        _ if err.contains("No such process") || err.contains("no such process") => Err(not_found(
            format!("no process {pid} in sandbox {sandbox_id}"),
        )),
        _ if err.contains("not permitted") => Err(error::conflict(format!(
            "not allowed to signal process {pid} in sandbox {sandbox_id} (it belongs to another user)"
        ))),
        _ => Err(error::upstream(format!(
            "kill -{number} {pid} failed in sandbox {sandbox_id}: {}",
            err.trim()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals() {
        assert_eq!(signal_number("SIGTERM").unwrap(), 15);
        assert_eq!(signal_number("kill").unwrap(), 9);
        assert_eq!(signal_number("2").unwrap(), 2);
        assert!(signal_number("SIGFOO").is_err());
        assert!(signal_number("0").is_err());
    }

    #[test]
    fn listing() {
        let out = "P\t1\t0\t0\ttail -f /dev/null\nP\t42\t1\t1000\tpython3 app.py\nU\troot\t0\nU\tme\t1000\n";
        let procs = parse_listing(out);
        assert_eq!(procs.len(), 2);
        assert_eq!(
            (procs[1].pid, procs[1].ppid, procs[1].user.as_str()),
            (42, 1, "me")
        );
        assert_eq!(procs[0].cmdline, "tail -f /dev/null");
    }
}
