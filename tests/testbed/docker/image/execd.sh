#!/bin/sh
# /execd of the testbed's execd image. The server copies it into every sandbox as
# /opt/opensandbox/execd and bootstrap.sh starts it: it runs the execd stand-in
# (tests/testbed/execd), which [docker] sandbox_binds mounts read-only from the host,
# on execd's port. Arguments are passed on.
exec /opt/testbed/execd-standin --listen 0.0.0.0:44772 "$@"
