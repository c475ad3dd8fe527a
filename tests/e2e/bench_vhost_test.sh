#!/bin/sh
# dmaguard bench vhost-pvp: a --quick run writes a JSON report that bench_vhost_json_check
# accepts (the DPDK comparison is skipped with --quick); fixed-count mode; --list; unknown
# cases and options exit 2.
. "$(dirname "$0")/e2e_lib.sh"
out=$tmp/out.json
"$exe" bench vhost-pvp --duration 0.1 --rounds 3 --quick --json "$out" >/dev/null ||
	{ echo "FAIL: vhost-pvp quick run"; fail=1; }
"$check" "$out" || fail=1
[ "$("$exe" bench vhost-pvp --list | tr '\n' ' ')" = "off strict lazy gen " ] ||
	{ echo "FAIL: vhost-pvp --list"; fail=1; }
"$exe" bench vhost-pvp --case strict --ops 1000 | grep -q 'case=strict ops=1024 fixed_count=1' ||
	{ echo "FAIL: vhost-pvp fixed-count mode"; fail=1; }
"$exe" bench vhost-pvp --case gen --ops 100 | grep -q 'case=gen ops=128 fixed_count=1' ||
	{ echo "FAIL: vhost-pvp fixed-count mode (gen)"; fail=1; }
expect_usage_errors "bench vhost-pvp" "--case no-such-case" "--bogus"
exit $fail
