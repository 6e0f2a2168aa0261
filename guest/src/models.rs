//! HTTP bodies of the OpenSandbox lifecycle and execd APIs, as serde types
//! (the wire side; `convert` functions in the capability modules turn them into
//! WIT types).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Serialize)]
pub struct ImageAuth {
    pub username: String,
    pub password: String,
}

#[derive(Serialize)]
pub struct ImageSpec {
    pub uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<ImageAuth>,
}

#[derive(Serialize)]
pub struct PlatformSpec {
    pub os: &'static str,
    pub arch: &'static str,
}

/// `POST /sandboxes`: from an image (`image`, `entrypoint` required) or from
/// a snapshot (`snapshotId`; the server's entrypoint default applies when
/// none is sent). Exactly one of `image` and `snapshotId`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateSandboxRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Seconds; absent = never expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
    pub resource_limits: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub secure_access: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpec>,
}

/// One of `volumes`: exactly one backend (`host` or `pvc`).
#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpec {
    /// A DNS label, unique in the request (the server names the volume by it).
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<HostPath>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvc: Option<NamedVolume>,
    pub mount_path: String,
    pub read_only: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_path: Option<String>,
}

#[derive(Serialize, Debug, PartialEq, Eq)]
pub struct HostPath {
    pub path: String,
}

/// A volume the platform keeps (a Docker named volume, a Kubernetes PVC).
#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NamedVolume {
    pub claim_name: String,
    pub create_if_not_exists: bool,
}

#[derive(Deserialize, Debug, Default)]
pub struct ImageOut {
    pub uri: Option<String>,
}

#[derive(Deserialize, Debug, Default, Clone)]
pub struct Status {
    #[serde(default)]
    pub state: String,
    pub reason: Option<String>,
    pub message: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    pub id: String,
    pub image: Option<ImageOut>,
    #[serde(default)]
    pub status: Status,
    pub metadata: Option<BTreeMap<String, String>>,
    pub expires_at: Option<String>,
    pub created_at: Option<String>,
    /// The snapshot it was made from, if any (then `image` is absent).
    pub snapshot_id: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct Pagination {
    #[serde(default)]
    pub has_next_page: bool,
    /// How many items the whole filtered list has, as of this page's read:
    /// a later page that says otherwise was read from a changed list.
    pub total_items: Option<u64>,
}

#[derive(Deserialize, Debug)]
pub struct SandboxList {
    #[serde(default)]
    pub items: Vec<Sandbox>,
    pub pagination: Option<Pagination>,
}

/// A snapshot of a sandbox (`/snapshots`): its state is `Creating`, `Ready`,
/// `Failed` or `Deleting`.
#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub id: String,
    #[serde(default)]
    pub sandbox_id: String,
    pub name: Option<String>,
    #[serde(default)]
    pub status: Status,
    pub created_at: Option<String>,
}

#[derive(Deserialize, Debug)]
pub struct SnapshotList {
    #[serde(default)]
    pub items: Vec<Snapshot>,
    pub pagination: Option<Pagination>,
}

/// `POST /sandboxes/{id}/snapshots` body.
#[derive(Serialize)]
pub struct NewSnapshot<'a> {
    pub name: &'a str,
}

/// `GET /version`.
#[derive(Deserialize)]
pub struct ServerVersion {
    pub version: String,
}

#[derive(Deserialize, Debug, Clone, Serialize)]
pub struct Endpoint {
    pub endpoint: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenewRequest {
    pub expires_at: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenewResponse {
    pub expires_at: String,
}

/// `POST /command` body.
#[derive(Serialize)]
pub struct RunCommand<'a> {
    pub command: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: BTreeMap<&'a str, &'a str>,
}

#[derive(Deserialize, Debug, Default)]
pub struct ExecErrorBody {
    #[serde(default)]
    pub ename: String,
    #[serde(default)]
    pub evalue: String,
    #[serde(default)]
    pub traceback: Vec<String>,
}

/// One event of execd's command (or code) stream.
#[derive(Deserialize, Debug)]
pub struct ExecEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub error: Option<ExecErrorBody>,
    /// `execution_count` events of `/code`.
    #[serde(default)]
    pub execution_count: Option<i64>,
    /// `result` events of `/code`: a Jupyter MIME bundle.
    #[serde(default)]
    pub results: Option<Bundle>,
}

/// A MIME bundle in execd's order, each value's JSON text as it came. Not a
/// `serde_json::Value`: printed again, a number could come back other than it
/// came (integers past 64 bits become floats, and the provider's float parsing
/// is serde_json's best effort, without its float_roundtrip tables).
#[derive(Debug, Default)]
pub struct Bundle(pub Vec<(String, Box<serde_json::value::RawValue>)>);

impl<'de> Deserialize<'de> for Bundle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Bundle;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Bundle, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Bundle(entries))
            }
        }
        d.deserialize_map(Entries)
    }
}

#[derive(Deserialize, Debug)]
pub struct CommandStatus {
    pub id: Option<String>,
    #[serde(default)]
    pub running: bool,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// execd's FileInfo; `mode` is an int whose decimal digits are the octal permission.
#[derive(Deserialize, Debug, Clone)]
pub struct ExecdFileInfo {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub size: u64,
    pub modified_at: Option<String>,
    pub owner: Option<String>,
    pub group: Option<String>,
    #[serde(default)]
    pub mode: u32,
}

#[derive(Serialize)]
pub struct UploadMetadata<'a> {
    pub path: &'a str,
    pub mode: u32,
}

#[derive(Serialize)]
pub struct Move<'a> {
    pub src: &'a str,
    pub dest: &'a str,
}

#[derive(Deserialize)]
pub struct PtyCreated {
    pub session_id: String,
}

/// `POST /code/context` body.
#[derive(Serialize)]
pub struct NewContext<'a> {
    pub language: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<&'a str>,
}

/// execd's CodeContext (also what the provider remembers of one).
#[derive(Deserialize, Serialize, Clone)]
pub struct ExecdContext {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub language: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// `POST /code` body.
#[derive(Serialize)]
pub struct RunCode<'a> {
    pub context: RunContext<'a>,
    pub code: &'a str,
}

#[derive(Serialize)]
pub struct RunContext<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    pub language: &'a str,
}
