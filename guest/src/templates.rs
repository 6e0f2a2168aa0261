//! templates.read and templates.build: the provider's own templates (names of
//! images: `base`, and every alias of ABX_OPENSANDBOX_IMAGE_ALIASES, `code`
//! among them) and the server's snapshots, which are templates made by
//! `templates.build` from a sandbox.
//!
//! How a template name maps to a snapshot (docs/epp-1.md, templates):
//! - a snapshot's `name` on the server is its template name; `templates.build`
//!   gives it, and a name is looked up with `GET /snapshots?name=NAME` (exact);
//! - the provider's own names come first: `base` and the aliases are never
//!   snapshots, and a name with `:` or `/` is an image URI;
//! - a snapshot's id is accepted wherever a name is (for one without a name,
//!   or one of several with the same name);
//! - `templates.build` refuses a name that is one of the provider's or is
//!   taken by a snapshot being made or ready (E4009, naming it);
//! - several snapshots with one name (made outside this provider): the newest
//!   ready one is what a sandbox starts from and what `templates.get` shows;
//!   `templates.remove` refuses, naming their ids.

mod build;
mod names;

pub use build::{build, undo_build, undo_snapshot};

use crate::bindings::abx::epp::memo;
use crate::bindings::exports::abx::epp::infra::{SnapshotInfo, TemplateInfo};
use crate::config;
use crate::error::{Error, Kind, Result, invalid, not_found};
use crate::lifecycle::{Lifecycle, check_id};
use crate::models::Snapshot;
use names::Found;
use opensandbox_settings::{Settings, is_code_interpreter, is_image_uri};

/// How long a snapshot's name (or, for one that is gone, its id) is
/// remembered by its id: names never change, so only a snapshot removed
/// meanwhile by another process is shown by its name after it is gone, for
/// at most this long (docs/epp-1.md, SandboxInfo).
const NAME_TTL_MS: u32 = 3_600_000;

pub fn list() -> Result<Vec<TemplateInfo>> {
    let settings = config::settings()?;
    let mut all = own(settings);
    let snapshots = match Lifecycle::new()?.snapshots(None, None) {
        Err(e) if no_snapshots(&e) => Vec::new(),
        other => other?,
    };
    all.extend(snapshots.into_iter().map(info));
    Ok(all)
}

pub fn get(name: &str) -> Result<TemplateInfo> {
    let settings = config::settings()?;
    if let Some(own) = own(settings).into_iter().find(|t| t.name == name) {
        return Ok(own);
    }
    if is_image_uri(name) {
        return Err(not_found(format!(
            "`{name}` is an image URI, not a template: sandbox.create takes it as it is \
             (templates.list shows the templates)"
        )));
    }
    let found = find(&Lifecycle::new()?, name)?;
    let shown = found.shown().clone();
    let mut template = info(shown);
    if let Some(note) = found.note() {
        template.description = Some(note);
    }
    Ok(template)
}

/// Removes the snapshot a template name (or id) stands for.
pub fn remove(name: &str) -> Result<()> {
    let settings = config::settings()?;
    if settings.is_own_template(name) || is_image_uri(name) {
        return Err(invalid(format!(
            "`{name}` is not a snapshot but {}: templates.remove removes only templates made \
             by templates.build (templates.list shows which: those with `snapshot`)",
            if is_image_uri(name) {
                "an image URI"
            } else {
                "one of the provider's templates (an image name)"
            }
        )));
    }
    let lifecycle = Lifecycle::new()?;
    let snapshot = find(&lifecycle, name)?.only()?;
    lifecycle.delete_snapshot(&snapshot.id).map_err(|e| {
        let kind = e.kind;
        let why = match e.upstream_code() {
            Some(code) if code.contains("DELETE_CONFLICT") => in_use(&lifecycle, &snapshot.id),
            _ => String::new(),
        };
        let message = format!(
            "template `{name}` (snapshot {}): {}{why}",
            snapshot.id, e.message
        );
        e.reworded(kind, message)
    })?;
    memo::forget(&name_key(&snapshot.id)?);
    Ok(())
}

/// Why the server cannot delete a snapshot yet: on Docker its image stays
/// while a container made from it exists. Names those sandboxes.
fn in_use(lifecycle: &Lifecycle, id: &str) -> String {
    let users: Vec<String> = lifecycle
        .list(&[], &[])
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.snapshot_id.as_deref() == Some(id))
        .map(|s| s.id)
        .collect();
    let which = match users.as_slice() {
        [] => "the sandboxes made from it".to_string(),
        ids => format!("the sandboxes made from it ({})", ids.join(", ")),
    };
    format!(
        ". It is still in use: kill {which}, then call templates.remove again; until then it \
         is listed as `deleting` and no sandbox can be made from it"
    )
}

/// What a new sandbox starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Image(String),
    Snapshot { id: String, name: String },
}

/// The source of `sandbox.create {template}`: an image for the provider's own
/// names and image URIs (no I/O), else the ready snapshot the name or id
/// stands for (E4004 when none, E4009 when it is not ready).
pub fn source(template: &str) -> Result<Source> {
    let settings = config::settings()?;
    if let Some(image) = settings.image_for(template) {
        return Ok(Source::Image(image));
    }
    let lifecycle = Lifecycle::new()?;
    let snapshot = find(&lifecycle, template)
        .map_err(|e| unknown(e, settings, template))?
        .ready()?;
    let name = snapshot.name.clone().unwrap_or_else(|| snapshot.id.clone());
    remember_name(&snapshot.id, &name);
    Ok(Source::Snapshot {
        id: snapshot.id,
        name,
    })
}

/// The template name of a sandbox made from snapshot `id`: the snapshot's
/// name, or its id when it has none or was gone when first asked about.
/// Memoised host-wide for [`NAME_TTL_MS`] (a name never changes, a gone
/// snapshot never comes back), so a list does not ask the server again for
/// each sandbox. Never fails: it only labels a sandbox's info (on another
/// error the id, not remembered).
pub fn snapshot_name(id: &str) -> String {
    if let Some(name) = name_key(id).ok().and_then(|k| memo::get(&k)) {
        return name;
    }
    let fetched = Lifecycle::new().and_then(|l| l.get_snapshot(id));
    match fetched {
        Ok(s) => {
            let name = s.name.unwrap_or_else(|| id.to_string());
            remember_name(id, &name);
            name
        }
        Err(e) if is_gone(&e) => {
            remember_name(id, id);
            id.to_string()
        }
        Err(_) => id.to_string(),
    }
}

/// Whether the server says the snapshot does not exist (404
/// `SNAPSHOT::NOT_FOUND`), as opposed to having no snapshots at all.
fn is_gone(e: &Error) -> bool {
    e.status() == Some(404)
        && e.upstream_code()
            .is_some_and(|c| c.contains("SNAPSHOT::NOT_FOUND"))
}

fn name_key(id: &str) -> Result<String> {
    Ok(format!("snapshot-name:{}:{id}", config::settings()?.origin))
}

fn remember_name(id: &str, name: &str) {
    if let Ok(key) = name_key(id) {
        memo::put(&key, name, NAME_TTL_MS);
    }
}

/// The snapshots a name stands for: those with that name, else the one with
/// that id; E4004 when there is none (or the server keeps no snapshots).
fn find(lifecycle: &Lifecycle, name: &str) -> Result<Found> {
    let missing = || {
        not_found(format!(
            "no template `{name}`: no snapshot has that name or id; templates.list shows the \
             templates there are (`base`, the aliases, and every snapshot by name)"
        ))
    };
    let named = match lifecycle.snapshots(Some(name), None) {
        Err(e) if no_snapshots(&e) => return Err(missing()),
        other => other?,
    };
    if !named.is_empty() {
        return Ok(Found::new(name, named));
    }
    if check_id("snapshot", name).is_err() {
        return Err(missing());
    }
    match lifecycle.get_snapshot(name) {
        Ok(s) => Ok(Found::new(name, vec![s])),
        Err(e) if e.is(Kind::NotFound) || no_snapshots(&e) => Err(missing()),
        Err(e) => Err(e),
    }
}

/// The answer for a template that is none of the provider's and no snapshot.
fn unknown(e: Error, settings: &Settings, template: &str) -> Error {
    if !e.is(Kind::NotFound) || e.http.is_some() {
        return e;
    }
    e.reworded(
        Kind::NotFound,
        format!(
            "unknown template `{template}`: not one of the provider's ({}; more names: \
             ABX_OPENSANDBOX_IMAGE_ALIASES), nor the name or id of a snapshot \
             (templates.list shows them all); an image URI has `:` or `/`, e.g. python:3.12-slim",
            own(settings)
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

/// Whether an error says the server keeps no snapshots at all (no such
/// route, or a runtime without them).
fn no_snapshots(e: &Error) -> bool {
    matches!(e.status(), Some(404 | 501))
        && !e
            .upstream_code()
            .is_some_and(|c| c.contains("SNAPSHOT::NOT_FOUND"))
}

/// The provider's own templates: `base`, then the aliases.
fn own(settings: &Settings) -> Vec<TemplateInfo> {
    let base = TemplateInfo {
        name: "base".into(),
        image: Some(settings.default_image.clone()),
        description: Some("the provider's default image (ABX_OPENSANDBOX_DEFAULT_IMAGE)".into()),
        snapshot: None,
    };
    let aliases = settings
        .image_aliases
        .iter()
        .filter(|(name, _)| name.as_str() != "base")
        .map(|(name, image)| TemplateInfo {
            name: name.clone(),
            image: Some(image.clone()),
            description: Some(if is_code_interpreter(image) {
                "OpenSandbox's code interpreter: Jupyter kernels for code.run \
                 (ABX_OPENSANDBOX_IMAGE_ALIASES)"
                    .into()
            } else {
                "an image alias (ABX_OPENSANDBOX_IMAGE_ALIASES)".into()
            }),
            snapshot: None,
        });
    std::iter::once(base).chain(aliases).collect()
}

/// A snapshot as a template.
fn info(s: Snapshot) -> TemplateInfo {
    TemplateInfo {
        name: s.name.clone().unwrap_or_else(|| s.id.clone()),
        image: None,
        description: Some(format!(
            "a snapshot of sandbox {} (templates.build)",
            s.sandbox_id
        )),
        snapshot: Some(SnapshotInfo {
            snapshot_id: s.id,
            sandbox_id: s.sandbox_id,
            state: s.status.state.to_ascii_lowercase(),
            message: s.status.message,
            created_at: s.created_at,
        }),
    }
}
