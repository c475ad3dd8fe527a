#!/bin/sh
# Install the Debian packages dmaguard needs, only those missing; a no-op when all are present.
#   scripts/install-deps.sh [base] [e2e] [fuzz]
# base: build, unit/stress tests, sanitizers, benchmarks and plots.
# e2e:  the QEMU guest test of the vhost-user back end.
# fuzz: clang and its libFuzzer runtime (make fuzz).
set -eu

want=""
for set in "${@:-base}"; do
	case "$set" in
	base) want="$want meson ninja-build pkg-config gcc libc6-dev libcmocka-dev libjansson-dev
		gnuplot-nox valgrind clang-format" ;;
	e2e) want="$want qemu-system-x86 busybox-static cpio" ;;
	fuzz) want="$want clang libclang-rt-14-dev" ;;
	*) echo "install-deps: unknown set '$set' (base, e2e, fuzz)" >&2; exit 2 ;;
	esac
done

missing=""
for p in $want; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing$missing" >&2
if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing packages and not root; run: apt-get install$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends $missing >/dev/null; then
	apt-get update >/dev/null
	apt-get install -y --no-install-recommends $missing >/dev/null
fi
