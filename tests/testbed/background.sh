# shellcheck shell=bash
# Sourced by the scripts that need a testbed while they run (scripts/e2e,
# tests/jco/run, tests/install/run, bench/run, bench/profile-epp): starts one on
# a free loopback port, in a process group of its own, and waits until it is
# ready; stop_testbed (run on EXIT) stops it with every sandbox process and
# removes its state. Sets $url, $key and $tb_log (its log, kept until then).
# usage: start_testbed NAME EXECD [KEY]
#   NAME   prefixes messages and names the state folder (e2e, jco, ...)
#   EXECD  the execd stand-in binary
#   KEY    the API key it requires (default: a random one)
# start_docker_testbed NAME EXECD [KEY] does the same for the Docker tier
# (`testbed start --docker`, root only) beside it; see there. With both, the EXIT
# trap is stop_testbeds (a script setting its own must call that).
testbed_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/testbed"

start_testbed() {
	local name=$1 execd=$2
	key=${3:-$name-key-$RANDOM$RANDOM}
	tb_state=$(mktemp -d "${TMPDIR:-/tmp}/epp-$name.XXXXXX")
	tb_log="$tb_state/testbed.log"
	setsid "$testbed_script" start --port 0 --api-key "$key" --state-dir "$tb_state/testbed" \
		--execd "$execd" >"$tb_log" 2>&1 &
	tb_pid=$!
	trap stop_testbed EXIT
	url=
	for _ in $(seq 600); do
		url=$(grep -so 'ready at http://[0-9.:]*' "$tb_log" | head -1 | cut -d' ' -f3) || true
		[[ -n $url ]] && return 0
		kill -0 "$tb_pid" 2>/dev/null || break
		sleep 0.2
	done
	cat "$tb_log" >&2
	echo "$name: the testbed did not start" >&2
	exit 1
}

stop_testbed() {
	[[ -n ${tb_pid:-} ]] || return 0
	kill -TERM -- "-$tb_pid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 -- "-$tb_pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL -- "-$tb_pid" 2>/dev/null || true
	rm -rf "$tb_state"
	tb_pid=
}

# usage: start_docker_testbed NAME EXECD [KEY]
# The Docker tier (the unpatched server on a dockerd of the testbed's own; needs
# root, installs docker.io when missing) on a free port. Sets $docker_url,
# $docker_key, $docker_host (the engine, unix://…: for docker -H or DOCKER_HOST),
# $docker_volumes (the host folder sandboxes may bind) and $docker_log; the EXIT
# trap becomes stop_testbeds.
start_docker_testbed() {
	local name=$1 execd=$2
	docker_key=${3:-$name-key-$RANDOM$RANDOM}
	docker_state=$(mktemp -d "${TMPDIR:-/tmp}/epp-$name-docker.XXXXXX")
	docker_log="$docker_state/testbed.log"
	setsid "$testbed_script" start --docker --port 0 --api-key "$docker_key" \
		--state-dir "$docker_state/testbed" --execd "$execd" >"$docker_log" 2>&1 &
	docker_pid=$!
	trap stop_testbeds EXIT
	docker_url=
	# Up to 3 minutes: a fresh machine installs docker.io first.
	for _ in $(seq 900); do
		docker_url=$(grep -so 'ready at http://[0-9.:]*' "$docker_log" | head -1 | cut -d' ' -f3) || true
		[[ -n $docker_url ]] && break
		kill -0 "$docker_pid" 2>/dev/null || break
		sleep 0.2
	done
	if [[ -z $docker_url ]]; then
		cat "$docker_log" >&2
		echo "$name: the Docker testbed did not start" >&2
		exit 1
	fi
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
	kill -TERM -- "-$docker_pid" 2>/dev/null || true
	for _ in $(seq 1500); do kill -0 -- "-$docker_pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL -- "-$docker_pid" 2>/dev/null || true
	docker_pid=
	if [[ -f $docker_state/testbed/docker/engine.env ]] &&
		! "$testbed_script" sweep "$docker_state/testbed"; then
		echo "testbed: the Docker tier's state stays in $docker_state (testbed sweep $docker_state/testbed)" >&2
		return 0
	fi
	rm -rf "$docker_state"
}

stop_testbeds() {
	stop_testbed
	stop_docker_testbed
}
