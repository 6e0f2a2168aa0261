"""Local-process runtime for the real ``opensandbox-server`` (testbed only).

Stands in for ``DockerSandboxService``: a sandbox is a private working directory
plus a tree of local processes (the execd stand-in and the user's entrypoint),
run as the current user with no isolation at all. Everything the Docker service
validates is validated here with the server's own validators, and answers use
the Docker error codes and status mapping so that clients see what a Docker
deployment would tell them.

Read together with ``opensandbox_server.services.docker.docker_service`` (1.1.1):
method order, messages and codes follow it.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import math
import os
import ipaddress
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from fastapi import HTTPException, status

from opensandbox_server.api.schema import (
    CreateSandboxRequest,
    CreateSandboxResponse,
    Endpoint,
    ImageSpec,
    ListSandboxesRequest,
    ListSandboxesResponse,
    PaginationInfo,
    PatchSandboxMetadataRequest,
    RenewSandboxExpirationRequest,
    RenewSandboxExpirationResponse,
    Sandbox,
    SandboxStatus,
)
from opensandbox_server.config import AppConfig, get_config
from opensandbox_server.extensions import (
    ACCESS_RENEW_EXTEND_SECONDS_METADATA_KEY,
    extract_extensions_from_mapping,
)
from opensandbox_server.services.constants import (
    RESERVED_LABEL_PREFIX,
    SANDBOX_EXPIRES_AT_LABEL,
    SANDBOX_MANUAL_CLEANUP_LABEL,
    SANDBOX_SNAPSHOT_ID_LABEL,
    SandboxErrorCodes,
)
from opensandbox_server.services.docker.container_ops import DockerContainerOpsMixin
from opensandbox_server.services.docker.docker_diagnostics import DockerDiagnosticsMixin
from opensandbox_server.services.docker.networking import DockerNetworkingMixin
from opensandbox_server.services.extension_service import ExtensionService
from opensandbox_server.services.helpers import matches_filter, split_egress_env
from opensandbox_server.services.sandbox_service import SandboxService
from opensandbox_server.services.snapshot_restore import resolve_sandbox_image_from_request
from opensandbox_server.services.validators import (
    calculate_expiration_or_raise,
    ensure_entrypoint,
    ensure_future_expiration,
    ensure_metadata_labels,
    ensure_platform_valid,
    ensure_timeout_within_limit,
)
from opensandbox_server.services.windows_common import is_windows_platform

import procscan
from procscan import INSTANCE_MARKER, SANDBOX_MARKER

logger = logging.getLogger("opensandbox_testbed.runtime")

EXECD_PORT = 44772
PORT_FILE_NAME = ".execd-port"

# The code-interpreter image (sandboxes/code-interpreter in OpenSandbox): its ENV points
# execd at a Jupyter server (JUPYTER_HOST/JUPYTER_TOKEN, read by execd's flags) that its
# entrypoint script starts on 127.0.0.1:$JUPYTER_PORT. Here the port is a free one per
# sandbox (they share the host's network) and the script is server/code_interpreter.sh.
CODE_INTERPRETER_REPO = "opensandbox/code-interpreter"
CODE_INTERPRETER_ENTRYPOINT = "/opt/code-interpreter/code-interpreter.sh"
CODE_INTERPRETER_LAUNCHER = Path(__file__).resolve().parent / "code_interpreter.sh"

# Variables of the server's environment that reach the sandbox's processes (a
# container starts from its image's environment, not the daemon's; PATH and the
# locale are what keep ordinary commands working on the host).
_PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
               "RUST_LOG", "RUST_BACKTRACE")
_PASSED_ENV_PREFIXES = ("LC_", "EXECD_")
# The Docker runtime never gives execd an access token; neither may a stray variable.
_BLOCKED_ENV = ("EXECD_ACCESS_TOKEN",)


@dataclass
class TestbedSettings:
    state_dir: Path
    execd_bin: Path
    instance: str
    execd_ready_timeout: float = 30.0
    # venv holding jupyter_server and the "python" kernelspec (testbed setup).
    jupyter_venv: Optional[Path] = None


_settings: Optional[TestbedSettings] = None


def configure(settings: TestbedSettings) -> None:
    """Called by run_server before the server modules build the service."""
    global _settings
    _settings = settings


def create_local_sandbox_service(service_type: Optional[str] = None,
                                 config: Optional[AppConfig] = None) -> "LocalProcessSandboxService":
    """Replacement for ``opensandbox_server.services.factory.create_sandbox_service``."""
    if _settings is None:
        raise RuntimeError("local_runtime.configure() was not called before the server was imported")
    return LocalProcessSandboxService(config or get_config(), _settings)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _not_found(sandbox_id: str) -> HTTPException:
    return HTTPException(
        status_code=status.HTTP_404_NOT_FOUND,
        detail={
            "code": SandboxErrorCodes.SANDBOX_NOT_FOUND,
            "message": f"Sandbox {sandbox_id} not found.",
        },
    )


def _bad_request(message: str) -> HTTPException:
    return HTTPException(
        status_code=status.HTTP_400_BAD_REQUEST,
        detail={"code": SandboxErrorCodes.INVALID_PARAMETER, "message": message},
    )


def _image_display_name(uri: str) -> str:
    """What ``docker inspect`` shows as the image's first tag for a pulled ``uri``."""
    if "@" in uri:
        return uri
    last = uri.rsplit("/", 1)[-1]
    return uri if ":" in last else f"{uri}:latest"


def is_code_interpreter(uri: Optional[str]) -> bool:
    """``[registry/]opensandbox/code-interpreter[:tag][@digest]``."""
    if not uri:
        return False
    repo = uri.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    return repo == CODE_INTERPRETER_REPO or repo.endswith("/" + CODE_INTERPRETER_REPO)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rmtree(path: Path) -> None:
    def _onerror(func, p, _exc):  # make read-only folders removable, then retry once
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            os.chmod(p, stat.S_IRWXU)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=_onerror)


class _Relay:
    """Publishes a sandbox's execd port on a second loopback address.

    Docker publishes container ports on ``[docker].publish_host``, by default
    0.0.0.0: every address of the machine. The stand-in listens on 127.0.0.1
    only (nothing else may reach a sandbox without isolation), so when
    ``server.eip`` names another loopback address (``testbed start --eip``), the
    same port is relayed from there, byte for byte, for as long as the sandbox lives.
    """

    def __init__(self, address: str, port: int):
        self.address = address
        self._listener = socket.create_server((address, port))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._port = port
        threading.Thread(target=self._accept, name=f"relay-{address}:{port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self._port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            with self._lock:
                if self._stop.is_set():
                    client.close()
                    upstream.close()
                    return
                self._conns.update((client, upstream))
            threading.Thread(target=self._serve, args=(client, upstream), daemon=True).start()

    def _serve(self, client: socket.socket, upstream: socket.socket) -> None:
        back = threading.Thread(target=self._pump, args=(upstream, client), daemon=True)
        back.start()
        self._pump(client, upstream)
        back.join()
        with self._lock:
            self._conns.difference_update((client, upstream))
        client.close()
        upstream.close()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)  # pass the end of one direction on
        except OSError:
            for s in (src, dst):  # a reset on one side resets the other
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


@dataclass
class _Box:
    id: str
    workdir: Path
    log_path: Path
    labels: dict[str, str]
    image_uri: Optional[str]
    entrypoint: list[str]
    environment: dict[str, str]
    created_at: datetime
    expires_at: Optional[datetime]
    execd: Optional[subprocess.Popen] = None
    main: Optional[subprocess.Popen] = None
    execd_port: Optional[int] = None
    relay: Optional[_Relay] = None
    ready: bool = False
    paused: bool = False
    deleting: bool = False
    exit_code: Optional[int] = None
    exit_source: Optional[str] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    events: list[tuple[datetime, str]] = field(default_factory=list)
    gone: threading.Event = field(default_factory=threading.Event)

    def event(self, text: str) -> None:
        self.events.append((_now(), text))

    @property
    def status_word(self) -> str:
        """The Docker ``State.Status`` this sandbox would have."""
        if self.exit_code is not None:
            return "exited"
        if self.paused:
            return "paused"
        return "running" if self.ready else "created"


class LocalProcessSandboxService(DockerDiagnosticsMixin, SandboxService, ExtensionService):
    """SandboxService that runs each sandbox as a local process tree.

    ``DockerDiagnosticsMixin`` supplies the stable diagnostics wrappers; they call
    this class's ``get_sandbox_logs`` / ``get_sandbox_events``.
    """

    def __init__(self, config: AppConfig, settings: TestbedSettings):
        self.app_config = config
        if config.runtime.type != "docker":
            raise ValueError("The testbed runtime answers as the Docker runtime: keep runtime.type = 'docker'.")
        self._settings = settings
        self._boxes_dir = settings.state_dir / "sandboxes"
        self._logs_dir = settings.state_dir / "logs"
        self._boxes_dir.mkdir(parents=True, exist_ok=True)
        self._logs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._boxes: dict[str, _Box] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._closed = False
        # The Docker mixins read these attributes.
        self.network_mode = (config.docker.network_mode or "bridge").lower()
        logger.info(
            "testbed local-process runtime: execd=%s state=%s", settings.execd_bin, settings.state_dir
        )

    # ------------------------------------------------------------------
    # lookup and mapping
    # ------------------------------------------------------------------

    def _get_box(self, sandbox_id: str) -> _Box:
        # A sandbox being removed stays visible until it is gone, like a container
        # until `docker rm` returns.
        with self._lock:
            box = self._boxes.get(sandbox_id)
            if box is None:
                raise _not_found(sandbox_id)
            return box

    @staticmethod
    def _user_metadata(labels: dict[str, str]) -> Optional[dict[str, str]]:
        user = {k: v for k, v in labels.items() if not k.startswith(RESERVED_LABEL_PREFIX)}
        return user or None

    def _to_sandbox(self, box: _Box) -> Sandbox:
        # Same states, reasons and messages as DockerSandboxService._container_to_sandbox.
        if box.exit_code is not None:
            if box.exit_code == 0:
                state, reason, message = "Terminated", "CONTAINER_EXITED", "Sandbox container exited successfully."
            else:
                state, reason = "Failed", "CONTAINER_EXITED_ERROR"
                message = f"Sandbox container exited with code {box.exit_code}."
        elif box.paused:
            state, reason, message = "Paused", "CONTAINER_PAUSED", "Sandbox container is paused."
        elif box.ready:
            state, reason, message = "Running", "CONTAINER_RUNNING", "Sandbox container is running."
        else:
            state, reason, message = "Pending", "CONTAINER_STARTING", "Sandbox container is starting."

        snapshot_id = box.labels.get(SANDBOX_SNAPSHOT_ID_LABEL)
        image = None if snapshot_id or not box.image_uri else ImageSpec(uri=_image_display_name(box.image_uri))
        return Sandbox(
            id=box.id,
            image=image,
            snapshotId=snapshot_id,
            platform=DockerContainerOpsMixin._platform_from_labels(box.labels),
            status=SandboxStatus(
                state=state,
                reason=reason,
                message=message,
                last_transition_at=box.finished_at or box.created_at,
            ),
            metadata=self._user_metadata(box.labels),
            extensions=extract_extensions_from_mapping(box.labels),
            entrypoint=list(box.entrypoint),
            expiresAt=box.expires_at,
            createdAt=box.created_at,
        )

    # ------------------------------------------------------------------
    # create
    # ------------------------------------------------------------------

    async def create_sandbox(self, request: CreateSandboxRequest) -> CreateSandboxResponse:
        # Checks in the order of DockerSandboxService.create_sandbox.
        if request.lifecycle is not None:
            raise _bad_request("lifecycle hooks are not supported by the Docker provider.")
        if (request.extensions or {}).get("poolRef", "").strip():
            raise HTTPException(
                status_code=status.HTTP_400_BAD_REQUEST,
                detail={
                    "code": "SANDBOX::UNSUPPORTED_POOL_REF",
                    "message": "poolRef is not supported by the Docker provider. "
                               "Use Kubernetes BatchSandbox provider instead.",
                },
            )
        request = await resolve_sandbox_image_from_request(request)
        ensure_entrypoint(request.entrypoint or [])
        ensure_metadata_labels(request.metadata)
        ensure_platform_valid(request.platform)
        ensure_timeout_within_limit(request.timeout, self.app_config.server.max_sandbox_timeout_seconds)
        DockerNetworkingMixin._ensure_secure_access_support(self, request)
        if request.network_policy:
            raise _bad_request(
                "networkPolicy is not supported by the testbed's local-process runtime "
                "(there is no egress sidecar)."
            )
        if request.volumes:
            raise _bad_request("volumes are not supported by the testbed's local-process runtime.")
        if is_windows_platform(request.platform):
            raise _bad_request("Windows sandboxes are not supported by the testbed's local-process runtime.")
        DockerContainerOpsMixin._resolve_resource_limits(self, request)  # validated, not enforced
        try:
            sandbox_env, _egress_env = split_egress_env(request.env)
        except ValueError as e:
            raise _bad_request(str(e)) from e
        if self._closed:
            raise HTTPException(
                status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
                detail={"code": SandboxErrorCodes.CONTAINER_START_FAILED, "message": "Server is shutting down."},
            )

        sandbox_id = self.generate_sandbox_id()
        created_at = _now()
        expires_at = None
        if request.timeout is not None:
            expires_at = calculate_expiration_or_raise(created_at, request.timeout)
        patched = request.model_copy(update={"env": sandbox_env or None})
        return await asyncio.to_thread(self._provision, sandbox_id, patched, created_at, expires_at)

    def _sandbox_environment(self, sandbox_id: str, workdir: Path, docker_env: list[str],
                             image_uri: Optional[str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if (k in _PASSED_ENV or k.startswith(_PASSED_ENV_PREFIXES)) and k not in _BLOCKED_ENV}
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        if is_code_interpreter(image_uri):
            env.update(self._code_interpreter_image_env(env["PATH"]))
        # The container environment the Docker service would set: [docker].sandbox_env,
        # the request's env, OPENSANDBOX_ID (and EXECD_INIT when configured).
        for entry in docker_env:
            key, _, value = entry.partition("=")
            env[key] = value
        env["HOME"] = str(workdir)
        env["PWD"] = str(workdir)
        env[SANDBOX_MARKER] = sandbox_id
        env[INSTANCE_MARKER] = self._settings.instance
        return env

    def _provision(self, sandbox_id: str, request: CreateSandboxRequest,
                   created_at: datetime, expires_at: Optional[datetime]) -> CreateSandboxResponse:
        labels, docker_env = DockerContainerOpsMixin._build_labels_and_env(self, sandbox_id, request, expires_at)
        workdir = self._boxes_dir / sandbox_id
        workdir.mkdir(mode=0o700)
        log_path = self._logs_dir / f"{sandbox_id}.log"
        image_uri = request.image.uri if request.image else None
        env = self._sandbox_environment(sandbox_id, workdir, docker_env, image_uri)
        box = _Box(
            id=sandbox_id,
            workdir=workdir,
            log_path=log_path,
            labels=labels,
            image_uri=image_uri,
            entrypoint=list(request.entrypoint or []),
            environment=env,
            created_at=created_at,
            expires_at=expires_at,
        )
        box.event("create")
        with self._lock:
            self._boxes[sandbox_id] = box

        try:
            self._start_processes(box)
            self._wait_ready(box)
        except BaseException:
            self._destroy(box, event="start failed")
            raise

        if expires_at is not None:
            self._schedule_expiration(sandbox_id, expires_at)
        sandbox = self._to_sandbox(box)
        return CreateSandboxResponse(
            id=sandbox_id,
            status=sandbox.status,
            metadata=request.metadata,
            extensions=extract_extensions_from_mapping(labels),
            platform=sandbox.platform or request.platform,
            expiresAt=expires_at,
            createdAt=created_at,
            entrypoint=request.entrypoint,
        )

    def _start_processes(self, box: _Box) -> None:
        port_file = box.workdir / PORT_FILE_NAME
        with open(box.log_path, "ab", buffering=0) as log:
            popen_kwargs = dict(
                cwd=box.workdir,
                env=box.environment,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
            argv = [str(self._settings.execd_bin), "--listen", "127.0.0.1:0", "--port-file", str(port_file)]
            try:
                box.execd = subprocess.Popen(argv, **popen_kwargs)
            except OSError as exc:
                raise HTTPException(
                    status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
                    detail={
                        "code": SandboxErrorCodes.EXECD_START_FAILED,
                        "message": f"Failed to start execd stand-in {self._settings.execd_bin}: {exc}",
                    },
                ) from exc
            box.started_at = _now()
            box.event(f"start execd pid={box.execd.pid}")
            self._watch(box, box.execd, "execd")

            # The container's main process: bootstrap.sh starts execd, then execs the entrypoint.
            try:
                box.main = subprocess.Popen(self._entrypoint_argv(box), **popen_kwargs)
            except OSError as exc:
                log.write(f"testbed: cannot run entrypoint {box.entrypoint!r}: {exc}\n".encode())
                # What the shell in bootstrap.sh would exit with.
                code = 126 if isinstance(exc, PermissionError) else 127
                self._on_exit(box, "entrypoint", code)
                return
            box.event(f"start entrypoint pid={box.main.pid}")
            self._watch(box, box.main, "entrypoint")

    def _code_interpreter_image_env(self, path: str) -> dict[str, str]:
        """The image's ENV: where execd finds Jupyter, and `jupyter`/`python` on PATH."""
        port = _free_port()
        env = {
            "JUPYTER_HOST": f"http://127.0.0.1:{port}",
            "JUPYTER_PORT": str(port),
            "JUPYTER_TOKEN": os.urandom(12).hex(),
        }
        if self._settings.jupyter_venv is not None:
            env["PATH"] = f"{self._settings.jupyter_venv / 'bin'}:{path}"
        return env

    def _entrypoint_argv(self, box: _Box) -> list[str]:
        """The image's own entrypoint script becomes the testbed's Jupyter launcher; any
        other entrypoint runs as given (then no Jupyter runs, as in the image)."""
        argv = list(box.entrypoint)
        if is_code_interpreter(box.image_uri) and argv and argv[0] == CODE_INTERPRETER_ENTRYPOINT:
            return [str(CODE_INTERPRETER_LAUNCHER), *argv[1:]]
        return argv

    def _watch(self, box: _Box, proc: subprocess.Popen, role: str) -> None:
        def _wait() -> None:
            code = proc.wait()
            self._on_exit(box, role, code)

        threading.Thread(target=_wait, name=f"watch-{role}-{box.id[:8]}", daemon=True).start()

    def _on_exit(self, box: _Box, role: str, code: int) -> None:
        """The first of execd / entrypoint to end ends the sandbox, like a container's exit."""
        with self._lock:
            if box.deleting or box.exit_code is not None:
                return
            box.exit_code = 128 - code if code < 0 else code  # killed by signal N: 128+N, as Docker reports
            box.exit_source = role
            box.finished_at = _now()
            box.paused = False
            box.event(f"die ({role} exited, code {box.exit_code})")
        logger.warning("sandbox=%s | %s exited with code %s; sandbox stopped", box.id, role, box.exit_code)
        self._kill_processes(box)

    def _read_port_file(self, box: _Box) -> Optional[int]:
        try:
            text = (box.workdir / PORT_FILE_NAME).read_text().strip()
        except OSError:
            return None
        text = text.rsplit(":", 1)[-1]
        return int(text) if text.isdigit() and 0 < int(text) < 65536 else None

    @staticmethod
    def _ping(port: int) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
        try:
            conn.request("GET", "/ping")
            resp = conn.getresponse()
            resp.read()
            return 200 <= resp.status < 300
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def _log_tail(self, box: _Box, lines: int = 20) -> str:
        try:
            return "\n".join(box.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _wait_ready(self, box: _Box) -> None:
        deadline = time.monotonic() + self._settings.execd_ready_timeout
        while True:
            if box.exit_code is not None and box.exit_source != "execd":
                # The entrypoint ended first: the sandbox has stopped, as a container whose
                # main process exits. Report its state rather than an execd failure.
                return
            if box.execd is None or box.execd.poll() is not None or box.exit_source == "execd":
                code = box.execd.returncode if box.execd is not None else None
                raise self._execd_failure(box, f"execd stand-in exited with code {code} before answering /ping")
            if box.execd_port is None:
                box.execd_port = self._read_port_file(box)
            if box.execd_port is not None and self._ping(box.execd_port):
                self._publish(box)
                with self._lock:
                    if box.exit_code is None:
                        box.ready = True
                        box.event(f"ready execd=127.0.0.1:{box.execd_port}")
                return
            if time.monotonic() > deadline:
                raise self._execd_failure(
                    box, f"execd stand-in did not answer /ping within {self._settings.execd_ready_timeout:.0f}s"
                )
            time.sleep(0.02)

    def _eip_relay_address(self) -> Optional[str]:
        """``server.eip`` when it is a loopback address other than 127.0.0.1."""
        eip = (self.app_config.server.eip or "").strip()
        try:
            address = ipaddress.IPv4Address(eip)
        except ValueError:
            return None
        return eip if address.is_loopback and eip != "127.0.0.1" else None

    def _publish(self, box: _Box) -> None:
        """execd's port on the eip too, as Docker publishes it on every address."""
        address = self._eip_relay_address()
        if address is None or box.relay is not None:
            return
        try:
            box.relay = _Relay(address, box.execd_port)
        except OSError as exc:
            raise self._execd_failure(box, f"cannot publish execd on {address}:{box.execd_port}: {exc}")
        box.event(f"publish execd on {address}:{box.execd_port}")

    def _execd_failure(self, box: _Box, message: str) -> HTTPException:
        tail = self._log_tail(box)
        logger.error("sandbox=%s | %s\n%s", box.id, message, tail)
        return HTTPException(
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            detail={
                "code": SandboxErrorCodes.EXECD_START_FAILED,
                "message": f"{message}. Log tail: {tail[-1500:]}" if tail else message,
            },
        )

    # ------------------------------------------------------------------
    # process control
    # ------------------------------------------------------------------

    def _own_groups(self, box: _Box) -> list[int]:
        # Only while the leader is unreaped can its pid not be reused.
        return [p.pid for p in (box.execd, box.main) if p is not None and p.poll() is None]

    def _signal_groups(self, box: _Box, sig: int) -> None:
        for pgid in self._own_groups(box):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _kill_processes(self, box: _Box) -> None:
        if box.relay is not None:
            box.relay.close()
        self._signal_groups(box, signal.SIGKILL)
        procscan.kill_all(SANDBOX_MARKER, box.id)
        for proc in (box.execd, box.main):
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    logger.warning("sandbox=%s | pid %s did not die", box.id, proc.pid)

    def _destroy(self, box: _Box, event: str) -> None:
        with self._lock:
            already = box.deleting
            box.deleting = True
            if not already:
                box.event(event)
                timer = self._timers.pop(box.id, None)
        if already:  # a concurrent delete / expiry does the work
            box.gone.wait(timeout=30)
            return
        try:
            if timer is not None:
                timer.cancel()
            self._kill_processes(box)
            _rmtree(box.workdir)
        finally:
            with self._lock:
                self._boxes.pop(box.id, None)
            box.gone.set()
        logger.info("sandbox=%s | %s; processes killed, %s removed", box.id, event, box.workdir)

    def close(self) -> None:
        """Server shutdown: nothing of any sandbox may outlive the server."""
        with self._lock:
            self._closed = True
            boxes = list(self._boxes.values())
        for box in boxes:
            try:
                self._destroy(box, "server shutdown")
            except Exception:  # noqa: BLE001 - keep cleaning the others
                logger.exception("sandbox=%s | cleanup at shutdown failed", box.id)
        procscan.kill_all(INSTANCE_MARKER, self._settings.instance)

    # ------------------------------------------------------------------
    # expiration (as DockerSandboxService: a timer per sandbox)
    # ------------------------------------------------------------------

    def _schedule_expiration(self, sandbox_id: str, expires_at: datetime) -> None:
        delay = max(0.0, (expires_at - _now()).total_seconds())
        timer = threading.Timer(delay, self._expire, args=(sandbox_id,))
        timer.daemon = True
        with self._lock:
            existing = self._timers.pop(sandbox_id, None)
            if existing is not None:
                existing.cancel()
            self._timers[sandbox_id] = timer
        timer.start()

    def _expire(self, sandbox_id: str) -> None:
        with self._lock:
            box = self._boxes.get(sandbox_id)
            if box is None or box.deleting:
                return
            if box.expires_at is not None and box.expires_at > _now():
                expires_at = box.expires_at
            else:
                expires_at = None
        if expires_at is not None:  # renewed meanwhile
            self._schedule_expiration(sandbox_id, expires_at)
            return
        logger.info("sandbox=%s | expired; removing", sandbox_id)
        self._destroy(box, "expired")

    # ------------------------------------------------------------------
    # SandboxService API
    # ------------------------------------------------------------------

    def list_sandboxes(self, request: ListSandboxesRequest) -> ListSandboxesResponse:
        with self._lock:
            boxes = list(self._boxes.values())
        sandboxes = [s for s in (self._to_sandbox(b) for b in boxes) if matches_filter(s, request.filter)]
        sandboxes.sort(key=lambda s: s.created_at or datetime.min, reverse=True)
        if request.pagination:
            page, page_size = request.pagination.page, request.pagination.page_size
        else:
            page, page_size = 1, 20
        total_items = len(sandboxes)
        total_pages = math.ceil(total_items / page_size) if total_items else 0
        start = (page - 1) * page_size
        return ListSandboxesResponse(
            items=sandboxes[start:start + page_size],
            pagination=PaginationInfo(
                page=page,
                page_size=page_size,
                total_items=total_items,
                total_pages=total_pages,
                has_next_page=page < total_pages,
            ),
        )

    def get_sandbox(self, sandbox_id: str) -> Sandbox:
        return self._to_sandbox(self._get_box(sandbox_id))

    def delete_sandbox(self, sandbox_id: str) -> None:
        box = self._get_box(sandbox_id)
        self._destroy(box, "destroy")

    def pause_sandbox(self, sandbox_id: str) -> None:
        box = self._get_box(sandbox_id)
        with self._lock:
            if box.exit_code is not None or box.paused or not box.ready:
                raise HTTPException(
                    status_code=status.HTTP_409_CONFLICT,
                    detail={
                        "code": SandboxErrorCodes.SANDBOX_NOT_RUNNING,
                        "message": "Sandbox is not in a running state.",
                    },
                )
            # Freeze execd's group first so it starts nothing new, then every marked process.
            self._signal_groups(box, signal.SIGSTOP)
            pids = procscan.stop_all(SANDBOX_MARKER, box.id)
            box.paused = True
            box.event(f"pause ({len(pids)} processes stopped)")

    def resume_sandbox(self, sandbox_id: str) -> None:
        box = self._get_box(sandbox_id)
        with self._lock:
            if not box.paused:
                raise HTTPException(
                    status_code=status.HTTP_409_CONFLICT,
                    detail={
                        "code": SandboxErrorCodes.SANDBOX_NOT_PAUSED,
                        "message": "Sandbox is not in a paused state.",
                    },
                )
            pids = procscan.continue_all(SANDBOX_MARKER, box.id)
            self._signal_groups(box, signal.SIGCONT)
            box.paused = False
            box.event(f"unpause ({len(pids)} processes continued)")

    def get_access_renew_extend_seconds(self, sandbox_id: str) -> Optional[int]:
        try:
            box = self._get_box(sandbox_id)
        except HTTPException:
            return None
        raw = box.labels.get(ACCESS_RENEW_EXTEND_SECONDS_METADATA_KEY)
        if raw is None or not str(raw).strip():
            return None
        try:
            return int(str(raw).strip())
        except ValueError:
            return None

    def renew_expiration(self, sandbox_id: str,
                         request: RenewSandboxExpirationRequest) -> RenewSandboxExpirationResponse:
        box = self._get_box(sandbox_id)
        new_expiration = ensure_future_expiration(request.expires_at)
        if box.labels.get(SANDBOX_MANUAL_CLEANUP_LABEL, "").lower() == "true":
            raise HTTPException(
                status_code=status.HTTP_409_CONFLICT,
                detail={
                    "code": SandboxErrorCodes.INVALID_EXPIRATION,
                    "message": f"Sandbox {sandbox_id} does not have automatic expiration enabled.",
                },
            )
        if box.expires_at is None:
            raise HTTPException(
                status_code=status.HTTP_409_CONFLICT,
                detail={
                    "code": SandboxErrorCodes.INVALID_EXPIRATION,
                    "message": f"Sandbox {sandbox_id} is missing expiration metadata and cannot be renewed safely.",
                },
            )
        with self._lock:
            box.expires_at = new_expiration
            box.labels[SANDBOX_EXPIRES_AT_LABEL] = new_expiration.isoformat()
            box.event(f"renew expiration to {new_expiration.isoformat()}")
        self._schedule_expiration(sandbox_id, new_expiration)
        return RenewSandboxExpirationResponse(expires_at=new_expiration)

    def patch_sandbox_metadata(self, sandbox_id: str, patch: PatchSandboxMetadataRequest) -> Sandbox:
        box = self._get_box(sandbox_id)
        with self._lock:
            box.labels = self._apply_metadata_patch(box.labels, patch)
        return self._to_sandbox(box)

    def get_endpoint(self, sandbox_id: str, port: int, resolve_internal: bool = False,
                     expires: Optional[int] = None, use_proxy_host: bool = False) -> Endpoint:
        if expires is not None:
            raise HTTPException(
                status_code=status.HTTP_400_BAD_REQUEST,
                detail={
                    "code": SandboxErrorCodes.API_NOT_SUPPORTED,
                    "message": (
                        "Signed routes (expires parameter) are not supported when "
                        "runtime.type='docker'. Use the Kubernetes runtime for signed routes."
                    ),
                },
            )
        try:
            self.validate_port(port)
        except ValueError as exc:
            raise HTTPException(
                status_code=status.HTTP_400_BAD_REQUEST,
                detail={"code": SandboxErrorCodes.INVALID_PORT, "message": str(exc)},
            ) from exc

        box = self._get_box(sandbox_id)
        if box.execd_port is None:
            raise HTTPException(
                status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
                detail={
                    "code": SandboxErrorCodes.NETWORK_MODE_ENDPOINT_UNAVAILABLE,
                    "message": "Missing host port mapping for execd proxy port 44772.",
                },
            )
        if resolve_internal:
            # The "container IP" form used by the server's own reverse proxy. There is
            # no network namespace: the sandbox's port P is the host's loopback port P,
            # except execd, which listens on its own free port instead of 44772.
            target = box.execd_port if port == EXECD_PORT else port
            return Endpoint(endpoint=f"127.0.0.1:{target}")
        # Docker bridge form: the host-mapped execd port, then execd's /proxy/{port}.
        # use_proxy_host picks the server-local host over server.eip, as in Docker.
        host = self._proxy_host() if use_proxy_host else self._public_host()
        return Endpoint(endpoint=f"{host}:{box.execd_port}/proxy/{port}")

    def _public_host(self) -> str:
        eip = (self.app_config.server.eip or "").strip()
        return eip or self._proxy_host()

    def _proxy_host(self) -> str:
        host = (self.app_config.server.host or "").strip()
        return "127.0.0.1" if host in {"", "0.0.0.0", "::", "localhost"} else host

    # ------------------------------------------------------------------
    # diagnostics (the stable wrappers come from DockerDiagnosticsMixin)
    # ------------------------------------------------------------------

    def get_sandbox_logs(self, sandbox_id: str, tail: int = 100, since: str | None = None,
                         container: str | None = None) -> str:
        # Combined stdout/stderr of execd and the entrypoint, as `docker logs` of the
        # container would show (without per-line timestamps; `since` is ignored).
        box = self._get_box(sandbox_id)
        output = self._log_tail(box, max(tail, 0)) if tail else ""
        return output or "(no logs)"

    def get_sandbox_inspect(self, sandbox_id: str) -> str:
        box = self._get_box(sandbox_id)
        pids = procscan.find_pids(SANDBOX_MARKER, box.id)
        lines = [
            "Container ID:   (testbed local-process sandbox)",
            f"Name:           sandbox-{box.id}",
            f"Image:          {box.image_uri or 'N/A'} (not used: processes run on the host)",
            f"Status:         {box.status_word}",
            f"Running:        {box.exit_code is None and box.ready}",
            f"Paused:         {box.paused}",
            f"Exit Code:      {box.exit_code if box.exit_code is not None else 0}",
            f"Started At:     {box.started_at.isoformat() if box.started_at else 'N/A'}",
            f"Finished At:    {box.finished_at.isoformat() if box.finished_at else 'N/A'}",
            f"Working Dir:    {box.workdir}",
            f"execd:          127.0.0.1:{box.execd_port}" if box.execd_port else "execd:          (no port)",
            "",
            "Processes:",
        ]
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            lines.append(f"  {pid} [{procscan.process_state(pid)}] {cmd.strip()}")
        lines.append("")
        lines.append("Labels:")
        for k, v in sorted(box.labels.items()):
            lines.append(f"  {k}={v}")
        lines.append("")
        lines.append("Environment:")
        for key, value in sorted(box.environment.items()):
            masked = any(s in key.upper() for s in ("SECRET", "TOKEN", "PASSWORD", "KEY"))
            lines.append(f"  {key}={'***' if masked else value}")
        return "\n".join(lines)

    def get_sandbox_events(self, sandbox_id: str, limit: int = 50) -> str:
        box = self._get_box(sandbox_id)
        lines = [f"Container:  sandbox-{box.id}", f"Status:     {box.status_word}"]
        for when, text in box.events[-limit:]:
            lines.append(f"Event:      {when.isoformat()} {text}")
        return "\n".join(lines)
