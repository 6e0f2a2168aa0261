# shellcheck shell=bash
# Sourced by the scripts that need a testbed while they run (scripts/e2e,
# tests/jco/run, tests/install/run, bench/run, bench/profile-epp): starts one on
# a free loopback port, in a process group of its own, and waits until it is
# ready; stop_testbeds (the EXIT trap either start function sets) stops it with
# every sandbox process and removes its state. Sets $url, $key and $tb_log (its
# log, kept until then).
# usage: start_testbed NAME EXECD [KEY]
#   NAME   prefixes messages and names the state folder (e2e, jco, ...)
#   EXECD  the execd stand-in binary
#   KEY    the API key it requires (default: a random one)
# start_docker_testbed NAME EXECD [KEY] does the same for the Docker tier
# (`testbed start --docker`, root only), before or after the other; see there.
# A script that sets an EXIT trap of its own must call stop_testbeds from it.
testbed_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testbed"

# launch_testbed PID_VAR STATE LOG TRIES [testbed start options]: `testbed start
# --port 0 --state-dir STATE/testbed OPTIONS` in a process group of its own, output to
# LOG; sets PID_VAR to its pid (the group's id) and the EXIT trap to stop_testbeds,
# then waits up to TRIES × 0.2 s for its "ready at" line. Sets $launched_url; status
# 1 when it never came (the testbed exited, or the time is up).
launch_testbed() {
	local pid_var=$1 state=$2 log=$3 tries=$4
	shift 4
	setsid "$testbed_script" start --port 0 --state-dir "$state/testbed" "$@" >"$log" 2>&1 &
	printf -v "$pid_var" %s "$!"
	trap stop_testbeds EXIT
	launched_url=
	for _ in $(seq "$tries"); do
		launched_url=$(grep -so 'ready at http://[0-9.:]*' "$log" | head -1 | cut -d' ' -f3) || true
		[[ -n $launched_url ]] && return 0
		kill -0 "${!pid_var}" 2>/dev/null || break
		sleep 0.2
	done
	return 1
}

# stop_group PGID TENTHS: SIGTERM to the process group, SIGKILL to what is left of it
# after TENTHS × 0.1 s.
stop_group() {
	kill -TERM -- "-$1" 2>/dev/null || true
	for _ in $(seq "$2"); do kill -0 -- "-$1" 2>/dev/null || break; sleep 0.1; done
	kill -KILL -- "-$1" 2>/dev/null || true
}

start_testbed() {
	local name=$1 execd=$2
	key=${3:-$name-key-$RANDOM$RANDOM}
	tb_state=$(mktemp -d "${TMPDIR:-/tmp}/epp-$name.XXXXXX")
	tb_log="$tb_state/testbed.log"
	if launch_testbed tb_pid "$tb_state" "$tb_log" 600 --api-key "$key" --execd "$execd"; then
		# shellcheck disable=SC2034 # for the sourcing script
		url=$launched_url
		return 0
	fi
	cat "$tb_log" >&2
	echo "$name: the testbed did not start" >&2
	exit 1
}

# Stops the local tier: SIGTERM (it stops its server and every sandbox process: 20 s
# at worst), SIGKILL after 30 s; removes its state.
stop_testbed() {
	[[ -n ${tb_pid:-} ]] || return 0
	stop_group "$tb_pid" 300
	tb_pid=
	rm -rf "$tb_state"
}

# usage: start_docker_testbed NAME EXECD [KEY]
# The Docker tier (the unpatched server on a dockerd of the testbed's own; needs
# root, installs docker.io when missing) on a free port. Sets $docker_url,
# $docker_key, $docker_host (the engine, unix://…: for docker -H or DOCKER_HOST),
# $docker_volumes (the host folder sandboxes may bind) and $docker_log.
start_docker_testbed() {
	local name=$1 execd=$2
	docker_key=${3:-$name-key-$RANDOM$RANDOM}
	docker_state=$(mktemp -d "${TMPDIR:-/tmp}/epp-$name-docker.XXXXXX")
	docker_log="$docker_state/testbed.log"
	# Up to 3 minutes: a fresh machine installs docker.io first.
	if ! launch_testbed docker_pid "$docker_state" "$docker_log" 900 --docker --api-key "$docker_key" --execd "$execd"; then
		cat "$docker_log" >&2
		echo "$name: the Docker testbed did not start" >&2
		exit 1
	fi
	# shellcheck disable=SC2034 # for the sourcing script, as the three below
	docker_url=$launched_url
	# shellcheck disable=SC2034 # for the sourcing script
	docker_host=$(grep -o 'engine DOCKER_HOST=unix://[^;]*' "$docker_log" | head -1 | cut -d= -f2)
	# shellcheck disable=SC2034
	docker_volumes=$(grep -o 'host paths for volumes under .*' "$docker_log" | head -1 | sed 's/^host paths for volumes under //')
}

# Stops the Docker tier: SIGTERM (it removes every container, stops its engine and
# cleans up after it), SIGKILL after 150 s (its own stop takes about 2 min at worst:
# see cleanup in the testbed script), then, whenever its engine.env is still there
# (killed, crashed, or its own sweep failed), `testbed sweep` for what it left. The
# state folder goes only once nothing of the engine is left.
stop_docker_testbed() {
	[[ -n ${docker_pid:-} ]] || return 0
	stop_group "$docker_pid" 1500
	docker_pid=
	if [[ -f $docker_state/testbed/docker/engine.env ]] &&
		! "$testbed_script" sweep "$docker_state/testbed"; then
		echo "testbed: the Docker tier's state stays in $docker_state (testbed sweep $docker_state/testbed)" >&2
		return 0
	fi
	rm -rf "$docker_state"
}

# The EXIT trap of both start functions: whichever tiers were started.
stop_testbeds() {
	stop_testbed
	stop_docker_testbed
}
