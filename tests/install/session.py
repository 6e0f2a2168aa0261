"""What a user does right after `just install`, with no PROVIDER given.

usage: session.py EPP_HOST DATA_DIR

- `epp-host inspect --json`: the installed provider, signed by a trusted key
  (the one installed with it), its provider.json matching it;
- `epp-host run`: epp.hello, sandbox.create, commands.run "echo hi" (stdout
  "hi\\n"), sandbox.kill, then end of input and exit 0;
- `epp-host call sandbox.list`;
- the installed key is trusted for the installed provider only: `run` given
  the same file as a path refuses it;
- with nothing installed, `inspect` says what to do.

The backend comes from the environment (ABX_OPENSANDBOX_BASE_URL, ...).
"""

import json
import os
import subprocess
import sys

TIMEOUT = 120  # seconds for any one step


def fail(what):
    sys.exit(f"install-check: FAILED: {what}")


def check(ok, what):
    if not ok:
        fail(what)


def host_cmd(host, *args, env=None):
    return subprocess.run([host, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)


def inspect(host, provider_dir):
    out = host_cmd(host, "inspect", "--json")
    check(out.returncode == 0, f"inspect exited {out.returncode}: {out.stderr}")
    report = json.loads(out.stdout)
    check(report["file"] == os.path.join(provider_dir, "opensandbox.wasm"), f"inspect read {report['file']}")
    check(report["signature"]["trusted"], f"inspect: {report['signature']['status']}")
    check(report["provider"]["id"] == "opensandbox", f"inspect: provider {report['provider']}")
    manifest = report["manifest_file"]
    check(manifest and manifest["matches"], f"inspect: provider.json {manifest}")
    print(f"install-check: inspect: {report['file']}, {report['signature']['status']}, provider.json matches")


def session(host):
    proc = subprocess.Popen([host, "run"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ids = iter(range(1, 1000))

    def call(method, params):
        rid = next(ids)
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n")
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            if not line:
                fail(f"epp-host run ended before answering {method} (exit {proc.wait(TIMEOUT)})")
            msg = json.loads(line)
            if msg.get("id") == rid:
                break
        check("error" not in msg, f"{method}: {msg.get('error')}")
        return msg["result"]

    hello = call("epp.hello", {"protocol": "EPP/1"})
    check(hello["provider"]["id"] == "opensandbox", f"epp.hello: {hello['provider']}")
    sandbox = call("sandbox.create", {})["sandbox_id"]
    try:
        ran = call("commands.run", {"sandbox_id": sandbox, "cmd": "echo hi"})
        check(ran["stdout"] == "hi\n" and ran["exit_code"] == 0, f"commands.run: {ran}")
    finally:
        call("sandbox.kill", {"sandbox_id": sandbox})
    proc.stdin.close()
    code = proc.wait(TIMEOUT)
    check(code == 0, f"epp-host run exited {code} at end of input")
    print(f"install-check: run: epp.hello, sandbox.create {sandbox}, commands.run stdout {ran['stdout']!r}, sandbox.kill")


def call_once(host):
    out = host_cmd(host, "call", "sandbox.list")
    check(out.returncode == 0, f"call sandbox.list exited {out.returncode}: {out.stderr}")
    listed = json.loads(out.stdout)
    print(f"install-check: call sandbox.list: {len(listed['sandboxes'])} sandboxes")


def refusals(host, provider_dir, empty_dir):
    wasm = os.path.join(provider_dir, "opensandbox.wasm")
    out = subprocess.run([host, "run", wasm], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT)
    check(out.returncode == 2 and "refusing to run" in out.stderr, f"run {wasm} was not refused: {out.stderr}")
    env = dict(os.environ, EPP_HOST_DATA_DIR=empty_dir)
    out = host_cmd(host, "inspect", env=env)
    want = "no PROVIDER given and none installed"
    check(out.returncode == 2 and want in out.stderr, f"inspect with nothing installed: {out.stderr}")
    print("install-check: the installed key is not trusted for a path; with nothing installed: " + want)


def main():
    host, data_dir = sys.argv[1:]
    provider_dir = os.path.join(data_dir, "providers", "opensandbox")
    inspect(host, provider_dir)
    session(host)
    call_once(host)
    refusals(host, provider_dir, os.path.join(data_dir, "empty"))


if __name__ == "__main__":
    main()
