#!/bin/sh
# Testbed stand-in for the egress sidecar (the image of [egress] image): the server
# starts it for a sandbox created with a networkPolicy, hands it the policy in
# OPENSANDBOX_EGRESS_RULES, runs the sandbox in its network namespace, publishes
# 44772, 8080 and 18080 from it and waits for GET /healthz on 18080. This one answers
# that and GET /policy (handle.sh); it enforces nothing: the testbed forwards nothing
# from its bridge anyway (the host's own services on 0.0.0.0 stay reachable at the
# bridge's address, 172.30.N.1).
echo "egress stand-in: mode ${OPENSANDBOX_EGRESS_MODE:-?}, rules ${OPENSANDBOX_EGRESS_RULES:-none}"
exec nc -ll -p 18080 -e /egress/handle.sh
