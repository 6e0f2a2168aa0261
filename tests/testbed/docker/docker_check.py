"""Raw-HTTP checks of the Docker tier: what the server does with a real engine.

For `testbed check --docker` (in place of conformance/lifecycle_check.py, which
looks at the local runtime's processes): each sandbox is a container of the
testbed's engine (looked at through the Docker SDK); execd runs commands as root
and as uid 1000; pause is `docker pause`; a snapshot is a `docker commit` a new
sandbox starts from, with the file written before; a host-path volume is a bind
under [storage] allowed_host_paths and a path outside is refused, a named volume is
shared; a networkPolicy starts the egress stand-in sidecar with the policy, and the
server's /networkpolicy reads it back; deleting removes it all; nothing arriving on
the engine's bridge is forwarded (its forwarding off, its routing rule; with the host's
ip_forward 0 and 1), the host's own services are reachable at the bridge's address,
which stays the same as containers come and go.

Environment: OPEN_SANDBOX_DOMAIN, OPEN_SANDBOX_API_KEY, DOCKER_HOST (the engine),
TESTBED_DOCKER_VOLUMES (the allowed host folder). Run with the server venv's
Python (it has the docker SDK). Each part stops at its first mismatch and the next
part runs; it exits non-zero when any part had one (each is printed).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import docker
from docker.errors import ImageNotFound, NotFound

DOMAIN = os.environ.get("OPEN_SANDBOX_DOMAIN", "127.0.0.1:8080")
API_KEY = os.environ.get("OPEN_SANDBOX_API_KEY", "")
VOLUMES = Path(os.environ["TESTBED_DOCKER_VOLUMES"])
BASE = f"http://{DOMAIN}/v1"
IMAGE = "python:3.12-slim"
ENGINE = docker.DockerClient(base_url=os.environ["DOCKER_HOST"], timeout=60)
created: list[str] = []


class Mismatch(AssertionError):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Mismatch(what)
    print(f"  ok  {what}", flush=True)


def call(method: str, path: str, body=None, timeout: float = 120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if API_KEY:
        req.add_header("OPEN-SANDBOX-API-KEY", API_KEY)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, payload = err.code, err.read()
    return status, (json.loads(payload) if payload else None)


def create(**extra) -> str:
    body = {"image": {"uri": IMAGE}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600,
            "resourceLimits": {}, **extra}
    status, resp = call("POST", "/sandboxes", body)
    check(status == 202, f"create {sorted(extra) or 'plain'}: 202 ({status} {resp})")
    created.append(resp["id"])
    return resp["id"]


def container(sandbox_id: str, prefix: str = "sandbox-"):
    return ENGINE.containers.get(f"{prefix}{sandbox_id}")


def run_in(sandbox_id: str, cmd: str) -> str:
    code, out = container(sandbox_id).exec_run(["sh", "-c", cmd])
    if code != 0:
        raise Mismatch(f"`{cmd}` exited {code}: {out!r}")
    return out.decode()


def execd_ready(endpoint: str, what: str, within: float = 30) -> None:
    """execd answers /ping at `endpoint` within `within` s. The server answers a create
    once the container started, not once execd listens in it, so a client (the SDKs,
    the provider) asks /ping until it answers; until then docker-proxy resets the
    connection it cannot pass on."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(f"http://{endpoint}/ping", timeout=10) as resp:
                check(resp.status == 200, f"{what} ({resp.status})")
                return
        except (ConnectionError, urllib.error.URLError) as e:
            if time.monotonic() >= deadline:
                raise Mismatch(f"{what}: no answer to /ping within {within:.0f} s ({e})")
            time.sleep(0.1)


def execd_run(sandbox_id: str, command: str, **extra) -> str:
    """stdout of `command` run by the sandbox's execd (POST /command), through its endpoint."""
    status, ep = call("GET", f"/sandboxes/{sandbox_id}/endpoints/44772")
    check(status == 200, f"execd endpoint ({status} {ep})")
    req = urllib.request.Request(f"http://{ep['endpoint']}/command", method="POST",
                                 data=json.dumps({"command": command, **extra}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        events = [json.loads(chunk) for chunk in resp.read().decode().split("\n\n") if chunk.strip()]
    errors = [e for e in events if e.get("type") == "error"]
    if errors:
        raise Mismatch(f"`{command}` failed: {errors}")
    return "".join(e.get("text", "") for e in events if e.get("type") == "stdout")


def delete(sandbox_id: str) -> None:
    status, resp = call("DELETE", f"/sandboxes/{sandbox_id}")
    check(status == 204, f"delete: 204 ({status} {resp})")
    created.remove(sandbox_id)


def gone(name: str) -> bool:
    try:
        ENGINE.containers.get(name)
    except NotFound:
        return True
    return False


def part_lifecycle() -> None:
    sid = create(metadata={"suite": "docker-check"})
    c = container(sid)
    check(c.status == "running", f"its container runs ({c.status})")
    check(c.attrs["Config"]["Entrypoint"] == ["/opt/opensandbox/bootstrap.sh"], "bootstrap.sh is the entrypoint")
    binds = c.attrs["HostConfig"]["Binds"] or []
    check("/usr:/usr:ro" in binds, f"[docker] sandbox_binds applied ({binds})")
    ports = c.attrs["NetworkSettings"]["Ports"]
    hosts = {b["HostIp"] for bs in ports.values() if bs for b in bs}
    check(hosts == {"127.0.0.1"}, f"ports published on loopback only ({ports})")
    status, ep = call("GET", f"/sandboxes/{sid}/endpoints/44772")
    check(status == 200 and ep["endpoint"].startswith("127.0.0.1:"), f"endpoint on loopback ({ep})")
    execd_ready(ep["endpoint"], "execd answers through the published port")
    check(run_in(sid, "test -f /.dockerenv && id -un && ls -d /home/user") == "root\n/home/user\n",
          "a container of the image: root and a normal user")
    check(execd_run(sid, "id -un; id -u; echo $HOME") == "root\n0\n/root\n", "execd runs commands as root")
    check(execd_run(sid, "id -un; id -g; touch /home/user/mine; stat -c %U /home/user/mine", uid=1000)
          == "user\n1000\nuser\n", "and as uid 1000 (setuid in the container)")
    status, _ = call("POST", f"/sandboxes/{sid}/pause")
    c.reload()
    check(status == 202 and c.attrs["State"]["Paused"], "pause is docker pause")
    status, info = call("GET", f"/sandboxes/{sid}")
    check(info["status"]["state"] == "Paused", f"state Paused ({info['status']})")
    status, _ = call("POST", f"/sandboxes/{sid}/resume")
    c.reload()
    check(status == 202 and not c.attrs["State"]["Paused"] and c.attrs["State"]["Running"], "resume unpauses")
    delete(sid)
    check(gone(f"sandbox-{sid}"), "delete removes the container")


def part_snapshot() -> None:
    sid = create()
    run_in(sid, "echo before-the-snapshot > /root/kept.txt")
    status, snap = call("POST", f"/sandboxes/{sid}/snapshots", {"name": "docker-check"})
    check(status in (200, 201, 202), f"snapshot accepted ({status} {snap})")
    snap_id = snap["id"]
    deadline = time.monotonic() + 60
    while snap["status"]["state"] != "Ready" and time.monotonic() < deadline:
        check(snap["status"]["state"] in ("Creating", "Pending"), f"snapshot on its way ({snap['status']})")
        time.sleep(0.2)
        status, snap = call("GET", f"/snapshots/{snap_id}")
    check(snap["status"]["state"] == "Ready", f"snapshot Ready ({snap['status']})")
    try:
        image = ENGINE.images.get(f"opensandbox-snapshots:{snap_id}")
    except ImageNotFound:
        image = None
    check(image is not None and f"opensandbox-snapshots:{snap_id}" in image.tags,
          f"the engine has the image opensandbox-snapshots:{snap_id}")
    # A committed image names the container it was made from.
    check(image.attrs.get("Container") == container(sid).id,
          f"a docker commit of the sandbox's container ({image.attrs.get('Container')})")
    status, resp = call("POST", "/sandboxes", {"snapshotId": snap_id, "entrypoint": ["tail", "-f", "/dev/null"],
                                               "timeout": 600, "resourceLimits": {}})
    check(status == 202, f"create from the snapshot ({status} {resp})")
    created.append(resp["id"])
    check(run_in(resp["id"], "cat /root/kept.txt") == "before-the-snapshot\n",
          "the file written before the snapshot is in the new sandbox")
    delete(resp["id"])
    delete(sid)
    status, _ = call("DELETE", f"/snapshots/{snap_id}")
    check(status == 204, f"snapshot deleted ({status})")
    try:
        ENGINE.images.get(f"opensandbox-snapshots:{snap_id}")
        check(False, "deleting the snapshot removes its image")
    except ImageNotFound:
        check(True, "deleting the snapshot removes its image")


def part_volumes() -> None:
    host_dir = VOLUMES / f"check-{uuid.uuid4().hex[:8]}"
    host_dir.mkdir()
    (host_dir / "from-host.txt").write_text("written on the host\n")
    sid = create(volumes=[{"name": "data", "host": {"path": str(host_dir)}, "mountPath": "/data"}])
    check(run_in(sid, "cat /data/from-host.txt") == "written on the host\n", "a host file is in the container")
    run_in(sid, "echo written-in-the-container > /data/back.txt")
    check((host_dir / "back.txt").read_text() == "written-in-the-container\n", "and back: a real bind")
    delete(sid)
    claim = f"testbed-check-{uuid.uuid4().hex[:8]}"
    pvc = [{"name": "named", "pvc": {"claimName": claim, "createIfNotExists": True}, "mountPath": "/named"}]
    first = create(volumes=pvc)
    try:
        volume = ENGINE.volumes.get(claim)
    except NotFound:
        volume = None
    check(volume is not None, f"a named volume: {claim} created in the engine")
    mounts = container(first).attrs["Mounts"]
    check(any(m.get("Type") == "volume" and m.get("Name") == claim and m.get("Destination") == "/named"
              for m in mounts), f"and mounted at /named ({mounts})")
    run_in(first, "echo shared > /named/f.txt")
    second = create(volumes=pvc)
    check(run_in(second, "cat /named/f.txt") == "shared\n", "a second sandbox sees what the first wrote")
    delete(first)
    delete(second)
    ENGINE.volumes.get(claim).remove()
    status, resp = call("POST", "/sandboxes", {"image": {"uri": IMAGE}, "entrypoint": ["tail", "-f", "/dev/null"],
                                               "timeout": 600, "resourceLimits": {},
                                               "volumes": [{"name": "etc", "host": {"path": "/etc"},
                                                            "mountPath": "/hostetc"}]})
    if status == 202:
        created.append(resp["id"])
    check(status == 400 and "allowed" in json.dumps(resp).lower(),
          f"a host path outside [storage] allowed_host_paths is refused ({status} {resp})")


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def must_ip(*args: str) -> None:
    done = ip(*args)
    if done.returncode:
        raise Mismatch(f"ip {' '.join(args)}: {done.stderr.strip()}")


PROBE = """
import errno, socket, sys, time
s = socket.socket()
s.settimeout(float(sys.argv[3]))
t = time.monotonic()
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected", 0, "%.3f" % (time.monotonic() - t))
except OSError as e:
    print(errno.errorcode.get(e.errno, "timeout"), e.errno or 0, "%.3f" % (time.monotonic() - t))
"""


def connect_from(sandbox_id: str, addr: str, port: int, timeout: float) -> tuple[str, float]:
    """What a TCP connect from inside the sandbox's container gives: ("connected" or
    an errno name, or "timeout"; seconds)."""
    code, out = container(sandbox_id).exec_run(["python3", "-c", PROBE, addr, str(port), str(timeout)])
    if code != 0:
        raise Mismatch(f"the connect probe exited {code}: {out!r}")
    words = out.decode().split()
    return words[0], float(words[2])


def unused_test_address() -> str:
    """A documentation address (TEST-NET-2/3/1) that no route of this machine covers
    but the default one (the host's own network may be one of them)."""
    routes = json.loads(ip("-j", "route").stdout or "[]")
    nets = [ipaddress.ip_network(r["dst"], strict=False) for r in routes if r.get("dst") not in (None, "default")]
    for cand in ("198.51.100.77", "203.0.113.77", "192.0.2.77"):
        if not any(ipaddress.ip_address(cand) in n for n in nets):
            return cand
    raise Mismatch("every TEST-NET address is routed on this machine")


def part_network() -> None:
    """Nothing arriving on the engine's bridge is forwarded, even with the host's
    net.ipv4.ip_forward set to 1 (switched on for this check, restored after); host
    services on 0.0.0.0 are reachable at the bridge's address. A forwarded packet would
    leave through a veth routed to a test address: its transmit counter is the proof."""
    bridge = ENGINE.networks.get("bridge").attrs["Options"]["com.docker.network.bridge.name"]
    check(bridge.startswith("osbtb-"), f"the engine's bridge is the testbed's ({bridge})")
    forwarding = Path(f"/proc/sys/net/ipv4/conf/{bridge}/forwarding")
    check(forwarding.read_text().strip() == "0", f"{forwarding} is 0")
    v6 = Path(f"/proc/sys/net/ipv6/conf/{bridge}/disable_ipv6")
    if v6.exists():
        check(v6.read_text().strip() == "1", f"no IPv6 on the bridge ({v6})")
    rules = json.loads(ip("-j", "rule").stdout or "[]")
    check(any(r.get("iif") == bridge and r.get("action") == "unreachable" for r in rules),
          f"routing rule: iif {bridge} unreachable ({rules})")
    sid = create()
    c = container(sid)
    cip = c.attrs["NetworkSettings"]["IPAddress"]
    gateway = c.attrs["NetworkSettings"]["Gateway"]

    # A host service on 0.0.0.0 answers at the bridge's address (the host's own).
    # The bridge keeps the address it was given while containers come and go: a
    # bridge without one takes its lowest port's, and a container that cached the old
    # one for its gateway loses what it sends the host until its ARP entry goes stale
    # (connections to a sandbox stalled for 20-60 s when another one was removed).
    address = Path(f"/sys/class/net/{bridge}/address")
    assigned = Path(f"/sys/class/net/{bridge}/addr_assign_type").read_text().strip()
    check(assigned == "3", f"the bridge's address is set, not taken from a port "
                           f"(addr_assign_type {assigned}; 3 is set)")
    with socket.socket() as srv:
        srv.bind(("0.0.0.0", 0))
        srv.listen(4)
        port = srv.getsockname()[1]
        result, _ = connect_from(sid, gateway, port, 5)
        check(result == "connected", f"a host service on 0.0.0.0 is reached at {gateway} ({result})")
        mac = address.read_text().strip()
        other = create()
        with_other = address.read_text().strip()
        delete(other)
        after = address.read_text().strip()
        check(mac == with_other == after,
              f"the bridge's address stays as another sandbox comes and goes ({mac}, {with_other}, {after})")
        result, secs = connect_from(sid, gateway, port, 2)
        check(result == "connected" and secs < 1,
              f"the first sandbox still reaches the host at once after that ({result} after {secs:.2f} s)")

    dest = unused_test_address()
    # Named after the bridge's token: engine_sweep removes them too.
    probe_link, peer = (prefix + bridge.removeprefix("osbtb-") for prefix in ("osbtbx", "osbtby"))
    ip_forward = Path("/proc/sys/net/ipv4/ip_forward")
    old_forward = ip_forward.read_text().strip()
    try:
        # A veth pair (not every kernel has dummy links), without ARP (a forwarded packet
        # goes out as it is) and without IPv6 (its router solicitations would count).
        must_ip("link", "add", probe_link, "type", "veth", "peer", "name", peer)
        for end in (probe_link, peer):
            if Path(f"/proc/sys/net/ipv6/conf/{end}").exists():
                Path(f"/proc/sys/net/ipv6/conf/{end}/disable_ipv6").write_text("1\n")
            must_ip("link", "set", end, "up")
        must_ip("link", "set", probe_link, "arp", "off")
        must_ip("route", "add", f"{dest}/32", "dev", probe_link)
        tx = Path(f"/sys/class/net/{probe_link}/statistics/tx_packets")
        check(f"dev {probe_link}" in ip("route", "get", dest).stdout,
              f"the host routes {dest} to {probe_link} (where a forwarded packet would go)")

        def not_forwarded(label: str, at_once: bool) -> None:
            before = int(tx.read_text())
            decision = ip("route", "get", dest, "from", cip, "iif", bridge)
            check(decision.returncode != 0,
                  f"{label}: the kernel has no route for {cip} → {dest} from the bridge "
                  f"({(decision.stdout or decision.stderr).strip()})")
            result, secs = connect_from(sid, dest, 80, 2)
            sent = int(tx.read_text()) - before
            check(result != "connected" and sent == 0,
                  f"{label}: a connect to {dest}:80 is not forwarded ({result} after {secs:.2f} s, "
                  f"{sent} packets out of {probe_link})")
            if at_once:
                check(result in ("ENETUNREACH", "EHOSTUNREACH") and secs < 1,
                      f"{label}: and fails at once, no route ({result} after {secs:.2f} s)")

        # Forwarding off on the bridge: the kernel drops the packet without an answer.
        not_forwarded(f"ip_forward {old_forward}", at_once=False)
        # A host that forwards: a change of ip_forward switches every interface's
        # forwarding, the bridge's too (written here as well, in case ip_forward was 1
        # already); the routing rule still refuses, and the container now hears so at once.
        ip_forward.write_text("1\n")
        forwarding.write_text("1\n")
        not_forwarded("ip_forward 1, the bridge's forwarding 1", at_once=True)
    finally:
        ip_forward.write_text(old_forward + "\n")
        forwarding.write_text("0\n")  # as the engine set it (restoring 1 switched it on)
        ip("link", "delete", probe_link)
    check(ip_forward.read_text().strip() == old_forward and forwarding.read_text().strip() == "0",
          f"ip_forward back to {old_forward}, the bridge's forwarding to 0")
    delete(sid)


def part_egress() -> None:
    policy = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}
    sid = create(networkPolicy=policy)
    sidecar = container(sid, "sandbox-egress-")
    env = dict(e.split("=", 1) for e in sidecar.attrs["Config"]["Env"])
    check(json.loads(env.get("OPENSANDBOX_EGRESS_RULES", "{}")) == policy,
          f"the sidecar got the policy ({env.get('OPENSANDBOX_EGRESS_RULES')})")
    main = container(sid)
    check(main.attrs["HostConfig"]["NetworkMode"] == f"container:{sidecar.id}",
          "the sandbox runs in the sidecar's network namespace")
    ports = sidecar.attrs["NetworkSettings"]["Ports"] or {}
    hosts = {b["HostIp"] for bs in ports.values() if bs for b in bs}
    check(hosts == {"127.0.0.1"} and {"44772/tcp", "18080/tcp"} <= set(ports),
          f"the sidecar publishes execd's and its own port, on loopback only ({ports})")
    status, resp = call("GET", f"/sandboxes/{sid}/networkpolicy")
    check(status == 200 and resp.get("policy") == policy, f"GET /networkpolicy through the server ({status} {resp})")
    status, ep = call("GET", f"/sandboxes/{sid}/endpoints/44772")
    check(status == 200 and ep["endpoint"].startswith("127.0.0.1:"), f"execd endpoint on loopback ({status} {ep})")
    execd_ready(ep["endpoint"], "execd answers through the sidecar's published port")
    delete(sid)
    check(gone(f"sandbox-egress-{sid}"), "delete removes the sidecar too")


def main() -> int:
    failures = []
    for name, fn in (("lifecycle, pause", part_lifecycle), ("snapshot (docker commit)", part_snapshot),
                     ("volumes (host binds, named)", part_volumes), ("egress sidecar", part_egress),
                     ("network (nothing forwarded from the bridge)", part_network)):
        print(name, flush=True)
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - report, go on with the next part
            if not isinstance(exc, Mismatch) or os.environ.get("TESTBED_VERBOSE") == "1":
                traceback.print_exc()
            failures.append(f"{name}: {exc}")
            print(f"  MISMATCH {exc}", flush=True)
    for sid in list(created):
        call("DELETE", f"/sandboxes/{sid}")
    if failures:
        print("docker tier: " + "; ".join(failures), flush=True)
        return 1
    print("docker tier: all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
