#!/bin/bash
# Check the README's two commands on a fresh Debian bookworm system: a
# debootstrap chroot that has nothing but the minimal base. Not run by CI;
# it is how a developer checks a change to the install steps.
#
#   scripts/fresh-check.sh [--reset] [REF]
#
# FRESH_CMDS (default "demo test") names which of the two run, e.g.
# FRESH_CMDS=demo for the install steps and the build alone.
# REF (default HEAD) of this repository is cloned into the chroot at
# /root/src/egressd, ../shared beside it, and `./egress demo` then
# `./egress test` run inside as root; the end prints how long each took and
# the stage times of `./egress test`. Exit status: that of the first
# command that failed.
#
# The pristine base is a tarball (FRESH_BASE, default
# /var/tmp/egfresh-base.tar), made once with debootstrap --variant=minbase
# from the mirror this machine's apt uses; the chroot (FRESH_ROOT, default
# /var/tmp/egfresh) is unpacked from it when missing, or always with
# --reset (which is what "from nothing" means: nothing installed by an
# earlier run survives). The mounts live in a mount namespace of the
# check's own (see below), so nothing is left mounted. Needs root,
# debootstrap (installed when missing) and the
# Debian mirror; the tests themselves only use namespaces they create.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${FRESH_ROOT:-/var/tmp/egfresh}"
BASE="${FRESH_BASE:-/var/tmp/egfresh-base.tar}"
LOG="${FRESH_LOG:-$ROOT.log}"
reset=0
ref=HEAD
while [ $# -gt 0 ]; do
	case "$1" in
	--reset) reset=1 ;;
	-h | --help)
		sed -n '2,22p' "$0"
		exit 0
		;;
	-*)
		echo "fresh-check: unknown option $1" >&2
		exit 2
		;;
	*) ref="$1" ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { echo "fresh-check: run as root" >&2; exit 2; }
# One check at a time per chroot.
exec 9>"$ROOT.lock"
flock -n 9 || { echo "fresh-check: another check holds $ROOT.lock" >&2; exit 2; }
sha="$(git -C "$here" rev-parse --verify "$ref^{commit}")"

# The mirror of this machine's apt (deb822 or one-line sources).
mirror="${FRESH_MIRROR:-}"
if [ -z "$mirror" ]; then
	mirror="$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/*$/\1/p' \
		/etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)"
fi
if [ -z "$mirror" ]; then
	mirror="$(sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\/debian\)\/\?[[:space:]]\+bookworm[[:space:]].*/\2/p' \
		/etc/apt/sources.list 2>/dev/null | head -n 1)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"

# Mounts under the chroot from outside this script's namespace (an
# interrupted earlier check) would mislead the tests: refuse them.
has_mounts() { awk -v r="$ROOT" '$2 == r || index($2, r "/") == 1 { f = 1 } END { exit !f }' /proc/self/mounts; }

if [ ! -s "$BASE" ]; then
	command -v debootstrap >/dev/null ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
	tmp="$BASE.d"
	rm -rf "$tmp"
	echo "fresh-check: debootstrap --variant=minbase bookworm from $mirror"
	debootstrap --variant=minbase bookworm "$tmp" "$mirror" >"$BASE.debootstrap.log" 2>&1 ||
		{ tail -n 20 "$BASE.debootstrap.log" >&2; exit 1; }
	# A fresh install also has the updates and security suites.
	sec="${mirror%/debian}/debian-security"
	printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
		"$mirror" "$mirror" "$sec" >"$tmp/etc/apt/sources.list"
	rm -rf "$tmp"/var/cache/apt/archives/*.deb
	tar -C "$tmp" --numeric-owner -cf "$BASE.tmp" . && mv "$BASE.tmp" "$BASE"
	rm -rf "$tmp"
fi
if has_mounts; then
	echo "fresh-check: something is mounted under $ROOT; unmount it first" >&2
	exit 1
fi
if [ "$reset" = 1 ] || [ ! -d "$ROOT/usr" ]; then
	rm -rf "$ROOT"
	mkdir -p "$ROOT"
	tar -C "$ROOT" --numeric-owner -xf "$BASE"
	echo "fresh-check: $ROOT unpacked from $BASE"
fi

cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The site's own CA certificates (a TLS-inspecting egress proxy in front of
# the Debian and npm registries, say) are this machine's network, as its
# resolv.conf is: the chroot gets them, and npm is told to trust the
# system bundle (ca-certificates, installed by deps.sh, adds them to it).
site_ca=0
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
	mkdir -p "$ROOT/usr/local/share/ca-certificates"
	cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
	site_ca=1
fi

# The repository at REF, as a user would have cloned it, and ../shared.
src="$ROOT/root/src"
rm -rf "$src"
mkdir -p "$src"
git clone -q --no-local --no-checkout "$here" "$src/egressd"
git -C "$src/egressd" -c advice.detachedHead=false checkout -q "$sha"
[ -d "$here/../shared" ] && cp -a "$here/../shared" "$src/shared"
echo "fresh-check: $(git -C "$here" log -1 --format='%h %s' "$sha" | cut -c1-100)"
echo "fresh-check: log in $LOG"

# The commands run in a mount namespace of their own whose root is the
# chroot (pivot_root, not chroot: podman exec and ip netns exec enter
# namespaces, and setns would leave a chroot for the machine's root). It
# has what a booted machine has and the tests need: proc, sys (with the
# cgroup hierarchies podman uses), dev with pts, a fresh /dev/shm and a
# tmpfs /run (ip netns keeps its namespaces in /run/netns). The mounts
# live only in that namespace: they vanish with it, nothing to unmount.
cat >"$ROOT/root/fresh-run.sh" <<'RUN'
# Run inside the chroot by scripts/fresh-check.sh: the README's two commands.
cd /root/src/egressd || exit 2
rc=0
for c in @CMDS@; do
	t0=$(date +%s)
	r=0
	./egress "$c" || r=$?
	printf '%-14s %5ss  %s\n' "egress $c" "$(($(date +%s) - t0))" \
		"$([ $r -eq 0 ] && echo ok || echo "FAILED ($r)")" >>/root/fresh-times
	[ $rc -ne 0 ] || rc=$r
done
exit $rc
RUN
sed -i "s/@CMDS@/${FRESH_CMDS:-demo test}/" "$ROOT/root/fresh-run.sh"
inner='set -eu
R=$1
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$R/run"
mkdir -p "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
exec /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 $2 \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash /root/fresh-run.sh'
: >"$LOG"
rm -f "$ROOT/root/fresh-times"
rc=0
extra=""
[ $site_ca = 1 ] && extra="NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt"
unshare --mount --propagation private /bin/bash -c "$inner" fresh-check "$ROOT" "$extra" >>"$LOG" 2>&1 || rc=$?
echo "== demo output"
sed -n '/^  DNS /,/workload saw/p' "$LOG"
echo "== egress test stages"
sed -n '/^== stages$/,$p' "$LOG" | sed 1d
echo "== fresh-check ($sha)"
sed 's/^/  /' "$ROOT/root/fresh-times" 2>/dev/null
[ $rc -eq 0 ] && echo "fresh-check: green on a fresh bookworm" || echo "fresh-check: FAILED (log: $LOG)"
exit $rc
