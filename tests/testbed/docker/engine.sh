# shellcheck shell=bash
# The Docker tier's engine (tests/testbed/README.md, "Docker tier"), sourced by
# tests/testbed/testbed: Debian's docker.io (20.10; installed when missing) started
# by the testbed itself on a private socket, data root, bridge, containerd namespace
# and cgroup parent, with no iptables rules, no masquerading and nothing forwarded
# from the bridge (its forwarding off and a routing rule: engine_isolate_bridge), so
# containers reach the host and each other and nothing beyond; the images
# the server and the tests use, built by `docker import` (nothing is ever pulled).
# engine_stop removes every container, stops dockerd by its pid and removes what it
# left (bridge, mounts, cgroups, processes of a crashed run, its folders).
#
# Needs root (dockerd does), `ip` (iproute2) and a static busybox (busybox-static).
# Uses log/die/random_token from the testbed script.

ENGINE_DIR=     # <state>/docker: sockets, pid file, data and exec roots, logs
ENGINE_TOKEN=   # names the bridge, the containerd namespace and the cgroup parent
ENGINE_BRIDGE=  # osbtb-<token>, <net>.1/24
ENGINE_NET=     # 172.30.N (the bridge's /24)
ENGINE_PID=
ENGINE_SOCK=
ENGINE_NEW_DIRS= # system folders dockerd makes that were not there before (removed if empty)
# The preference of the routing rule that refuses to route anything arriving on the
# bridge (after the local table's 0, before anything that could route it).
ENGINE_RULE_PREF=10
# Every engine of this machine while it exists: <token>.env, its engine.env plus its
# folder and the testbed that owns it (pid and start time); `testbed sweep --stale`
# removes the engines whose owner is gone. In /run: a reboot clears it, as it clears
# what it describes.
ENGINE_REGISTRY=/run/opensandbox-testbed

# The images (the server config names the first and the last; the provider's
# templates `base` and `code` name the two in the middle).
ENGINE_EXECD_IMAGE=opensandbox-testbed/execd:local
ENGINE_SANDBOX_IMAGE=python:3.12-slim
ENGINE_CODE_IMAGE=opensandbox/code-interpreter:v1.1.0
ENGINE_EGRESS_IMAGE=opensandbox-testbed/egress:local
# Where a sandbox finds the execd stand-in (bind-mounted read-only from the host).
ENGINE_STANDIN_PATH=/opt/testbed/execd-standin
# What the real code-interpreter image sets.
ENGINE_JUPYTER_PORT=44771
ENGINE_JUPYTER_TOKEN=opensandboxcodeinterpreterjupyter

engine_docker() { docker -H "unix://$ENGINE_SOCK" "$@"; }

# The path of a statically linked busybox, or nothing (status 1).
engine_static_busybox() {
	local b
	for b in /bin/busybox /usr/bin/busybox; do
		[[ -x $b ]] || continue
		# ldd fails on a static binary (pipefail would take that as grep's answer).
		if [[ $(LC_ALL=C ldd "$b" 2>&1 || true) == *"not a dynamic executable"* ]]; then
			echo "$b"
			return 0
		fi
	done
	return 1
}

# What keeps apt from starting the package's daemon while it installs (exit 101).
ENGINE_POLICY_RC=/usr/sbin/policy-rc.d

# Installs docker.io, busybox-static, iproute2 and (with AppArmor on) apparmor
# (Debian) when missing, without letting the package start its own daemon
# (policy-rc.d answers 101 while apt runs, removed however apt ends), then checks
# that every command the tier runs is there.
engine_install() {
	local pkgs=() apparmor=0
	if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null || ! command -v docker-proxy >/dev/null; then
		pkgs+=(docker.io)
	fi
	engine_static_busybox >/dev/null || pkgs+=(busybox-static)
	command -v ip >/dev/null || pkgs+=(iproute2)
	# With AppArmor on, dockerd 20.10 loads its profile with apparmor_parser.
	[[ $(cat /sys/module/apparmor/parameters/enabled 2>/dev/null || true) == Y ]] && apparmor=1
	if ((apparmor)) && ! command -v apparmor_parser >/dev/null; then pkgs+=(apparmor); fi
	if ((${#pkgs[@]})); then
		command -v apt-get >/dev/null || die "the Docker tier needs ${pkgs[*]} (Debian packages) and apt-get is not here"
		log "installing ${pkgs[*]} (Debian) ..."
		local rc=0 t0=$SECONDS
		# A subshell: its traps remove the guard it made however apt ends (Ctrl-C too).
		(
			guard=$ENGINE_POLICY_RC
			if [[ ! -e $guard ]]; then
				trap 'rm -f "$guard"' EXIT
				trap 'exit 130' INT
				trap 'exit 143' TERM
				printf '#!/bin/sh\n# testbed: no service starts while apt installs the Docker tier\nexit 101\n' >"$guard"
				chmod 755 "$guard"
			fi
			# Another apt may hold the lock for a while (unattended upgrades).
			local apt=(apt-get -o DPkg::Lock::Timeout=120)
			{
				DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "${pkgs[@]}" ||
					{ "${apt[@]}" update -qq && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "${pkgs[@]}"; }
			} >&2
		) || rc=$?
		((rc == 0)) || die "installing ${pkgs[*]} failed (apt-get exit $rc)"
		log "installed ${pkgs[*]} in $((SECONDS - t0)) s"
		[[ " ${pkgs[*]} " == *" docker.io "* ]] && engine_quiet_system_docker
	fi
	local c
	for c in dockerd docker docker-proxy ip; do
		command -v "$c" >/dev/null || die "the Docker tier needs $c and it is not on PATH${pkgs[*]:+ after installing ${pkgs[*]}}"
	done
	engine_static_busybox >/dev/null || die "the Docker tier needs a static busybox (/bin/busybox or /usr/bin/busybox, Debian's busybox-static)${pkgs[*]:+; none after installing ${pkgs[*]}}"
	if ((apparmor)) && ! command -v apparmor_parser >/dev/null; then
		die "AppArmor is on and apparmor_parser is not on PATH: dockerd 20.10 needs it (Debian's apparmor)"
	fi
	return 0
}

# docker.io enables docker.service and docker.socket: on a systemd machine the next
# boot (or a connect to /run/docker.sock) would start a daemon of the system's own,
# which the tier never uses. Disabled (not stopped: policy-rc.d kept them from
# starting) right after the tier installed the package.
engine_quiet_system_docker() {
	[[ $(cat /proc/1/comm 2>/dev/null || true) == systemd ]] || return 0
	command -v systemctl >/dev/null || return 0
	if systemctl disable --quiet docker.service docker.socket 2>/dev/null; then
		log "disabled docker.service and docker.socket, which docker.io enabled (the tier runs a dockerd of its own; systemctl enable to have the system's)"
	else
		log "warning: docker.io enabled docker.service/docker.socket and they could not be disabled (systemctl disable docker.service docker.socket)"
	fi
}

# Refuses, with a message that says why, what would otherwise end in a runc or
# netlink error: no cgroups to give containers (cgroup v2 with this shell in the root
# cgroup: a container whose cgroup namespace is not set up for nesting), missing
# capabilities (in a container started without --privileged). Before engine_install.
engine_check_host() {
	local fs
	fs=$(stat -fc %T /sys/fs/cgroup 2>/dev/null || true)
	if [[ $fs == cgroup2fs && $(cat /proc/self/cgroup 2>/dev/null || true) == "0::/" ]]; then
		die "cgroup v2 and this process is in the root cgroup (as in a container): dockerd cannot put containers in cgroups of their own there (runc would fail). Move the processes into a child cgroup first (as docker:dind does: mkdir /sys/fs/cgroup/init and write each pid of /sys/fs/cgroup/cgroup.procs to /sys/fs/cgroup/init/cgroup.procs), or run on the host"
	fi
	local eff missing=() bit name
	eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
	for bit in 12:CAP_NET_ADMIN 21:CAP_SYS_ADMIN; do
		name=${bit#*:}
		(((16#$eff >> ${bit%%:*}) & 1)) || missing+=("$name")
	done
	((${#missing[@]} == 0)) || die "the Docker tier needs ${missing[*]} (bridges, routing rules, mounts, namespaces) and this process lacks it (a container without --privileged?)"
}

# After engine_install (ip): a bridge can be made here.
engine_probe_link() {
	local probe=osbtbp$$ err
	if ! err=$(ip link add "$probe" type bridge 2>&1); then
		die "cannot create a network link (ip link add $probe type bridge: $err): the Docker tier makes a bridge of its own; it needs CAP_NET_ADMIN in the host's network namespace and bridge support in the kernel"
	fi
	ip link delete "$probe" 2>/dev/null || log "warning: could not delete the probe link $probe"
}

# A 172.30.N.0/24 that overlaps no route of this machine in any table (a covering
# 172.30.0.0/16 or 172.16.0.0/12 too; the default route aside). Under engine_lock,
# with the bridge made before it is released, so that two engines never pick one.
engine_free_net() {
	local routes
	routes=$(ip -j -4 route show table all) || die "ip -j route failed"
	"${PYTHON:-python3}" -c '
import ipaddress, json, random, sys
taken = []
for r in json.loads(sys.argv[1] or "[]"):
    dst = r.get("dst", "default")
    if dst == "default":
        continue
    net = ipaddress.ip_network(dst, strict=False)
    if net.prefixlen:
        taken.append(net)
free = [n for n in range(1, 255)
        if not any(ipaddress.ip_network(f"172.30.{n}.0/24").overlaps(t) for t in taken)]
if not free:
    cover = [str(t) for t in taken if t.overlaps(ipaddress.ip_network("172.30.0.0/16"))]
    sys.exit("no free 172.30.N.0/24 for the engine'"'"'s bridge (routes here: %s)" % ", ".join(cover[:8]))
print("172.30.%d" % random.choice(free))' "$routes" || die "no subnet for the engine's bridge (above)"
}

# engine_lock / engine_unlock: one testbed at a time chooses a subnet and makes its
# bridge (a few ms), machine-wide. The (empty) lock file stays: removing it would let
# two testbeds lock two different files.
ENGINE_LOCK=/run/lock/opensandbox-testbed.lock
ENGINE_LOCK_FD=
engine_lock() {
	mkdir -p "$(dirname "$ENGINE_LOCK")"
	exec {ENGINE_LOCK_FD}>"$ENGINE_LOCK"
	flock -w 60 "$ENGINE_LOCK_FD" ||
		die "another testbed has held $ENGINE_LOCK for 60 s (it is held while a subnet is chosen and the bridge made): is one stuck?"
}
engine_unlock() {
	exec {ENGINE_LOCK_FD}>&-
	ENGINE_LOCK_FD=
}

# Pids of processes (not this shell) with an argument that matches the extended
# regular expression $1 (whole argument).
engine_pids_with_arg() {
	local f pid
	while IFS= read -r f; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		[[ $pid == "$$" || $pid == "$BASHPID" ]] || echo "$pid"
	done < <(grep -lzxE -- "$1" /proc/[0-9]*/cmdline 2>/dev/null || true)
}

# shellcheck disable=SC2001,SC2016 # one sed expression, not a shell one
engine_regex_quote() { sed 's/[][\.*^$(){}?+|]/\\&/g' <<<"$1"; }

# Removes whatever a run recorded in $ENGINE_DIR/engine.env left behind: container
# processes (by cgroup), dockerd, containerd and shims (by their folders on the
# command line), docker-proxy (by the bridge's subnet), mounts under the folder, the
# bridge and its routing rule, the cgroups and empty system folders dockerd made.
# Idempotent; the normal stop leaves it nothing to do. Every step runs whatever the
# one before did (a process that exited in between, a busy cgroup): what could not
# be removed is logged, and the status is 1 then.
engine_sweep() {
	[[ -n $ENGINE_TOKEN ]] || return 0
	local cg pids dir p f failed=0
	local cgroups=(/sys/fs/cgroup/osbtb-"$ENGINE_TOKEN" /sys/fs/cgroup/*/osbtb-"$ENGINE_TOKEN")
	# Container processes: thaw (a paused sandbox ignores SIGKILL while frozen), kill.
	for _ in $(seq 1 50); do
		pids=
		for cg in "${cgroups[@]}"; do
			[[ -d $cg ]] || continue
			while IFS= read -r f; do echo THAWED >"$f" 2>/dev/null || true; done < <(find "$cg" -name freezer.state 2>/dev/null || true)
			while IFS= read -r f; do echo 0 >"$f" 2>/dev/null || true; done < <(find "$cg" -name cgroup.freeze 2>/dev/null || true)
			pids+=" $({ find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null || true; } | tr '\n' ' ')"
		done
		[[ -z ${pids// /} ]] && break
		# shellcheck disable=SC2086
		kill -KILL $pids 2>/dev/null || true
		sleep 0.1
	done
	if [[ -n ${pids// /} ]]; then
		local left
		read -ra left <<<"$pids"
		log "warning: processes still in the engine's cgroups: ${left[*]}"
		failed=1
	fi
	# The daemons of this engine name its folder on their command line.
	if [[ -n $ENGINE_DIR ]]; then
		local dq
		dq=$(engine_regex_quote "$ENGINE_DIR")
		for p in $(engine_pids_with_arg "(unix://)?$dq/.*"); do
			case $(cat "/proc/$p/comm" 2>/dev/null || true) in
			dockerd | containerd | containerd-shim* | docker-proxy | runc) engine_kill "$p" || failed=1 ;;
			esac
		done
	fi
	# docker-proxy processes of a killed dockerd, by the container address they relay
	# to; not one whose parent is a live dockerd of another folder (another engine that
	# got this subnet after this one's bridge was gone).
	if [[ -n $ENGINE_NET ]]; then
		local parent
		for p in $(engine_pids_with_arg "$(engine_regex_quote "$ENGINE_NET")\.[0-9]+"); do
			[[ $(cat "/proc/$p/comm" 2>/dev/null || true) == docker-proxy ]] || continue
			parent=$(engine_ppid "$p")
			if [[ -n $parent && $(cat "/proc/$parent/comm" 2>/dev/null || true) == dockerd ]] &&
				! { [[ -n $ENGINE_DIR ]] && tr '\0' '\n' <"/proc/$parent/cmdline" 2>/dev/null | grep -qF -- "$ENGINE_DIR/"; }; then
				continue
			fi
			engine_kill "$p" || failed=1
		done
	fi
	# Mounts under the engine's folders (overlays, shm, network namespaces), deepest first.
	if [[ -n $ENGINE_DIR ]]; then
		while IFS= read -r dir; do
			umount -l "$dir" 2>/dev/null || { log "warning: could not unmount $dir"; failed=1; }
		done < <(awk -v d="$ENGINE_DIR/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r || true)
	fi
	if [[ -n $ENGINE_BRIDGE ]]; then
		local link
		# The bridge, docker_check.py's probe link, the bridge's routing rule (a rule
		# outlives its interface).
		for link in "$ENGINE_BRIDGE" "osbtbx$ENGINE_TOKEN"; do
			if ip link show "$link" >/dev/null 2>&1; then
				ip link delete "$link" 2>/dev/null || { log "warning: could not delete the link $link"; failed=1; }
			fi
		done
		for _ in $(seq 1 10); do
			ip rule del pref "$ENGINE_RULE_PREF" iif "$ENGINE_BRIDGE" unreachable 2>/dev/null || break
		done
		if ip rule show pref "$ENGINE_RULE_PREF" 2>/dev/null | grep -qw -- "$ENGINE_BRIDGE"; then
			log "warning: could not delete the routing rule of $ENGINE_BRIDGE"
			failed=1
		fi
	fi
	for cg in "${cgroups[@]}"; do
		[[ -d $cg ]] || continue
		find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[[ -d $cg ]] && { log "warning: could not remove the cgroup $cg"; failed=1; }
	done
	engine_remove_made_dirs
	# Nothing of it left: it leaves the registry (else `sweep --stale` tries again).
	if ((failed == 0)); then
		rm -f "$ENGINE_REGISTRY/$ENGINE_TOKEN.env"
		rmdir "$ENGINE_REGISTRY" 2>/dev/null || true
	fi
	return "$failed"
}

# The empty system folders dockerd made (ENGINE_NEW_DIRS: /run/docker,
# /run/containerd, …), unless another dockerd or containerd runs (another engine's or
# the system's may use them, empty or not): then they are handed on in
# $ENGINE_REGISTRY/made-dirs, which the sweep that finds no other daemon removes.
engine_remove_made_dirs() {
	local list=$ENGINE_REGISTRY/made-dirs made=$ENGINE_NEW_DIRS dir p
	[[ -f $list ]] && made+=" $(cat "$list" 2>/dev/null || true)"
	[[ -n ${made// /} ]] || return 0
	for p in $(pgrep -x 'dockerd|containerd' || true); do
		if [[ -n $(engine_proc_start "$p") ]]; then # not a zombie
			mkdir -p "$ENGINE_REGISTRY"
			# shellcheck disable=SC2086 # a list of paths without spaces
			printf '%s\n' $made | sort -u >"$list.new" && mv "$list.new" "$list"
			return 0
		fi
	done
	for dir in $made; do
		[[ -d $dir ]] || continue
		find "$dir" -depth -type d -empty -delete 2>/dev/null || true
	done
	rm -f "$list"
}

# engine_ppid PID: its parent's pid (nothing if it is gone).
engine_ppid() {
	local stat fields
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	read -ra fields <<<"${stat##*) }"
	echo "${fields[1]}" # field 4
}

# engine_kill PID: SIGKILL, fine when it is gone already; logs (status 1) when it stays.
engine_kill() {
	kill -KILL "$1" 2>/dev/null && return 0
	[[ -e /proc/$1 ]] || return 0
	log "warning: could not kill $(cat "/proc/$1/comm" 2>/dev/null || echo process) $1"
	return 1
}

# Nothing that arrives on the bridge is ever forwarded, whatever the host's
# net.ipv4.ip_forward, and without iptables: forwarding off on the bridge (a new
# interface inherits conf.default.forwarding, 1 on a host that forwards), no IPv6 on
# it, and a routing rule "iif BRIDGE unreachable" after the local table, so a packet
# from a container to any address that is not the host's own has no route. The rule is
# what holds: any later write of net.ipv4.ip_forward (another Docker, a VPN, a test)
# switches every interface's forwarding, this bridge's too. With forwarding off the
# kernel drops such a packet silently (a connect to an outside address times out);
# with it switched on, the container gets "Network is unreachable" at once. Addresses
# of the host itself are delivered locally, not forwarded: a host service listening on
# 0.0.0.0 is reachable from containers at 172.30.N.1.
engine_isolate_bridge() {
	sysctl -qw "net.ipv4.conf.$ENGINE_BRIDGE.forwarding=0"
	if [[ -d /proc/sys/net/ipv6/conf/$ENGINE_BRIDGE ]]; then
		sysctl -qw "net.ipv6.conf.$ENGINE_BRIDGE.disable_ipv6=1"
	fi
	ip rule add pref "$ENGINE_RULE_PREF" iif "$ENGINE_BRIDGE" unreachable
}

# engine_bridge_mac: a random unicast, locally administered MAC address (02:…).
engine_bridge_mac() {
	printf '02:%s\n' "$(od -An -N5 -tx1 /dev/urandom | tr -s ' \n' ':' | sed 's/^://; s/:$//')"
}

# engine_proc_start PID: when PID started (clock ticks after boot; nothing if it is
# gone or a zombie): a pid and its start time name one process, even after the pid
# is reused.
engine_proc_start() {
	local stat fields
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	read -ra fields <<<"${stat##*) }"
	[[ ${fields[0]} == [ZX] ]] && return 0 # fields[0] is field 3, the state
	echo "${fields[19]}"                 # field 22
}

# Writes $ENGINE_DIR/engine.env (what `testbed sweep DIR` reads) and this engine's
# entry in $ENGINE_REGISTRY (the same, plus the folder and the owner: this shell).
engine_record() {
	local env
	env=$(
		printf 'ENGINE_TOKEN=%q\n' "$ENGINE_TOKEN"
		printf 'ENGINE_BRIDGE=%q\n' "$ENGINE_BRIDGE"
		printf 'ENGINE_NET=%q\n' "$ENGINE_NET"
		printf 'ENGINE_NEW_DIRS=%q\n' "$ENGINE_NEW_DIRS"
	)
	printf '%s\n' "$env" >"$ENGINE_DIR/engine.env"
	mkdir -p "$ENGINE_REGISTRY"
	{
		printf '%s\n' "$env"
		printf 'ENGINE_DIR=%q\n' "$ENGINE_DIR"
		printf 'ENGINE_OWNER=%q\n' "$$"
		printf 'ENGINE_OWNER_START=%q\n' "$(engine_proc_start "$$")"
	} >"$ENGINE_REGISTRY/$ENGINE_TOKEN.env"
}

# engine_sweep_stale: sweeps every registered engine whose testbed is gone (killed
# with SIGKILL, or its parent with it, so that nobody stopped it); logs each one.
engine_sweep_stale() {
	local f failed=0
	for f in "$ENGINE_REGISTRY"/*.env; do
		[[ -f $f ]] || continue
		(
			ENGINE_TOKEN='' ENGINE_BRIDGE='' ENGINE_NET='' ENGINE_NEW_DIRS='' ENGINE_DIR='' ENGINE_OWNER='' ENGINE_OWNER_START=''
			# shellcheck disable=SC1090
			. "$f"
			if [[ -n $ENGINE_OWNER && $(engine_proc_start "$ENGINE_OWNER") == "$ENGINE_OWNER_START" ]]; then
				exit 0
			fi
			log "docker: removing the engine osbtb-$ENGINE_TOKEN of testbed pid $ENGINE_OWNER, which is gone ($ENGINE_DIR)"
			# Its folder may hold a newer run's engine by now: then only what carries its token.
			if [[ -f $ENGINE_DIR/engine.env ]] && ! grep -qxF "ENGINE_TOKEN=$ENGINE_TOKEN" "$ENGINE_DIR/engine.env"; then
				ENGINE_DIR=
			fi
			engine_sweep || exit 1
			if [[ -n $ENGINE_DIR ]]; then
				rm -rf "$ENGINE_DIR" || { log "warning: could not remove $ENGINE_DIR"; exit 1; }
			fi
		) || failed=1
	done
	return "$failed"
}

# engine_start STATE_DIR: dockerd on STATE_DIR/docker/engine.sock, ready to answer.
engine_start() {
	ENGINE_DIR=$1/docker
	if [[ -f $ENGINE_DIR/engine.env ]]; then
		# A run of this state folder that died without cleaning up.
		log "docker: removing what a previous run left in $ENGINE_DIR"
		# shellcheck disable=SC1091
		. "$ENGINE_DIR/engine.env"
		engine_sweep || die "could not remove all that a previous run left (above); try testbed sweep $1, or another --state-dir"
	fi
	rm -rf "$ENGINE_DIR" || die "could not remove $ENGINE_DIR"
	mkdir -p "$ENGINE_DIR"
	ENGINE_SOCK=$ENGINE_DIR/engine.sock
	# A unix socket path has at most 107 bytes; containerd's lies deeper.
	((${#ENGINE_DIR} <= 60)) || die "--state-dir is too long for the engine's sockets (${#ENGINE_DIR} > 60 bytes with /docker): pick a shorter one"
	ENGINE_TOKEN=$(random_token | cut -c1-8)
	ENGINE_BRIDGE=osbtb-$ENGINE_TOKEN
	ENGINE_NEW_DIRS=
	local d
	for d in /etc/docker /run/docker /run/containerd /var/lib/docker; do
		[[ -e $d ]] || ENGINE_NEW_DIRS+=" $d"
	done
	engine_lock
	ENGINE_NET=$(engine_free_net)
	engine_record
	# A bridge with no address of its own takes the lowest of its ports' addresses,
	# so it changes as containers come and go; a container keeps the old one for its
	# gateway (the host) until its ARP entry goes stale, and meanwhile what it sends
	# the host is lost: connections to other sandboxes stalled for 20-60 s whenever
	# one was removed. A fixed, locally administered address, as dockerd gives the
	# bridges it makes.
	ip link add "$ENGINE_BRIDGE" address "$(engine_bridge_mac)" type bridge
	ip addr add "$ENGINE_NET.1/24" dev "$ENGINE_BRIDGE"
	ip link set "$ENGINE_BRIDGE" up
	engine_isolate_bridge
	engine_unlock
	# Its trust key stays in the folder too (else /etc/docker/key.json).
	printf '{"deprecated-key-path": "%s/key.json"}\n' "$ENGINE_DIR" >"$ENGINE_DIR/daemon.json"
	# No pull can leave the machine: registry traffic goes to a closed loopback port
	# (the server pulls an image it does not find; the testbed checks the images first).
	# setsid: a signal to the testbed's process group does not reach dockerd; engine_stop
	# stops it after the server, in order.
	HTTP_PROXY=http://127.0.0.1:1 HTTPS_PROXY=http://127.0.0.1:1 NO_PROXY='' \
		http_proxy=http://127.0.0.1:1 https_proxy=http://127.0.0.1:1 no_proxy='' \
		setsid dockerd \
		--data-root "$ENGINE_DIR/data" --exec-root "$ENGINE_DIR/exec" \
		--pidfile "$ENGINE_DIR/dockerd.pid" -H "unix://$ENGINE_SOCK" \
		--config-file "$ENGINE_DIR/daemon.json" \
		--containerd-namespace "osbtb-$ENGINE_TOKEN" --containerd-plugins-namespace "osbtb-$ENGINE_TOKEN-plugins" \
		--exec-opt native.cgroupdriver=cgroupfs --cgroup-parent "/osbtb-$ENGINE_TOKEN" \
		--bridge "$ENGINE_BRIDGE" --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false \
		--userland-proxy=true --dns 127.0.0.1 --shutdown-timeout 3 --log-level warn \
		</dev/null >"$ENGINE_DIR/dockerd.log" 2>&1 &
	ENGINE_PID=$!
	local t0
	t0=$(($(date +%s%N) / 1000000))
	for _ in $(seq 1 300); do
		kill -0 "$ENGINE_PID" 2>/dev/null || break
		if [[ -S $ENGINE_SOCK ]] && engine_docker version >/dev/null 2>&1; then
			log "docker: dockerd $(engine_docker version --format '{{.Server.Version}}') (pid $ENGINE_PID) on unix://$ENGINE_SOCK, bridge $ENGINE_BRIDGE ($ENGINE_NET.0/24, nothing forwarded, no iptables), ready in $(($(date +%s%N) / 1000000 - t0)) ms"
			return 0
		fi
		sleep 0.1
	done
	tail -n 30 "$ENGINE_DIR/dockerd.log" >&2 || true
	die "dockerd did not start (log above: $ENGINE_DIR/dockerd.log)"
}

# Removes every container, stops dockerd (SIGTERM, SIGKILL after 20 s), sweeps what
# is left and removes the engine's folder (KEEP: 1 keeps dockerd.log). When the sweep
# could not remove everything, the folder stays with its engine.env (for `testbed
# sweep`) and the status is 1.
engine_stop() {
	[[ -n $ENGINE_DIR ]] || return 0
	local keep=${1:-0}
	if [[ -n $ENGINE_PID ]] && kill -0 "$ENGINE_PID" 2>/dev/null; then
		local ids
		ids=$(timeout 20 docker -H "unix://$ENGINE_SOCK" ps -aq 2>/dev/null) || true
		if [[ -n $ids ]]; then
			# shellcheck disable=SC2086
			timeout 60 docker -H "unix://$ENGINE_SOCK" rm -f -v $ids >/dev/null 2>&1 || true
		fi
		kill -TERM "$ENGINE_PID" 2>/dev/null || true
		for _ in $(seq 1 200); do
			kill -0 "$ENGINE_PID" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$ENGINE_PID" 2>/dev/null; then
			log "docker: dockerd did not stop in 20 s; killing it"
			kill -KILL "$ENGINE_PID" 2>/dev/null || true
		fi
		wait "$ENGINE_PID" 2>/dev/null || true
	fi
	ENGINE_PID=
	if ! engine_sweep; then
		log "docker: the engine's folder $ENGINE_DIR stays (engine.env: what testbed sweep removes)"
		ENGINE_DIR=
		return 1
	fi
	if ((keep)); then
		find "$ENGINE_DIR" -mindepth 1 -maxdepth 1 ! -name dockerd.log -exec rm -rf {} + || log "warning: could not empty $ENGINE_DIR"
	else
		rm -rf "$ENGINE_DIR" || log "warning: could not remove $ENGINE_DIR"
	fi
	ENGINE_DIR=
}

# A root of busybox applets: DIR/bin/busybox and a link per applet (made by one
# python process: a fork of ln per applet costs half a second).
engine_busybox_root() {
	local dir=$1 bb
	bb=$(engine_static_busybox) || die "no static busybox (install busybox-static)"
	mkdir -p "$dir/bin" "$dir/tmp"
	chmod 1777 "$dir/tmp"
	cp "$bb" "$dir/bin/busybox"
	"$bb" --list | "${PYTHON:-python3}" -c '
import os, sys
for name in sys.stdin.read().split():
    if name != "busybox":
        os.symlink("busybox", os.path.join(sys.argv[1], name))' "$dir/bin"
}

# A sandbox root: bin, sbin, lib* point into usr, which is the host's (bind-mounted
# read-only by [docker] sandbox_binds); root and a normal user.
engine_sandbox_root() {
	local dir=$1 l
	mkdir -p "$dir"/{usr,etc,opt,run,var/tmp,tmp,root,home/user}
	for l in bin sbin lib lib32 lib64 libx32; do
		[[ -e /usr/$l ]] && ln -s "usr/$l" "$dir/$l"
	done
	chmod 1777 "$dir/tmp" "$dir/var/tmp"
	chmod 700 "$dir/root"
	chown 1000:1000 "$dir/home/user"
	cat >"$dir/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
user:x:1000:1000:user:/home/user:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
	cat >"$dir/etc/group" <<'EOF'
root:x:0:
user:x:1000:
nogroup:x:65534:
EOF
	printf 'root:*::0:99999:7:::\nuser:*::0:99999:7:::\nnobody:*::0:99999:7:::\n' >"$dir/etc/shadow"
	chmod 640 "$dir/etc/shadow"
}

# engine_import DIR TAG CHANGE...: in the background (engine_imported waits for all).
ENGINE_IMPORTS=()
engine_import() {
	local dir=$1 tag=$2
	shift 2
	local changes=() c
	for c in "$@"; do changes+=(--change "$c"); done
	{ tar --numeric-owner -C "$dir" -cf - . | engine_docker import "${changes[@]}" - "$tag" >/dev/null; } &
	ENGINE_IMPORTS+=("$!:$tag")
}

engine_imported() {
	local job
	for job in "${ENGINE_IMPORTS[@]}"; do
		wait "${job%%:*}" || die "docker import of ${job#*:} failed"
	done
	ENGINE_IMPORTS=()
}

# The sandbox binds: the host's /usr and what its programs read outside it, the
# execd stand-in, the Jupyter venv and the Python it runs on.
engine_sandbox_binds() {
	local execd=$1 jupyter=$2 prefix
	echo "/usr:/usr:ro"
	[[ -d /etc/alternatives ]] && echo "/etc/alternatives:/etc/alternatives:ro"
	[[ -f /etc/ld.so.cache ]] && echo "/etc/ld.so.cache:/etc/ld.so.cache:ro"
	echo "$execd:$ENGINE_STANDIN_PATH:ro"
	if [[ -n $jupyter ]]; then
		echo "$jupyter:$jupyter:ro"
		prefix=$("$jupyter/bin/python" -c 'import sys; print(sys.base_prefix)')
		[[ $prefix == /usr || $prefix == /usr/* ]] || echo "$prefix:$prefix:ro"
	fi
}

# engine_build_images JUPYTER_VENV: the four images, by docker import.
engine_build_images() {
	local jupyter=$1 stage=$ENGINE_DIR/images t0 here
	t0=$(($(date +%s%N) / 1000000))
	here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
	rm -rf "$stage"
	mkdir -p "$stage"

	# execd: what the server copies into every sandbox (/execd, /bootstrap.sh); it runs
	# this image with `tail -f /dev/null` to read them.
	engine_busybox_root "$stage/busybox"
	cp -a "$stage/busybox" "$stage/execd"
	install -m 755 "$here/image/execd.sh" "$stage/execd/execd"
	install -m 755 "$here/image/bootstrap.sh" "$stage/execd/bootstrap.sh"
	engine_import "$stage/execd" "$ENGINE_EXECD_IMAGE" 'CMD ["/bin/sh"]'

	# The sandbox image the provider's `base` template names.
	local path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	engine_sandbox_root "$stage/sandbox"
	engine_import "$stage/sandbox" "$ENGINE_SANDBOX_IMAGE" \
		"ENV PATH=$path" 'ENV LANG=C.UTF-8' 'CMD ["python3"]'

	# The code-interpreter image (template `code`): its environment and entrypoint,
	# Jupyter from the testbed's venv.
	engine_sandbox_root "$stage/code"
	mkdir -p "$stage/code/workspace" "$stage/code/opt/code-interpreter"
	install -m 755 "$here/../server/code_interpreter.sh" "$stage/code/opt/code-interpreter/code-interpreter.sh"
	engine_import "$stage/code" "$ENGINE_CODE_IMAGE" \
		"ENV PATH=$jupyter/bin:$path" 'ENV LANG=C.UTF-8' \
		"ENV JUPYTER_HOST=http://127.0.0.1:$ENGINE_JUPYTER_PORT" "ENV JUPYTER_PORT=$ENGINE_JUPYTER_PORT" \
		"ENV JUPYTER_TOKEN=$ENGINE_JUPYTER_TOKEN" 'WORKDIR /workspace' \
		'ENTRYPOINT ["/opt/code-interpreter/code-interpreter.sh"]'

	# The egress sidecar stand-in: answers the server's readiness probe and GET /policy.
	cp -a "$stage/busybox" "$stage/egress"
	mkdir -p "$stage/egress/egress"
	install -m 755 "$here/image/egress-serve.sh" "$stage/egress/egress/serve.sh"
	install -m 755 "$here/image/egress-handle.sh" "$stage/egress/egress/handle.sh"
	engine_import "$stage/egress" "$ENGINE_EGRESS_IMAGE" 'CMD ["/egress/serve.sh"]'

	engine_imported
	rm -rf "$stage"
	log "docker: images $ENGINE_EXECD_IMAGE, $ENGINE_SANDBOX_IMAGE, $ENGINE_CODE_IMAGE, $ENGINE_EGRESS_IMAGE built in $(($(date +%s%N) / 1000000 - t0)) ms"
}
