#!/bin/sh
# Check that every C source follows .clang-format (kernel layout). Prints offending files.
set -eu
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find include src bench tools tests examples -name '*.[ch]')
[ -n "$files" ] || exit 0
bad=0
for f in $files; do
	[ -f "$f" ] || continue
	if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
		echo "format: $f differs from .clang-format (run: clang-format -i $f)" >&2
		bad=1
	fi
done
exit $bad
