#!/bin/bash
# Black-box port of upstream's components/egress/tests/smoke-dynamic-ip.sh
# (opensandbox-group/OpenSandbox, last changed in dfb38f61, read at HEAD
# 3bb6fad3) to the netns fixture (issue 17 item 8): default deny plus one
# allowed name in dns+nft mode; the name's resolved address must become
# reachable (learned into nft) with no IP rule in the policy. The name and
# address mapping is in upstream_smoke.sh. Upstream check -> line here:
#
#   start dns+nft, upstream DNS 8.8.8.8,8.8.4.4 -> ns_egressd MODE=dns+nft
#   poll /healthz (50 x 0.5 s)        -> "healthz answers 200 without a token"
#   POST deny-default, allow google.com (curl -f)
#                                     -> "POST deny-default, allow google.com answers 200"
#   https://google.com succeeds (dynamic IP)
#                                     -> "google.com allowed"
#   api.github.com fails              -> "api.github.com blocked"
#   `curl -I 1.1.1.1` (plain HTTP, port 80) fails
#                                     -> "198.51.100.7 (1.1.1.1) blocked"
#
# Deviations, each for a reason:
# - egressd requires an API token (upstream's is optional and the script
#   sends none): the policy call carries the fixture's token.
# - One fake resolver instead of 8.8.8.8,8.8.4.4 (the fixture has one).
# - Failures are counted instead of aborting the script.
# The extras marked "(egressd)" are not upstream's: they show that the
# address was refused before the lookup and learned by it (the "dynamic
# IP" of upstream's comment), and that 1.1.1.1's stand-in does answer when
# allowed, so "blocked" is the policy's doing.
. "$(dirname "$0")/nslib.sh"
. "$(dirname "$0")/upstream_smoke.sh"
ns_up
mkdir -p "$TMP/always"
us_dns
us_servers

ns_egressd OPENSANDBOX_EGRESS_MODE=dns+nft
check "healthz answers 200 without a token" us_wait_healthz
us_push "POST deny-default, allow google.com answers 200" POST \
	'{"defaultAction":"deny","egress":[{"action":"allow","target":"google.com"}]}'

refute "(egressd) google.com's address is refused before any lookup" \
	run_in_app -I https://203.0.113.10 --max-time 5
check "google.com allowed" run_in_app -I https://google.com --max-time 20
check "(egressd) its address was learned into learned4" nft_has learned4 203.0.113.10
refute "api.github.com blocked" run_in_app -I https://api.github.com --max-time 8
refute "198.51.100.7 (1.1.1.1) blocked" run_in_app -I 198.51.100.7 --max-time 8

us_push "(egressd) PATCH allow 198.51.100.7 answers 200" PATCH \
	'[{"action":"allow","target":"198.51.100.7"}]'
check "(egressd) 198.51.100.7 answers once allowed, so the block was the policy's" \
	run_in_app -I 198.51.100.7 --max-time 8
ns_finish
