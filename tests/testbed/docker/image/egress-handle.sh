#!/bin/sh
# One HTTP request of the egress stand-in (serve.sh) on stdin, its answer on stdout.
# GET /healthz: 200. GET /policy with the sandbox's OPENSANDBOX-EGRESS-AUTH token: the
# policy the server handed over, in the shape of the egress API's PolicyStatusResponse.
# Anything else: 401 without the token, else 501.
cr=$(printf '\r')
IFS=' ' read -r method path _ || exit 0
auth=
while IFS= read -r line; do
	line=${line%"$cr"}
	[ -z "$line" ] && break
	case $(printf '%s' "${line%%:*}" | tr '[:upper:]' '[:lower:]') in
	opensandbox-egress-auth)
		auth=${line#*:}
		auth=${auth# }
		;;
	esac
done
respond() {
	printf 'HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' \
		"$1" "$(printf '%s' "$2" | wc -c)" "$2"
	exit 0
}
path=${path%%\?*}
[ "$path" = /healthz ] && respond "200 OK" '{"status":"ok"}'
[ -n "${OPENSANDBOX_EGRESS_TOKEN:-}" ] && [ "$auth" != "$OPENSANDBOX_EGRESS_TOKEN" ] &&
	respond "401 Unauthorized" '{"code":"UNAUTHORIZED","message":"missing or wrong OPENSANDBOX-EGRESS-AUTH"}'
if [ "$method" = GET ] && [ "$path" = /policy ]; then
	rules=${OPENSANDBOX_EGRESS_RULES:-"{}"}
	mode=deny_all
	case $rules in *'"defaultAction":"allow"'* | *'"defaultAction": "allow"'*) mode=allow_all ;; esac
	respond "200 OK" "{\"status\":\"ok\",\"mode\":\"$mode\",\"enforcementMode\":\"${OPENSANDBOX_EGRESS_MODE:-dns}\",\"policy\":$rules}"
fi
respond "501 Not Implemented" "{\"code\":\"NOT_IMPLEMENTED\",\"message\":\"testbed egress stand-in: $method $path is not served (it only reports the policy)\"}"
