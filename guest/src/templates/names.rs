//! Template names and the snapshots they stand for (the rules are in
//! crate::templates): which names `templates.build` may give, and which of
//! several snapshots with one name a request means.

use crate::error::{Result, conflict, invalid};
use crate::models::Snapshot;
use crate::sandbox::order::Key;
use opensandbox_settings::Settings;

/// The longest template name `templates.build` gives.
const MAX_NAME: usize = 128;

/// E1001 when `templates.build` cannot give this name: it must be usable as
/// `sandbox.create {template}` (no `:` or `/`, which mean an image URI) and in
/// an undo token; E4009 when it is one of the provider's own templates.
pub fn check_new(name: &str, settings: &Settings) -> Result<()> {
    let plain = !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !plain {
        return Err(invalid(format!(
            "`{name}` cannot be a template name: use 1 to {MAX_NAME} letters, digits, `-`, `_` \
             and `.` (a name with `:` or `/` would be read as an image URI)"
        )));
    }
    if settings.is_own_template(name) {
        return Err(conflict(format!(
            "`{name}` is one of the provider's templates (an image: `base` or an alias of \
             ABX_OPENSANDBOX_IMAGE_ALIASES); give the new template another name"
        )));
    }
    Ok(())
}

/// E4009 when a snapshot being made or ready already has the name.
pub fn check_free(name: &str, existing: &[Snapshot]) -> Result<()> {
    match existing
        .iter()
        .find(|s| matches!(s.status.state.as_str(), "Creating" | "Ready"))
    {
        None => Ok(()),
        Some(s) => Err(conflict(format!(
            "template `{name}` exists: snapshot {} of sandbox {} is {}; remove it first \
             (templates.remove {{\"name\": \"{name}\"}}) or give another name",
            s.id,
            s.sandbox_id,
            s.status.state.to_ascii_lowercase()
        ))),
    }
}

/// The snapshots a template name (or id) stands for, newest first.
pub struct Found {
    name: String,
    snapshots: Vec<Snapshot>,
}

impl Found {
    /// `snapshots` is not empty.
    pub fn new(name: &str, mut snapshots: Vec<Snapshot>) -> Found {
        snapshots
            .sort_by_cached_key(|s| std::cmp::Reverse(Key::new(s.created_at.as_deref(), &s.id)));
        Found {
            name: name.to_string(),
            snapshots,
        }
    }

    fn newest_ready(&self) -> Option<&Snapshot> {
        self.snapshots.iter().find(|s| s.status.state == "Ready")
    }

    /// The one `templates.get` shows: the newest ready, else the newest.
    pub fn shown(&self) -> &Snapshot {
        self.newest_ready().unwrap_or(&self.snapshots[0])
    }

    /// What `templates.get` says when several snapshots have the name.
    pub fn note(&self) -> Option<String> {
        (self.snapshots.len() > 1).then(|| {
            format!(
                "{} snapshots are named `{}` ({}); a sandbox starts from the newest ready one, \
                 {}; name one by its id to choose",
                self.snapshots.len(),
                self.name,
                self.listed(),
                self.shown().id
            )
        })
    }

    /// The snapshot a sandbox starts from: the newest ready one; E4009 when
    /// none is ready, saying why.
    pub fn ready(self) -> Result<Snapshot> {
        if let Some(s) = self.newest_ready() {
            return Ok(s.clone());
        }
        let newest = &self.snapshots[0];
        let why = match newest.status.state.as_str() {
            "Creating" => "is still being made; wait for templates.build to answer".to_string(),
            state => format!(
                "is {}{}; remove it (templates.remove) and build it again",
                state.to_ascii_lowercase(),
                newest
                    .status
                    .message
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default()
            ),
        };
        Err(conflict(format!(
            "template `{}` (snapshot {}) {why}",
            self.name, newest.id
        )))
    }

    /// The one snapshot the name stands for; E4009 naming them when several do.
    pub fn only(mut self) -> Result<Snapshot> {
        if self.snapshots.len() == 1 {
            return Ok(self.snapshots.remove(0));
        }
        Err(conflict(format!(
            "{} snapshots are named `{}` ({}); remove them one by one by id \
             (templates.remove {{\"name\": ID}})",
            self.snapshots.len(),
            self.name,
            self.listed()
        )))
    }

    fn listed(&self) -> String {
        self.snapshots
            .iter()
            .map(|s| {
                format!(
                    "{}: {}, {}",
                    s.id,
                    s.status.state.to_ascii_lowercase(),
                    s.created_at.as_deref().unwrap_or("no time")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Kind;
    use crate::models::Status;

    fn snap(id: &str, state: &str, at: &str) -> Snapshot {
        Snapshot {
            id: id.into(),
            sandbox_id: "sb".into(),
            name: Some("t".into()),
            status: Status {
                state: state.into(),
                reason: None,
                message: Some(format!("{state} because")),
            },
            created_at: Some(at.into()),
        }
    }

    fn settings() -> Settings {
        Settings::from_env(&|name: &str| {
            (name == "ABX_OPENSANDBOX_IMAGE_ALIASES").then(|| "node=node:20".to_string())
        })
        .unwrap()
    }

    #[test]
    fn names_templates_build_may_give() {
        let s = settings();
        for ok in ["py-data", "v1.2_x", "A"] {
            check_new(ok, &s).unwrap();
        }
        for bad in ["", "a:b", "a/b", "..", "a b", &"x".repeat(129)] {
            assert_eq!(check_new(bad, &s).unwrap_err().kind, Kind::Invalid, "{bad}");
        }
        for own in ["base", "code", "node"] {
            let e = check_new(own, &s).unwrap_err();
            assert_eq!(e.kind, Kind::Conflict, "{own}");
            assert!(e.message.contains("provider's templates"), "{e:?}");
        }
        check_free("t", &[snap("f", "Failed", "2026-01-01T00:00:00Z")]).unwrap();
        let e = check_free("t", &[snap("r", "Ready", "2026-01-01T00:00:00Z")]).unwrap_err();
        assert_eq!(e.kind, Kind::Conflict);
        assert!(
            e.message.contains("snapshot r of sandbox sb is ready"),
            "{e:?}"
        );
    }

    #[test]
    fn the_newest_ready_snapshot_wins_and_remove_wants_one() {
        let found = || {
            Found::new(
                "t",
                vec![
                    snap("old-ready", "Ready", "2026-01-01T00:00:01Z"),
                    snap("new-failed", "Failed", "2026-01-01T00:00:03Z"),
                    snap("mid-ready", "Ready", "2026-01-01T00:00:02.5Z"),
                ],
            )
        };
        assert_eq!(found().shown().id, "mid-ready");
        assert_eq!(found().ready().unwrap().id, "mid-ready");
        let note = found().note().unwrap();
        assert!(note.starts_with("3 snapshots are named `t`"), "{note}");
        let e = found().only().unwrap_err();
        assert_eq!(e.kind, Kind::Conflict);
        for id in ["old-ready", "new-failed", "mid-ready"] {
            assert!(e.message.contains(id), "{e:?}");
        }
        let one = Found::new("t", vec![snap("a", "Creating", "2026-01-01T00:00:00Z")]);
        assert!(one.note().is_none());
        let e = one.ready().unwrap_err();
        assert!(e.message.contains("still being made"), "{e:?}");
        let failed = Found::new("t", vec![snap("a", "Failed", "2026-01-01T00:00:00Z")]);
        let e = failed.ready().unwrap_err();
        assert!(e.message.contains("is failed (Failed because)"), "{e:?}");
    }
}
