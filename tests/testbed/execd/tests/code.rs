//! Black-box tests of `/code*` where no Jupyter server is involved: what execd answers on
//! an image without one, request validation, and the shell-command form. Runs against a
//! real Jupyter server are covered by `testbed check` (conformance/code_scenario.py).

mod common;

use std::time::Duration;

use common::*;
use http::StatusCode;
use serde_json::json;

fn runtime_error(r: &Reply, message: &str) {
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"code": "RUNTIME_ERROR", "message": message})
    );
}

#[tokio::test]
async fn without_jupyter_code_runs_are_not_configured_and_nothing_is_listed() {
    let x = Execd::start();
    let not_configured = "error running codes language runtime server not configured, please check your image runtime";
    for context in [
        json!({"language": "python"}),
        json!({"id": "c1", "language": "python"}),
    ] {
        let r = post_json(x.port, "/code", json!({"context": context, "code": "1+1"})).await;
        runtime_error(&r, not_configured);
    }
    let r = get(x.port, "/code/contexts").await;
    assert_eq!((r.status, r.text()), (StatusCode::OK, "[]".to_string()));
    let r = get(x.port, "/code/contexts/c1").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(
        r.json(),
        json!({"code": "CONTEXT_NOT_FOUND", "message": "context c1 not found"})
    );
    let r = call(x.port, "DELETE", "/code/contexts/c1", "").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = call(x.port, "DELETE", "/code/contexts?language=python", "").await;
    assert_eq!((r.status, r.text()), (StatusCode::OK, String::new()));
    let r = call(x.port, "DELETE", "/code?id=c1", "").await;
    runtime_error(&r, "error interruptting code context. no such session");
}

#[tokio::test]
async fn making_a_context_without_jupyter_never_answers() {
    // execd retries with an uncapped backoff: the client gives up first.
    let x = Execd::start();
    let pending = tokio::time::timeout(
        Duration::from_secs(2),
        post_json(x.port, "/code/context", json!({"language": "python"})),
    )
    .await;
    assert!(
        pending.is_err(),
        "answered: {:?}",
        pending.map(|r| r.text())
    );
}

#[tokio::test]
async fn requests_are_validated_like_execd() {
    let x = Execd::start();
    let r = post_json(x.port, "/code", json!({"context": {"language": "python"}})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["code"], "INVALID_REQUEST_BODY");
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("'Code' failed on the 'required' tag")
    );
    let r = post_json(
        x.port,
        "/code",
        json!({"context": {"language": "r"}, "code": "1"}),
    )
    .await;
    runtime_error(&r, "error running codes unknown language: r");
    let r = get(x.port, "/code/contexts?language=command").await;
    runtime_error(&r, "unsupported language context operation: command");
    let r = call(x.port, "DELETE", "/code/contexts", "").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json(),
        json!({"code": "MISSING_QUERY", "message": "missing query parameter 'language'"})
    );
    let r = call(x.port, "POST", "/code/context", "{").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn without_a_language_the_code_is_a_shell_command() {
    let x = Execd::start();
    let (r, events) = run_code(x.port, json!({"code": "echo hi; echo oops >&2"})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(events[0]["type"], "init");
    assert_eq!(texts(&events, "stdout"), ["hi\n"]);
    assert_eq!(texts(&events, "stderr"), ["oops\n"]);
    assert_eq!(last(&events)["type"], "execution_complete");
    let (_, events) = run_code(
        x.port,
        json!({"context": {"language": ""}, "code": "exit 3"}),
    )
    .await;
    assert_eq!(last(&events)["error"]["evalue"], "3");
}

#[tokio::test]
async fn an_unknown_context_on_a_configured_image_is_not_found() {
    // Jupyter configured but unreachable: a context id that was never made is looked up
    // before anything talks to Jupyter.
    let x = Execd::start_with(
        &[],
        &[
            ("JUPYTER_HOST", "http://127.0.0.1:9"),
            ("JUPYTER_TOKEN", "t"),
        ],
    );
    let r = post_json(
        x.port,
        "/code",
        json!({"context": {"id": "nope", "language": "python"}, "code": "1"}),
    )
    .await;
    runtime_error(&r, "error running codes context not found");
}

async fn run_code(port: u16, body: serde_json::Value) -> (Reply, Vec<serde_json::Value>) {
    let r = post_json(port, "/code", body).await;
    let events = parse_events(&r.body);
    (r, events)
}
