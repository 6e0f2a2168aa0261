#!/bin/sh
# /bootstrap.sh of the testbed's execd image, which the server copies into every
# sandbox as /opt/opensandbox/bootstrap.sh and makes its entrypoint, the request's
# entrypoint as arguments: like execd's own, it starts execd in the background, then
# runs the entrypoint in its place (`-c CMD` or $BOOTSTRAP_CMD: a shell command).
# Without the real one's mitmproxy CA, pre-script and lifecycle handling.
set -e
EXECD="${EXECD:=/opt/opensandbox/execd}"
EXECD_ENVS="${EXECD_ENVS:-/opt/opensandbox/.env}"
mkdir -p "$(dirname "$EXECD_ENVS")" 2>/dev/null || echo "warning: failed to create dir for EXECD_ENVS=$EXECD_ENVS" >&2
touch "$EXECD_ENVS" 2>/dev/null || echo "warning: failed to touch EXECD_ENVS=$EXECD_ENVS" >&2
export EXECD_ENVS
echo "starting OpenSandbox Execd daemon at $EXECD."
"$EXECD" &
CMD=
if [ -n "${BOOTSTRAP_CMD:-}" ]; then
	CMD=$BOOTSTRAP_CMD
elif [ $# -ge 1 ] && [ "$1" = "-c" ]; then
	shift
	CMD="$*"
fi
if [ -n "$CMD" ]; then
	exec /bin/sh -c "$CMD"
fi
if [ $# -eq 0 ]; then
	wait
	exit
fi
exec "$@"
