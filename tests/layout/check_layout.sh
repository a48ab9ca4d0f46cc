#!/bin/bash
# The layout is a build fact: a child library never references netlink
# (libnftnl, libmnl), and the parsers library references nothing but libc,
# libyaml, jansson and itself. Reads the static archives with nm.
#   usage: check_layout.sh PARSERS_ARCHIVE PRIV_ARCHIVE CHILD_ARCHIVE...
set -u
fail=0
parsers="$1"
priv="$2"
shift 2

undefined() { nm -u --format=posix "$1" 2>/dev/null | awk '$1 !~ /:$/ {print $1}' | sort -u; }
defined() { nm --defined-only --format=posix "$1" 2>/dev/null | awk '$1 !~ /:$/ && $2 ~ /[TDBRWtdbr]/ {print $1}' | sort -u; }

for a in "$@"; do
	bad=$(undefined "$a" | grep -E '^(nftnl_|mnl_)' | head -5)
	if [ -n "$bad" ]; then
		echo "FAIL $(basename "$a") references netlink: $(echo $bad)"
		fail=1
	else
		echo "ok   $(basename "$a") has no nftnl_/mnl_ reference"
	fi
done
if undefined "$priv" | grep -qE '^(nftnl_|mnl_)'; then
	echo "ok   $(basename "$priv") is where netlink is used"
else
	echo "FAIL $(basename "$priv") does not reference netlink: the check would prove nothing"
	fail=1
fi

# The children's code has no include cycle: the shared child state
# (egressd/child/, but worker.c, which picks each role's service) knows
# none of the role folders, and the vault's routes do not call back into
# the API that owns them (they share egressd/control/httpreply.h).
src="${EGRESSD_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
for f in "$src"/egressd/child/*.[ch]; do
	[ "$(basename "$f")" = worker.c ] && continue
	bad=$(grep -oE '#include "egressd/(control|dns|intercept)/[a-z_]+\.h"' "$f" | head -3)
	if [ -n "$bad" ]; then
		echo "FAIL egressd/child/$(basename "$f") includes a role's module: $(echo $bad)"
		fail=1
	fi
done
if grep -q '#include "egressd/control/api.h"' "$src"/egressd/control/vaultapi.[ch]; then
	echo "FAIL egressd/control/vaultapi includes api.h (api.c includes vaultapi.h: a cycle)"
	fail=1
fi
[ "$fail" = 0 ] && echo "ok   no include cycle between the child state, the API and the vault's routes"

# libc's exported symbols (and the compiler's runtime) are the only
# outside names the parsers may use besides libyaml and jansson.
libc=$(ldd /bin/true | awk '/libc\.so/ {print $3}')
allowed=$(mktemp)
trap 'rm -f "$allowed"' EXIT
{
	nm -D --defined-only --format=posix "$libc" | awk '{print $1}' | sed 's/@.*//'
	defined "$parsers"
} | sort -u >"$allowed"
extra=$(undefined "$parsers" | grep -vE '^(yaml_|json_|jansson_|__asan|__ubsan|__sanitizer|__lsan|_GLOBAL_OFFSET_TABLE_|__stack_chk_fail|__tls_get_addr)' |
	grep -vxF -f "$allowed" | head -10)
if [ -n "$extra" ]; then
	echo "FAIL $(basename "$parsers") references outside libc/libyaml/jansson: $(echo $extra)"
	fail=1
else
	echo "ok   $(basename "$parsers") links only libc, libyaml and jansson"
fi
exit $fail
