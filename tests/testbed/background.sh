# Sourced by the scripts that need a testbed while they run (scripts/e2e,
# tests/jco/run, tests/install/run, bench/run, bench/profile-epp): starts one on
# a free loopback port, in a process group of its own, and waits until it is
# ready; stop_testbed (run on EXIT) stops it with every sandbox process and
# removes its state. Sets $url, $key and $tb_log (its log, kept until then).
# usage: start_testbed NAME EXECD [KEY]
#   NAME   prefixes messages and names the state folder (e2e, jco, ...)
#   EXECD  the execd stand-in binary
#   KEY    the API key it requires (default: a random one)
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
		url=$(grep -o 'ready at http://[0-9.:]*' "$tb_log" | head -1 | cut -d' ' -f3) || true
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
