#!/bin/bash
# Install the Debian packages egressd needs to build, test and demo, and
# only those that are missing: a second run does nothing and is quick.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

pkgs=(
	# build
	build-essential cmake pkg-config clang-format
	libssl-dev libevent-dev libc-ares-dev libnftnl-dev libmnl-dev libyaml-dev
	libjansson-dev libcmocka-dev
	# HTTP/2 toward the workload and upstream on terminated connections
	# (vault/icpt_h2.c); the runtime library libnghttp2-14 comes with it
	libnghttp2-dev
	# run and test
	nftables iproute2 util-linux dnsmasq-base curl socat dnsutils netcat-openbsd
	tcpdump openssl python3 python3-dnslib ca-certificates procps valgrind
	# a real forward proxy for the chained upstream proxy test
	tinyproxy
	# HTTP/2: a real gRPC server and client (tests/netns/test_grpc.sh),
	# python3-h2 for frames grpc will not send (another :authority on the
	# same connection), h2load for the h2 row of bench/vault
	python3-grpcio python3-h2 nghttp2-client
	# strace counts the raw passthrough relay's system calls (test_splice)
	strace
	# nftables only recommends netbase, and we install without recommends:
	# nft names protocols from its /etc/protocols (the tests compare `nft
	# list` output), and its postinst writes the /etc/hosts that `ip netns
	# exec` binds a namespace's hosts file over. A minimal system has neither.
	netbase
)
if [ -f "$here/tests/exfil/deps.txt" ]; then
	while read -r p; do
		p="${p%%#*}"
		p="$(echo "$p" | tr -d '[:space:]')"
		[ -n "$p" ] && pkgs+=("$p")
	done <"$here/tests/exfil/deps.txt"
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "egress: missing packages: ${missing[*]}; run as root to install them" >&2
		exit 1
	fi
	echo "egress: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Test-only npm packages, each at the versions of its package-lock.json:
# tests/otlp (the OTLP receiver decodes with the OpenTelemetry project's
# generated protobuf code) and tests/sdk (the real OpenSandbox JS SDK that
# drives the control API). The machine's node and npm, else Debian's.
for dir in "$here/tests/otlp" "$here/tests/sdk"; do
	lock="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
	[ "$(cat "$dir/node_modules/.egressd-lock" 2>/dev/null)" = "$lock" ] && continue
	if ! command -v npm >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
	fi
	echo "egress: installing the npm packages of ${dir#"$here/"}"
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || exit 1
	echo "$lock" >"$dir/node_modules/.egressd-lock"
done
