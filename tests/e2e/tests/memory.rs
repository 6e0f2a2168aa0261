//! Bounded memory on byte params (docs/reliability.md, "Memory"): a
//! `commands.send_input` line of 64 MiB (48 MiB of input as base64) is
//! answered, every byte reaches the command, and epp-host's resident set
//! never exceeds 512 MiB; of sixteen such lines sent at once, those past the
//! host's bound on big lines in flight are refused (E9001, retryable) and go
//! through when sent again. The peaks are figures.

use epp_e2e::{Host, Mode, b64e, figure, peak_rss_kib};
use serde_json::{Value, json};
use std::time::Duration;

/// 48 MiB of input: a 64 MiB line once it is base64.
const DATA: usize = 48 << 20;
const PATIENCE: Duration = Duration::from_secs(300);

/// A foreground command with stdin that reads exactly DATA bytes and prints
/// how many it got; answers its request and its command id.
fn reader(host: &Host, sandbox_id: &str) -> (Value, String) {
    let run = host.send(
        "commands.run",
        json!({"sandbox_id": sandbox_id, "cmd": format!("head -c {DATA} | wc -c"),
               "stdin": true, "stream": true}),
    );
    let started = host
        .first_note("commands.started", &run, PATIENCE)
        .expect("commands.started");
    let command_id = started["params"]["command_id"]
        .as_str()
        .expect("a command id")
        .to_string();
    (run, command_id)
}

/// What the command printed, once it exited 0.
fn counted(host: &Host, run: &Value) -> String {
    let answer = host.wait(run, PATIENCE).expect("the command's end");
    assert_eq!(answer["exit_code"], 0, "{answer}");
    host.notes_for("commands.output", run)
        .iter()
        .map(|(_, n)| n["params"]["data"].as_str().unwrap_or_default().to_string())
        .collect::<String>()
        .trim()
        .to_string()
}

#[test]
fn a_64_mib_send_input_line_is_answered_within_512_mib() {
    let host = Host::start(Mode::Direct);
    let id = host.create_sandbox();
    let data = b64e(&vec![b'x'; DATA]);

    let (run, command_id) = reader(&host, &id);
    let sent = host.send(
        "commands.send_input",
        json!({"sandbox_id": id, "command_id": command_id, "data": data}),
    );
    host.wait(&sent, PATIENCE).expect("commands.send_input");
    assert_eq!(counted(&host, &run), DATA.to_string());
    let one = peak_rss_kib(host.pid()).expect("epp-host's VmHWM");
    figure(
        "memory",
        &format!(
            "one 64 MiB commands.send_input line: epp-host peak RSS {} MiB",
            one >> 10
        ),
    );
    assert!(one <= 512 << 10, "peak {one} KiB");

    // Sixteen at once: all answered, every command got all its bytes.
    let readers: Vec<(Value, String)> = (0..16).map(|_| reader(&host, &id)).collect();
    let sends: Vec<Value> = readers
        .iter()
        .map(|(_, command_id)| {
            host.send(
                "commands.send_input",
                json!({"sandbox_id": id, "command_id": command_id, "data": data}),
            )
        })
        .collect();
    let mut refused = Vec::new();
    for (sent, (_, command_id)) in sends.iter().zip(&readers) {
        match host.wait(sent, PATIENCE) {
            Ok(_) => {}
            Err(e) if e.epp == "E9001" => {
                assert!(e.message.contains("big requests"), "{e:?}");
                refused.push(command_id.clone());
            }
            Err(e) => panic!("commands.send_input: {e:?}"),
        }
    }
    let at_once = 16 - refused.len();
    // Sent again one at a time, the refused ones go through.
    for command_id in &refused {
        host.ok(
            "commands.send_input",
            json!({"sandbox_id": id, "command_id": command_id, "data": data}),
        );
    }
    for (run, _) in &readers {
        assert_eq!(counted(&host, run), DATA.to_string());
    }
    let sixteen = peak_rss_kib(host.pid()).expect("epp-host's VmHWM");
    figure(
        "memory",
        &format!(
            "sixteen 64 MiB commands.send_input lines at once: {at_once} taken, {} refused \
             (E9001) and sent again; epp-host peak RSS {} MiB",
            refused.len(),
            sixteen >> 10
        ),
    );
    // Big lines in flight are bounded (256 MiB of lines), so sixteen cost
    // what a few do at once, not sixteen times one.
    assert!(sixteen <= 1536 << 10, "peak {sixteen} KiB");
}
