"""Run the real opensandbox-server 1.1.1 with the testbed's local-process runtime.

Writes the server's TOML config into the state directory, applies the three
patch points (see testbed-facts.md) *before* ``opensandbox_server.main`` is
imported, and serves ``opensandbox_server.main:app`` with uvicorn. Everything
else (routes, validation, auth, proxy, error bodies, sqlite store) is the
unmodified server.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import procscan  # noqa: E402

PINNED_SERVER_VERSION = "1.1.1"


def _toml_str(value: str) -> str:
    # JSON string escaping is valid TOML basic-string escaping for these values.
    return json.dumps(value)


def write_config(path: Path, *, host: str, port: int, api_key: str | None, state_dir: Path,
                 log_level: str, resolve_internal: bool = True, eip: str | None = None) -> None:
    lines = [
        "# Written by tests/testbed/server/run_server.py; regenerated at every start.",
        "[server]",
        f"host = {_toml_str(host)}",
        f"port = {port}",
        "max_sandbox_timeout_seconds = 86400",
    ]
    if eip:
        # The host of every endpoint the server hands out (Docker: the public address).
        lines.append(f"eip = {_toml_str(eip)}")
    if api_key:
        lines.append(f"api_key = {_toml_str(api_key)}")
    lines += [
        "",
        "[log]",
        f"level = {_toml_str(log_level)}",
        "",
        "[runtime]",
        # Must stay "docker": the local runtime answers as the Docker backend does.
        'type = "docker"',
        'execd_image = "testbed/execd-standin:local"',
        "",
        "[docker]",
        'network_mode = "bridge"',
        f"publish_host = {_toml_str(host)}",
        "",
        "[proxy]",
        # true (Docker's default): the server's reverse proxy asks the runtime for the
        # internal endpoint (the "container IP" form, 127.0.0.1:<port>); false: for the
        # host-mapped form through execd's /proxy/<port> (use_proxy_host).
        f"resolve_internal = {'true' if resolve_internal else 'false'}",
        "",
        "[store]",
        'type = "sqlite"',
        f"path = {_toml_str(str(state_dir / 'opensandbox.db'))}",
        "",
        "[ingress]",
        'mode = "direct"',
        "",
        "[renew_intent]",
        "enabled = false",
        "",
    ]
    path.write_text("\n".join(lines))


def apply_patches(settings) -> None:
    """The three patch points; must run before opensandbox_server.main is imported."""
    import local_runtime

    local_runtime.configure(settings)

    # 1. api.lifecycle calls create_sandbox_service() at import, by name from the factory module.
    import opensandbox_server.services.factory as factory

    factory.create_sandbox_service = local_runtime.create_local_sandbox_service

    # 2. No Docker snapshot runtime: snapshots answer 501 (NoopSnapshotRuntime).
    import opensandbox_server.services.snapshot_service as snapshot_service
    from opensandbox_server.services.snapshot_runtime import NoopSnapshotRuntime

    snapshot_service.create_snapshot_runtime = lambda *args, **kwargs: NoopSnapshotRuntime()

    # 3. main's lifespan calls docker.from_env() when runtime.type == "docker".
    import docker

    docker.from_env = lambda *args, **kwargs: None


def _announce_when_healthy(server, host: str, port: int, stop: threading.Event) -> None:
    # server.started is set once uvicorn has bound the socket and run the lifespan
    # startup: only then can /health be ours and not another process's on that port.
    url = f"http://{host}:{port}/health"
    while not stop.is_set():
        if server.started:
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        print(f"opensandbox testbed: ready at http://{host}:{port}", flush=True)
                        return
            except OSError:
                pass
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--execd", required=True, help="path of the execd stand-in binary")
    parser.add_argument("--instance", required=True, help="token marking every sandbox process of this run")
    key = parser.add_mutually_exclusive_group(required=True)
    key.add_argument("--api-key")
    key.add_argument("--no-api-key", action="store_true")
    parser.add_argument("--log-level", default=os.environ.get("TESTBED_LOG_LEVEL", "INFO"))
    parser.add_argument("--execd-ready-timeout", type=float, default=30.0)
    parser.add_argument("--jupyter-venv", help="venv with jupyter_server and the Python kernel "
                        "(code-interpreter sandboxes); without it their entrypoint cannot start")
    parser.add_argument("--eip", help="[server] eip: the host of the endpoints the server hands out "
                        "(a loopback address other than --host: execd's port is published there too)")
    parser.add_argument("--proxy-resolve-internal", choices=["true", "false"], default="true",
                        help="[proxy] resolve_internal of the server config (default true, as Docker's)")
    args = parser.parse_args()

    from importlib.metadata import version

    installed = version("opensandbox-server")
    if installed != PINNED_SERVER_VERSION:
        print(f"testbed: opensandbox-server {installed} installed, {PINNED_SERVER_VERSION} required "
              "(the runtime relies on its internals); run `testbed setup`", file=sys.stderr)
        return 2

    state_dir = Path(args.state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    execd = Path(args.execd).resolve()
    if not os.access(execd, os.X_OK):
        print(f"testbed: execd stand-in {execd} is missing or not executable "
              "(build it with `cargo build -p execd-standin`)", file=sys.stderr)
        return 2

    config_path = state_dir / "server.toml"
    write_config(config_path, host=args.host, port=args.port, api_key=args.api_key,
                 state_dir=state_dir, log_level=args.log_level,
                 resolve_internal=args.proxy_resolve_internal == "true", eip=args.eip)
    os.environ["SANDBOX_CONFIG_PATH"] = str(config_path)
    # The server reads its key from this variable over the config file: the flag decides.
    os.environ.pop("OPENSANDBOX_SERVER_API_KEY", None)
    if args.no_api_key:
        os.environ["OPENSANDBOX_INSECURE_SERVER"] = "YES"
    else:
        os.environ.pop("OPENSANDBOX_INSECURE_SERVER", None)

    import local_runtime

    settings = local_runtime.TestbedSettings(
        state_dir=state_dir,
        execd_bin=execd,
        instance=args.instance,
        execd_ready_timeout=args.execd_ready_timeout,
        jupyter_venv=Path(args.jupyter_venv).resolve() if args.jupyter_venv else None,
    )
    apply_patches(settings)

    # Last net: whatever happens to the server, no sandbox process outlives it.
    atexit.register(procscan.kill_all, procscan.INSTANCE_MARKER, args.instance)

    try:
        return serve(config_path, args.host, args.port, extra_loggers=("opensandbox_testbed",))
    finally:
        procscan.kill_all(procscan.INSTANCE_MARKER, args.instance)


def serve(config_path: Path, host: str, port: int, extra_loggers: tuple[str, ...] = ()) -> int:
    """Serves ``opensandbox_server.main:app`` with the config at `config_path`
    as the server's own CLI would (its uvicorn settings, graceful shutdown cut
    to 5 s), printing ``ready at`` once ``/health`` answers; 3 when it did not
    start. `extra_loggers` are routed like the server's own logger."""
    from opensandbox_server.config import load_config
    from opensandbox_server.logging_config import configure_logging
    import uvicorn

    app_config = load_config(config_path)
    log_config = configure_logging(app_config.log)
    for name in extra_loggers:
        log_config["loggers"][name] = dict(log_config["loggers"]["opensandbox_server"])
    server_cfg = app_config.server

    config = uvicorn.Config(
        "opensandbox_server.main:app",
        host=server_cfg.host,
        port=server_cfg.port,
        log_config=log_config,
        timeout_keep_alive=server_cfg.timeout_keep_alive,
        limit_concurrency=server_cfg.limit_concurrency,
        backlog=server_cfg.backlog,
        loop=server_cfg.loop,
        http=server_cfg.http,
        date_header=False,
        timeout_graceful_shutdown=min(server_cfg.timeout_graceful_shutdown or 5, 5),
    )
    server = uvicorn.Server(config)
    stop = threading.Event()
    threading.Thread(target=_announce_when_healthy, args=(server, host, port, stop),
                     daemon=True).start()
    try:
        server.run()
    finally:
        stop.set()
    if not server.started:
        print(f"testbed: the server did not start (is {host}:{port} free?)", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
