# Sourced by bench/run and bench/profile-epp: starts the testbed on a free
# loopback port with the given execd stand-in, as scripts/e2e does, and stops
# it (with every sandbox process) on exit. Sets $url and $key.
# usage: start_testbed <execd binary>
start_testbed() {
	local execd=$1
	tb_state=$(mktemp -d "${TMPDIR:-/tmp}/epp-bench.XXXXXX")
	key="bench-key-$RANDOM$RANDOM"
	setsid tests/testbed/testbed start --port 0 --api-key "$key" --state-dir "$tb_state/testbed" \
		--execd "$execd" >"$tb_state/testbed.log" 2>&1 &
	tb_pid=$!
	trap stop_testbed EXIT
	url=
	for _ in $(seq 600); do
		url=$(grep -o 'ready at http://[0-9.:]*' "$tb_state/testbed.log" | head -1 | cut -d' ' -f3) || true
		[[ -n $url ]] && return 0
		kill -0 "$tb_pid" 2>/dev/null || break
		sleep 0.2
	done
	cat "$tb_state/testbed.log" >&2
	echo "bench: the testbed did not start" >&2
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
