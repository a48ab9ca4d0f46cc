#!/bin/bash
# `egressd check|explain|test` parse with no capability at all (issue 13
# item 3): even run by root, the CLI drops its whole capability set
# before it opens the first file. The policy file is a FIFO, so the CLI
# blocks at the moment it starts to read, and its /proc status is read
# right then.
. "$(dirname "$0")/nslib.sh"
mkfifo "$TMP/policy.yaml"
for sub in check explain; do
	if [ "$sub" = explain ]; then args=(explain "$TMP/policy.yaml" api.allowed.test); else args=(check "$TMP/policy.yaml"); fi
	"$EGRESSD_BIN" "${args[@]}" >"$TMP/$sub.out" 2>&1 &
	cli=$!
	PIDS+=($cli)
	# Wait (bounded) until it is blocked opening the FIFO.
	for i in $(seq 1 100); do
		grep -q "fifo\|pipe\|partner" "/proc/$cli/wchan" 2>/dev/null && break
		sleep 0.05
	done
	check "egressd $sub is blocked reading its policy file" grep -q "fifo\|pipe\|partner" "/proc/$cli/wchan"
	check "egressd $sub (as root) holds no effective capability while it reads" \
		grep -q "^CapEff:[[:space:]]*0000000000000000" "/proc/$cli/status"
	check "  nor a permitted one" grep -q "^CapPrm:[[:space:]]*0000000000000000" "/proc/$cli/status"
	check "  nor a bounding one" grep -q "^CapBnd:[[:space:]]*0000000000000000" "/proc/$cli/status"
	check "  and has no_new_privs" grep -q "^NoNewPrivs:[[:space:]]*1" "/proc/$cli/status"
	# End it by its pid while it waits (writing would race its refusal of a FIFO).
	kill "$cli" 2>/dev/null
	wait "$cli" 2>/dev/null
done
printf 'egress:\n  - {action: allow, target: api.allowed.test}\n' >"$TMP/ok.yaml"
check "without capabilities egressd check still validates a root-owned 0600 file" \
	bash -c "chmod 600 '$TMP/ok.yaml' && '$EGRESSD_BIN' check '$TMP/ok.yaml'"
ns_finish
