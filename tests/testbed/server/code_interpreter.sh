#!/usr/bin/env bash
# Testbed stand-in for the code-interpreter image's entrypoint
# (/opt/code-interpreter/code-interpreter.sh; the local runtime runs this instead).
# Like the image's script it runs the Jupyter server that execd's /code talks to, in the
# foreground, on 127.0.0.1:$JUPYTER_PORT with token $JUPYTER_TOKEN (both from the image's
# environment, set per sandbox by the runtime). The image runs `jupyter notebook` (the
# notebook app on jupyter_server); the REST and kernel-channel API execd uses is
# jupyter_server's, so plain `jupyter server` serves it. Its root is the working directory
# (the sandbox folder here, /workspace in the image): Jupyter resolves a session's
# path, and so a code context's cwd, below it.
# Jupyter's IOPub rate limits stay at their defaults, as in the image (1000 messages/s and
# 1 MB/s over 3 s: more output is dropped, with an "IOPub data rate exceeded" stderr
# event); TESTBED_JUPYTER_LIMIT_RATE=0 in the sandbox's env turns them off (testbed knob).
set -euo pipefail
: "${JUPYTER_PORT:?JUPYTER_PORT is not set (not a code-interpreter sandbox?)}"
: "${JUPYTER_TOKEN:?JUPYTER_TOKEN is not set}"
command -v jupyter >/dev/null || {
	echo "code-interpreter: jupyter is not on PATH (run tests/testbed/testbed setup)" >&2
	exit 127
}
exec jupyter server --no-browser --allow-root \
	--ServerApp.ip=127.0.0.1 --ServerApp.port="$JUPYTER_PORT" --ServerApp.port_retries=0 \
	--ServerApp.token="$JUPYTER_TOKEN" --ServerApp.root_dir="$PWD" \
	--ZMQChannelsWebsocketConnection.limit_rate="$([[ ${TESTBED_JUPYTER_LIMIT_RATE:-1} == 0 ]] && echo False || echo True)"
