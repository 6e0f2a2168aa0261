"""Run the real, unpatched opensandbox-server 1.1.1 on the testbed's Docker engine.

Writes the server's TOML config into the state directory (runtime.type = "docker",
every connection on loopback), checks that every image the config names or the
tests use is in the engine (a missing one would make the server pull it), and
serves ``opensandbox_server.main:app`` with uvicorn, printing
``ready at http://HOST:PORT`` once ``/health`` answers. Nothing of the server is
replaced: this is its own Docker runtime, snapshot runtime and store.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "server"))

from run_server import PINNED_SERVER_VERSION, _toml_str, serve  # noqa: E402


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(_toml_str(v) for v in values) + "]"


def write_config(path: Path, *, host: str, port: int, api_key: str | None, state_dir: Path,
                 log_level: str, execd_image: str, egress_image: str, binds: list[str],
                 allowed_host_paths: list[str]) -> None:
    lines = [
        "# Written by tests/testbed/docker/run_server.py; regenerated at every start.",
        "[server]",
        f"host = {_toml_str(host)}",
        f"port = {port}",
        "max_sandbox_timeout_seconds = 86400",
    ]
    if api_key:
        lines.append(f"api_key = {_toml_str(api_key)}")
    lines += [
        "",
        "[log]",
        f"level = {_toml_str(log_level)}",
        "",
        "[runtime]",
        'type = "docker"',
        f"execd_image = {_toml_str(execd_image)}",
        "",
        "[docker]",
        'network_mode = "bridge"',
        # Sandbox ports are published on loopback only.
        f"publish_host = {_toml_str(host)}",
        f"sandbox_binds = {_toml_list(binds)}",
        "",
        "[proxy]",
        # The server's reverse proxy goes to the host-mapped port on loopback
        # (through execd's /proxy/<port>), never to a container address.
        "resolve_internal = false",
        "",
        "[storage]",
        f"allowed_host_paths = {_toml_list(allowed_host_paths)}",
        "",
        "[egress]",
        f"image = {_toml_str(egress_image)}",
        "readiness_timeout_seconds = 15",
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


def check_images(docker_host: str, images: list[str]) -> list[str]:
    """The images of `images` the engine does not have."""
    import docker
    from docker.errors import ImageNotFound

    client = docker.DockerClient(base_url=docker_host, timeout=30)
    try:
        client.ping()
        missing = []
        for image in images:
            try:
                client.images.get(image)
            except ImageNotFound:
                missing.append(image)
        return missing
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--docker-host", required=True, help="the engine, unix://SOCKET")
    parser.add_argument("--execd-image", required=True)
    parser.add_argument("--egress-image", required=True)
    parser.add_argument("--bind", action="append", default=[], help="one of [docker] sandbox_binds")
    parser.add_argument("--allowed-host-path", action="append", default=[],
                        help="one of [storage] allowed_host_paths")
    parser.add_argument("--image", action="append", default=[],
                        help="an image the tests use: must be in the engine before the server starts")
    key = parser.add_mutually_exclusive_group(required=True)
    key.add_argument("--api-key")
    key.add_argument("--no-api-key", action="store_true")
    parser.add_argument("--log-level", default=os.environ.get("TESTBED_LOG_LEVEL", "INFO"))
    args = parser.parse_args()

    from importlib.metadata import version

    installed = version("opensandbox-server")
    if installed != PINNED_SERVER_VERSION:
        print(f"testbed: opensandbox-server {installed} installed, {PINNED_SERVER_VERSION} required; "
              "run `testbed setup`", file=sys.stderr)
        return 2

    # Before anything of the server runs: it pulls an image it does not find.
    images = [args.execd_image, args.egress_image, *args.image]
    missing = check_images(args.docker_host, images)
    if missing:
        print(f"testbed: image(s) {', '.join(missing)} missing from the testbed's engine "
              f"({args.docker_host}); the server would try to pull them, which the testbed never "
              "lets it do. They are built by tests/testbed/docker/engine.sh (engine_build_images).",
              file=sys.stderr)
        return 2

    state_dir = Path(args.state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    config_path = state_dir / "server.toml"
    write_config(config_path, host=args.host, port=args.port, api_key=args.api_key,
                 state_dir=state_dir, log_level=args.log_level, execd_image=args.execd_image,
                 egress_image=args.egress_image, binds=args.bind,
                 allowed_host_paths=args.allowed_host_path)
    os.environ["SANDBOX_CONFIG_PATH"] = str(config_path)
    os.environ.pop("OPENSANDBOX_SERVER_API_KEY", None)
    if args.no_api_key:
        os.environ["OPENSANDBOX_INSECURE_SERVER"] = "YES"
    else:
        os.environ.pop("OPENSANDBOX_INSECURE_SERVER", None)
    # docker.from_env() is how the server finds its engine: this one, in plain text.
    os.environ["DOCKER_HOST"] = args.docker_host
    for var in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT", "DOCKER_CONFIG"):
        os.environ.pop(var, None)
    # Its metadata store is ~/.opensandbox/metadata: inside the state folder.
    home = state_dir / "home"
    home.mkdir(exist_ok=True)
    os.environ["HOME"] = str(home)

    return serve(config_path, args.host, args.port)

if __name__ == "__main__":
    sys.exit(main())
