#!/bin/sh
# Install the library into a scratch prefix and build every example against the installed
# headers and pkg-config file only, then run them. Used by make test.
set -eu
build=${1:-build}
cd "$(dirname "$0")/.."
dest=$(pwd)/$build/install-test
rm -rf "$dest"
meson install -C "$build" --destdir "$dest" --no-rebuild >/dev/null
prefix=$(meson introspect "$build" --buildoptions | sed -n 's/.*"name": "prefix", "value": "\([^"]*\)".*/\1/p')
[ -n "$prefix" ] || prefix=/usr/local
libdir=$(find "$dest$prefix" -name 'dmaguard.pc' -printf '%h\n' | head -n 1)
[ -n "$libdir" ] || { echo "test-install: dmaguard.pc not installed" >&2; exit 1; }
test -x "$dest$prefix/bin/dmaguard" || { echo "test-install: dmaguard tool not installed" >&2; exit 1; }
test -f "$dest$prefix/include/dmaguard/pt.h" || { echo "test-install: headers not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$libdir"
export PKG_CONFIG_SYSROOT_DIR="$dest"
# Exported symbols are exactly the public dg_ functions.
so=$(find "$dest$prefix" -name 'libdmaguard.so.*' -type f | head -n 1)
leaked=$(nm -D --defined-only "$so" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^dg_' || true)
if [ -n "$leaked" ]; then
	echo "test-install: symbols exported without the dg_ prefix:" $leaked >&2
	exit 1
fi
for src in examples/*.c; do
	[ -f "$src" ] || continue
	exe="$build/install-test/$(basename "$src" .c)"
	# shellcheck disable=SC2046
	cc -std=c11 -Wall -Wextra -Werror -o "$exe" "$src" $(pkg-config --cflags --libs dmaguard) \
		-Wl,-rpath,"$(dirname "$so")"
	"$exe" >/dev/null
done
