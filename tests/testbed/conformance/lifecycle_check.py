"""Lifecycle checks against the testbed server with raw HTTP (no SDK).

Checks what the SDK scenarios cannot see: auth, error codes and bodies,
state mapping, the process tree behind a sandbox (pause = every process
stopped, delete/expiry = every process gone, execd death = Failed), list
filters and pagination, the endpoint forms, and the server's reverse proxy
for HTTP and WebSocket to a port of the sandbox.

Environment: OPEN_SANDBOX_DOMAIN (host:port), OPEN_SANDBOX_API_KEY,
TESTBED_STATE_DIR (the server's state folder). Run with the server venv's
Python (it needs ``websockets``). Exits non-zero on the first mismatch.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote

from websockets.sync.client import connect as ws_connect

DOMAIN = os.environ.get("OPEN_SANDBOX_DOMAIN", "127.0.0.1:8080")
API_KEY = os.environ.get("OPEN_SANDBOX_API_KEY", "")
STATE_DIR = Path(os.environ["TESTBED_STATE_DIR"]) if os.environ.get("TESTBED_STATE_DIR") else None
BASE = f"http://{DOMAIN}"
HERE = Path(__file__).resolve().parent
SANDBOX_MARKER = "OPENSANDBOX_TESTBED_SANDBOX"

created: list[str] = []


class Mismatch(AssertionError):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Mismatch(what)
    print(f"  ok  {what}")


def call(method: str, path: str, body=None, *, key: str | None = API_KEY, raw: bool = False,
         timeout: float = 60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key is not None:
        req.add_header("OPEN-SANDBOX-API-KEY", key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, payload, headers = resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        status, payload, headers = err.code, err.read(), err.headers
    if raw:
        return status, payload, headers
    text = payload.decode(errors="replace")
    try:
        return status, (json.loads(text) if text else None)
    except json.JSONDecodeError:
        return status, text


def expect(method: str, path: str, body=None, *, status: int, code: str | None = None, **kw):
    got_status, payload = call(method, path, body, **kw)
    what = f"{method} {path} -> {status}" + (f" {code}" if code else "")
    if got_status != status or (code and not (isinstance(payload, dict) and payload.get("code") == code)):
        raise Mismatch(f"{what}: got {got_status} {payload!r}")
    print(f"  ok  {what}")
    return payload


def get_url(url: str, timeout: float = 10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marked_pids(sandbox_id: str) -> list[int]:
    needle = f"{SANDBOX_MARKER}={sandbox_id}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in env:
            pids.append(int(entry))
    return pids


def proc_state(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return chr(data[data.rfind(b")") + 2])


def proc_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw if e)


def proc_cmdline(pid: int) -> list[str]:
    try:
        return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def wait_for(pred, what: str, timeout: float = 15.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            print(f"  ok  {what}")
            return value
        if time.monotonic() > deadline:
            raise Mismatch(f"timed out: {what}")
        time.sleep(interval)


def create(body_extra: dict | None = None, **kw) -> dict:
    body = {
        "image": {"uri": "python:3.11"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "timeout": 300,
        "resourceLimits": {"cpu": "1", "memory": "2Gi"},
    }
    body.update(body_extra or {})
    payload = expect("POST", "/v1/sandboxes", body, status=202, **kw)
    created.append(payload["id"])
    return payload


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------------------


def test_server_basics() -> None:
    print("server basics and auth")
    check(call("GET", "/health", key=None) == (200, {"status": "healthy"}), "GET /health")
    check(call("GET", "/version", key=None) == (200, {"version": "1.1.1"}), "GET /version is 1.1.1")
    expect("GET", "/v1/sandboxes", key=None, status=401, code="MISSING_API_KEY")
    expect("GET", "/v1/sandboxes", key="wrong-key", status=401, code="INVALID_API_KEY")
    status, payload = call("POST", "/v1/sandboxes", {
        "image": {"uri": "x"}, "entrypoint": ["true"], "timeout": 30, "resourceLimits": {},
    })
    check(status == 422 and isinstance(payload, dict) and "detail" in payload,
          f"timeout < 60 -> 422 FastAPI body (got {status})")
    for extra, what in (
        ({"secureAccess": True}, "secureAccess"),
        ({"resourceLimits": {"cpu": "lots"}}, "bad resourceLimits.cpu"),
        ({"env": {"OPENSANDBOX_EGRESS_NOPE": "1"}}, "unknown OPENSANDBOX_EGRESS_ env"),
        ({"networkPolicy": {"defaultAction": "deny", "egress": []}}, "networkPolicy (no egress sidecar)"),
    ):
        body = {"image": {"uri": "x"}, "entrypoint": ["true"], "timeout": 60,
                "resourceLimits": {"cpu": "1"}, **extra}
        got = expect("POST", "/v1/sandboxes", body, status=400, code="SANDBOX::INVALID_PARAMETER")
        print(f"        ({what}: {got['message'][:90]})")
    expect("POST", "/v1/sandboxes", {"image": {"uri": "x"}, "entrypoint": ["true"], "timeout": 60,
                                     "resourceLimits": {}, "metadata": {"opensandbox.io/x": "y"}},
           status=400, code="SANDBOX::INVALID_METADATA_LABEL")
    expect("GET", "/v1/sandboxes/does-not-exist", status=404, code="DOCKER::SANDBOX_NOT_FOUND")
    expect("DELETE", "/v1/sandboxes/does-not-exist", status=404, code="DOCKER::SANDBOX_NOT_FOUND")
    expect("GET", "/v1/sandboxes/does-not-exist/endpoints/44772", status=404, code="DOCKER::SANDBOX_NOT_FOUND")


def test_running_sandbox() -> str:
    print("create / get / processes / endpoints")
    before = datetime.now(timezone.utc)
    resp = create({"env": {"FOO": "bar"}, "metadata": {"team": "alpha", "suite": "lifecycle"}, "timeout": 120})
    sid = resp["id"]
    check(resp["status"]["state"] == "Running" and resp["status"]["reason"] == "CONTAINER_RUNNING",
          "create answers 202 Running / CONTAINER_RUNNING")
    check("image" not in resp, "create response has no image (as the Docker service)")
    check(resp["metadata"] == {"team": "alpha", "suite": "lifecycle"}, "create echoes metadata")
    check(resp["entrypoint"] == ["tail", "-f", "/dev/null"], "create echoes entrypoint")
    expires = parse_time(resp["expiresAt"]) - parse_time(resp["createdAt"])
    check(abs(expires.total_seconds() - 120) < 1, "expiresAt = createdAt + timeout")
    check(parse_time(resp["createdAt"]) >= before - timedelta(seconds=1), "createdAt is now")

    info = expect("GET", f"/v1/sandboxes/{sid}", status=200)
    check(info["image"] == {"uri": "python:3.11"}, "GET includes image{uri}")
    check(info["status"]["state"] == "Running", "GET state Running")
    check(info["metadata"] == {"team": "alpha", "suite": "lifecycle"}, "GET metadata")

    pids = marked_pids(sid)
    cmds = {pid: proc_cmdline(pid) for pid in pids}
    check(len(pids) >= 2, f"sandbox has a process tree ({len(pids)} marked processes)")
    check(any(c[:3] == ["tail", "-f", "/dev/null"] for c in cmds.values()), "entrypoint runs as a process")
    execd = [p for p, c in cmds.items() if c and "--port-file" in c]
    check(len(execd) == 1, "execd stand-in runs as a process")
    env = proc_env(execd[0])
    workdir = Path(env.get("HOME", ""))
    check(env.get("FOO") == "bar", "create env reaches the sandbox environment")
    check(env.get("OPENSANDBOX_ID") == sid, "OPENSANDBOX_ID is set as Docker sets it")
    check(Path(f"/proc/{execd[0]}/cwd").resolve() == workdir.resolve(), "execd cwd = HOME = private folder")
    if STATE_DIR is not None:
        check(workdir.resolve() == (STATE_DIR / "sandboxes" / sid).resolve(), "private folder under the state dir")
    port = int((workdir / ".execd-port").read_text().strip().rsplit(":", 1)[-1])

    print("endpoints")
    ep = expect("GET", f"/v1/sandboxes/{sid}/endpoints/44772", status=200)
    check(ep == {"endpoint": f"127.0.0.1:{port}/proxy/44772"}, f"execd endpoint in Docker bridge form ({ep['endpoint']})")
    for p in (18080, 8080, 5000):
        ep = expect("GET", f"/v1/sandboxes/{sid}/endpoints/{p}", status=200)
        check(ep["endpoint"] == f"127.0.0.1:{port}/proxy/{p}", f"port {p} -> {ep['endpoint']}")
    ep = expect("GET", f"/v1/sandboxes/{sid}/endpoints/44772?use_server_proxy=true", status=200)
    check(ep["endpoint"] == f"{DOMAIN}/v1/sandboxes/{sid}/proxy/44772", f"server proxy form ({ep['endpoint']})")
    ep = expect("GET", f"/sandboxes/{sid}/endpoints/44772?use_server_proxy=true", status=200)
    check(ep["endpoint"] == f"{DOMAIN}/sandboxes/{sid}/proxy/44772", "server proxy form keeps the mount prefix")
    expect("GET", f"/v1/sandboxes/{sid}/endpoints/0", status=400, code="DOCKER::INVALID_PORT")
    expect("GET", f"/v1/sandboxes/{sid}/endpoints/70000", status=400, code="DOCKER::INVALID_PORT")
    expect("GET", f"/v1/sandboxes/{sid}/endpoints/44772?expires=2000000000", status=400,
           code="SANDBOX::API_NOT_SUPPORTED")

    status, _ = get_url(f"http://127.0.0.1:{port}/ping")
    check(status == 200, "execd answers /ping")
    status, _ = get_url(f"http://127.0.0.1:{port}/proxy/44772/ping")
    check(status == 200, "direct endpoint /proxy/44772/ping answers 200")
    status, _, _ = call("GET", f"/v1/sandboxes/{sid}/proxy/44772/ping", key=None, raw=True)
    check(status == 200, "server proxy /v1/sandboxes/{id}/proxy/44772/ping answers 200 without API key")

    print("diagnostics")
    diag = expect("GET", f"/v1/sandboxes/{sid}/diagnostics/logs?scope=container", status=200)
    check("listening" in diag.get("content", ""), "diagnostics/logs shows the sandbox output")
    diag = expect("GET", f"/v1/sandboxes/{sid}/diagnostics/events?scope=runtime", status=200)
    check("create" in diag.get("content", ""), "diagnostics/events lists the lifecycle events")
    status, text, _ = call("GET", f"/v1/sandboxes/{sid}/diagnostics/inspect", raw=True)
    check(status == 200 and b"Processes:" in text, "diagnostics/inspect lists the processes")
    expect("POST", f"/v1/sandboxes/{sid}/snapshots", {}, status=501, code="SNAPSHOT::NOT_IMPLEMENTED")
    return sid


def execd_post(ep: str, path: str, body: dict, timeout: float = 30):
    req = urllib.request.Request(f"http://{ep}{path}", data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def ws_read_until(ws, needle: bytes, timeout: float = 10) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        frame = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        if isinstance(frame, bytes) and frame[:1] in (b"\x01", b"\x02"):
            seen += frame[1:]
    return seen


def test_pause_resume(sid: str) -> None:
    print("pause / resume (with execd children: a background command and a PTY shell)")
    ep = expect("GET", f"/v1/sandboxes/{sid}/endpoints/44772", status=200)["endpoint"]
    status, body = execd_post(ep, "/command", {"command": "exec sleep 300", "background": True})
    check(status == 200 and b'"init"' in body, "background command started through execd")
    status, body = execd_post(ep, "/pty", {})
    session = json.loads(body)["session_id"]
    check(status == 201 and bool(session), f"PTY session created ({session})")
    # The shell starts on the first attach; attach through the server's reverse proxy.
    with ws_connect(f"ws://{DOMAIN}/v1/sandboxes/{sid}/proxy/44772/pty/{session}/ws", open_timeout=10) as ws:
        first = ws.recv(timeout=10)
        # execd sends what the new shell already printed (its prompt) as a replay
        # frame (0x03) before `connected` when the shell was quicker than the attach.
        if isinstance(first, bytes) and first[:1] == b"\x03":
            first = ws.recv(timeout=10)
        check(isinstance(first, str) and json.loads(first).get("type") == "connected",
              f"PTY WebSocket through the server proxy: {first.strip()!r}")
        ws.send(json.dumps({"type": "stdin", "data": "echo pty-$((40+2))\n"}))
        check(b"pty-42" in ws_read_until(ws, b"pty-42"), "PTY shell answers through the proxied WebSocket")
        pids = marked_pids(sid)
        sleeper = [p for p in pids if proc_cmdline(p)[:2] == ["sleep", "300"]]
        check(len(sleeper) == 1 and os.getpgid(sleeper[0]) == sleeper[0],
              "background command runs in its own process group and is marked")
        shells = [p for p in pids if os.getsid(p) == p and "bash" in " ".join(proc_cmdline(p))]
        check(len(shells) >= 1, "PTY shell runs in its own session and is marked")

        expect("POST", f"/v1/sandboxes/{sid}/pause", status=202)
        pids = marked_pids(sid)
        states = {p: proc_state(p) for p in pids}
        check(len(pids) >= 4 and all(s in ("T", "t") for s in states.values()), f"every process stopped {states}")
        info = expect("GET", f"/v1/sandboxes/{sid}", status=200)
        check((info["status"]["state"], info["status"]["reason"]) == ("Paused", "CONTAINER_PAUSED"), "state Paused")
        expect("POST", f"/v1/sandboxes/{sid}/pause", status=409, code="DOCKER::SANDBOX_NOT_RUNNING")
        listing = expect("GET", f"/v1/sandboxes?state=Paused&metadata={quote('suite=lifecycle')}", status=200)
        check([x["id"] for x in listing["items"]] == [sid], "listed as Paused")
        expect("POST", f"/v1/sandboxes/{sid}/resume", status=202)
        states = {p: proc_state(p) for p in marked_pids(sid)}
        check(all(s not in ("T", "t") for s in states.values()), f"every process continued {states}")
        check(expect("GET", f"/v1/sandboxes/{sid}", status=200)["status"]["state"] == "Running", "state Running again")
        expect("POST", f"/v1/sandboxes/{sid}/resume", status=409, code="DOCKER::SANDBOX_NOT_PAUSED")
        ws.send(json.dumps({"type": "stdin", "data": "echo after-$((1+1))\n"}))
        check(b"after-2" in ws_read_until(ws, b"after-2"), "PTY shell works again after resume")


def test_renew_patch_list(sid: str) -> None:
    print("renew / metadata / list")
    past = iso(datetime.now(timezone.utc) - timedelta(minutes=1))
    expect("POST", f"/v1/sandboxes/{sid}/renew-expiration", {"expiresAt": past}, status=400,
           code="DOCKER::INVALID_EXPIRATION")
    later = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
    got = expect("POST", f"/v1/sandboxes/{sid}/renew-expiration", {"expiresAt": iso(later)}, status=200)
    check(parse_time(got["expiresAt"]) == later, "renew answers the new expiresAt")
    info = expect("GET", f"/v1/sandboxes/{sid}", status=200)
    check(parse_time(info["expiresAt"]) == later, "GET shows the renewed expiresAt")
    expect("POST", "/v1/sandboxes/nope/renew-expiration", {"expiresAt": iso(later)}, status=404,
           code="DOCKER::SANDBOX_NOT_FOUND")

    manual = create({"timeout": None, "metadata": {"team": "beta", "suite": "lifecycle"}})
    check("expiresAt" not in manual, "no timeout -> no expiresAt")
    expect("POST", f"/v1/sandboxes/{manual['id']}/renew-expiration", {"expiresAt": iso(later)}, status=409,
           code="DOCKER::INVALID_EXPIRATION")

    patched = expect("PATCH", f"/v1/sandboxes/{sid}/metadata", {"team": None, "stage": "two"}, status=200)
    check(patched["metadata"] == {"suite": "lifecycle", "stage": "two"}, "merge patch: null deletes, value sets")
    expect("PATCH", f"/v1/sandboxes/{sid}/metadata", {"opensandbox.io/id": "x"}, status=400,
           code="INVALID_METADATA_LABEL")

    listing = expect("GET", f"/v1/sandboxes?metadata={quote('team=beta')}", status=200)
    check([s["id"] for s in listing["items"]] == [manual["id"]], "metadata filter")
    listing = expect("GET", f"/v1/sandboxes?metadata={quote('suite=lifecycle&stage=two')}", status=200)
    check([s["id"] for s in listing["items"]] == [sid], "metadata filter with two keys (AND)")
    listing = expect("GET", f"/v1/sandboxes?state=Paused&metadata={quote('suite=lifecycle')}", status=200)
    check(listing["items"] == [], "state filter")
    listing = expect("GET", f"/v1/sandboxes?state=Running&state=Paused&metadata={quote('suite=lifecycle')}"
                            "&page=1&pageSize=1", status=200)
    pag = listing["pagination"]
    check(len(listing["items"]) == 1 and pag == {"page": 1, "pageSize": 1, "totalItems": 2, "totalPages": 2,
                                                 "hasNextPage": True}, f"pagination {pag}")
    check(listing["items"][0]["id"] == manual["id"], "newest first")
    listing = expect("GET", f"/v1/sandboxes?metadata={quote('suite=lifecycle')}&page=2&pageSize=1", status=200)
    check([s["id"] for s in listing["items"]] == [sid] and not listing["pagination"]["hasNextPage"], "page 2")
    delete(manual["id"])


def delete(sid: str) -> None:
    pids = marked_pids(sid)
    expect("DELETE", f"/v1/sandboxes/{sid}", status=204)
    check(not [p for p in pids if proc_state(p) not in (None, "Z")] and not marked_pids(sid),
          "delete leaves no process")
    if STATE_DIR is not None:
        check(not (STATE_DIR / "sandboxes" / sid).exists(), "delete removes the private folder")
    expect("GET", f"/v1/sandboxes/{sid}", status=404, code="DOCKER::SANDBOX_NOT_FOUND")
    expect("DELETE", f"/v1/sandboxes/{sid}", status=404, code="DOCKER::SANDBOX_NOT_FOUND")
    created.remove(sid)


def test_expiry(sid: str) -> None:
    print("expiry")
    soon = datetime.now(timezone.utc) + timedelta(seconds=2)
    expect("POST", f"/v1/sandboxes/{sid}/renew-expiration", {"expiresAt": iso(soon)}, status=200)
    wait_for(lambda: call("GET", f"/v1/sandboxes/{sid}")[0] == 404, "sandbox is gone after it expires", 15)
    check(not marked_pids(sid), "expiry leaves no process")
    if STATE_DIR is not None:
        check(not (STATE_DIR / "sandboxes" / sid).exists(), "expiry removes the private folder")
    created.remove(sid)


def test_exits() -> None:
    print("execd death / entrypoint exit")
    sid = create()["id"]
    execd = [p for p in marked_pids(sid) if "--port-file" in proc_cmdline(p)]
    os.kill(execd[0], 9)
    info = wait_for(lambda: (lambda r: r[1] if r[1]["status"]["state"] != "Running" else None)(
        call("GET", f"/v1/sandboxes/{sid}")), "sandbox leaves Running when execd dies")
    check((info["status"]["state"], info["status"]["reason"]) == ("Failed", "CONTAINER_EXITED_ERROR"),
          f"execd killed -> Failed ({info['status']['message']})")
    check(info["status"]["message"] == "Sandbox container exited with code 137.", "exit code 137 like a SIGKILL")
    wait_for(lambda: not marked_pids(sid), "the rest of the sandbox is stopped too", 5)
    expect("POST", f"/v1/sandboxes/{sid}/pause", status=409, code="DOCKER::SANDBOX_NOT_RUNNING")
    listing = expect("GET", "/v1/sandboxes?state=Failed", status=200)
    check(sid in [s["id"] for s in listing["items"]], "listed as Failed")
    delete(sid)

    sid = create({"entrypoint": ["sh", "-c", "sleep 1; exit 3"]})["id"]
    info = wait_for(lambda: (lambda r: r[1] if r[1]["status"]["state"] != "Running" else None)(
        call("GET", f"/v1/sandboxes/{sid}")), "entrypoint exit stops the sandbox")
    check(info["status"]["message"] == "Sandbox container exited with code 3." and
          info["status"]["state"] == "Failed", "entrypoint exit 3 -> Failed, code 3")
    delete(sid)

    sid = create({"entrypoint": ["sh", "-c", "sleep 1"]})["id"]
    info = wait_for(lambda: (lambda r: r[1] if r[1]["status"]["state"] != "Running" else None)(
        call("GET", f"/v1/sandboxes/{sid}")), "entrypoint exit 0 stops the sandbox")
    check((info["status"]["state"], info["status"]["reason"]) == ("Terminated", "CONTAINER_EXITED"),
          "entrypoint exit 0 -> Terminated")
    delete(sid)

    resp = create({"entrypoint": ["/nonexistent/entrypoint"]})
    check(resp["status"]["state"] == "Failed" and "code 127" in resp["status"]["message"],
          f"missing entrypoint binary -> Failed with 127 ({resp['status']['message']})")
    delete(resp["id"])


def test_reverse_proxy() -> None:
    print("reverse proxy to a sandbox port (HTTP and WebSocket)")
    port = free_port()
    sid = create({"entrypoint": [sys.executable, str(HERE / "echo_server.py"), str(port)],
                  "env": {"FOO": "proxied"}})["id"]
    wait_for(lambda: get_url(f"http://127.0.0.1:{port}/")[0] == 200 if _port_open(port) else False,
             f"echo server up on {port}")
    status, body, headers = call("GET", f"/v1/sandboxes/{sid}/proxy/{port}/some/path?q=1", key=None, raw=True)
    data = json.loads(body)
    check(status == 200 and data["path"] == "/some/path?q=1", f"server proxy HTTP forwards path and query ({data['path']})")
    check(data["foo"] == "proxied" and data["opensandbox_id"] == sid, "entrypoint got the create env")
    check(Path(data["cwd"]).name == sid and data["home"] == data["cwd"], "entrypoint runs in the private folder")

    ep = expect("GET", f"/v1/sandboxes/{sid}/endpoints/{port}", status=200)["endpoint"]
    status, body = get_url(f"http://{ep}/direct?x=2")
    check(status == 200 and json.loads(body)["path"] == "/direct?x=2", f"direct endpoint {ep} reaches the port")

    with ws_connect(f"ws://{DOMAIN}/v1/sandboxes/{sid}/proxy/{port}/ws", open_timeout=10) as ws:
        ws.send("hello")
        check(ws.recv(timeout=10) == "hello", "server proxy WebSocket text echo")
        ws.send(b"\x00\x01\xff")
        check(ws.recv(timeout=10) == b"\x00\x01\xff", "server proxy WebSocket binary echo")
    try:
        with ws_connect(f"ws://{ep}/ws", open_timeout=10) as ws:
            ws.send("direct")
            check(ws.recv(timeout=10) == "direct", "execd /proxy WebSocket echo (direct endpoint)")
    except Exception as exc:  # noqa: BLE001 - reported as a mismatch with the detail
        raise Mismatch(f"WebSocket through the execd stand-in's /proxy/{port} failed: {exc!r}")

    status, body, _ = call("GET", f"/v1/sandboxes/{sid}/proxy/1/", key=None, raw=True)
    if os.environ.get("TESTBED_PROXY_RESOLVE_INTERNAL", "true") == "true":
        # The server dials the port itself.
        check(status == 502 and json.loads(body)["code"] == "BACKEND_CONNECTION_FAILED",
              "server proxy to a closed port -> 502 BACKEND_CONNECTION_FAILED")
    else:
        # The server goes through execd's /proxy/1, whose reverse proxy answers 502.
        check(status == 502, f"server proxy (via execd) to a closed port -> 502 ({body[:80]!r})")
    delete(sid)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def main() -> int:
    try:
        test_server_basics()
        sid = test_running_sandbox()
        test_pause_resume(sid)
        test_renew_patch_list(sid)
        test_expiry(sid)
        test_exits()
        test_reverse_proxy()
    except Mismatch as exc:
        print(f"MISMATCH: {exc}", file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        return 1
    finally:
        for sid in list(created):
            call("DELETE", f"/v1/sandboxes/{sid}")
    print("lifecycle: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
