//! Secrets. Every host of every end-to-end test is swept by the harness (its
//! stdout lines, error messages included, and its stderr; `epp_e2e::secrets`).
//! Here: the guest's memory, read from a running host while a request is in
//! flight (that host logs at `EPP_LOG=debug`).

use epp_e2e::secrets::{registry_password, scan_guest_memory};
use epp_e2e::{HostBuilder, Mode, figure, testbed};
use serde_json::json;
use std::time::Duration;

#[test]
fn the_api_key_never_reaches_guest_memory() {
    let key = testbed().api_key.clone();
    assert!(
        key.len() >= 16,
        "the e2e testbed must run with a recognisable key"
    );
    let password = registry_password().to_string();
    // At the most verbose level of the host's own log: the harness sweeps that
    // stderr for both secrets too.
    let host = HostBuilder::new(Mode::Direct)
        .env("EPP_LOG", "debug")
        .spawn();
    let id = host.create_sandbox();
    let canary = format!("sandbox {id}");

    // While the command streams, its provider instance is alive and holds the
    // stream's state (which names the sandbox: the canary).
    let req = host.send(
        "commands.run",
        json!({"sandbox_id": id, "cmd": "sleep 3; echo done", "stream": true}),
    );
    host.first_note("commands.started", &req, Duration::from_secs(20))
        .expect("commands.started");
    let needles = [key.as_str(), password.as_str(), canary.as_str()];
    let during = scan_guest_memory(host.pid(), &needles).expect("reading the host's guest memory");
    // The answer is the signal that the request is over: the host drops the
    // request's instance before it answers.
    host.wait(&req, Duration::from_secs(60))
        .expect("the command");
    let after = scan_guest_memory(host.pid(), &needles).expect("reading the host's guest memory");

    assert!(
        during.hits[2] > 0,
        "the scan did not find the live instance's state ({} bytes read): it is not looking at guest memory",
        during.read_bytes
    );
    assert_eq!(during.hits[0], 0, "the API key is in guest memory");
    assert_eq!(after.hits[0], 0, "the API key is in guest memory");
    figure(
        "secrets",
        &format!(
            "guest memory during a request: {} linear memories, {} KiB read; \
             API key {} hits, registry password {} hits, canary {} hits; after the request: \
             {} KiB read, API key {}, password {}, canary {}",
            during.memories,
            during.read_bytes >> 10,
            during.hits[0],
            during.hits[1],
            during.hits[2],
            after.read_bytes >> 10,
            after.hits[0],
            after.hits[1],
            after.hits[2],
        ),
    );
}
