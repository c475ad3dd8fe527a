#!/bin/sh
# dmaguard vhost: usage errors exit 2, --help 0; a running server writes its counters as JSON
# on SIGUSR1, exits 0 on SIGTERM and removes its socket.
. "$(dirname "$0")/e2e_lib.sh"
expect 0 "$exe" vhost --help
expect 2 "$exe" vhost
expect 2 "$exe" vhost --socket "$tmp/s" --mode bogus
expect 2 "$exe" vhost --socket "$tmp/s" --ip 10.0.0
expect 2 "$exe" vhost --socket "$tmp/s" --mac 02:00
expect 2 "$exe" vhost --socket "$tmp/s" extra
expect 2 "$exe" vhost --socket "$tmp/s" --mode gen --frame-bytes 59
expect 2 "$exe" vhost --socket "$tmp/s" --mode gen --frame-bytes 9217
expect 2 "$exe" vhost --socket "$tmp/s" --mode gen --frame-bytes 64x
expect 2 "$exe" vhost --socket "$tmp/s" --mode sink --frame-bytes 128
"$exe" vhost --help | grep -q -- '--mode MODE.*echo' || { echo "FAIL: help"; fail=1; }
"$exe" vhost --help | grep -q 'gen (fill every receive buffer' || { echo "FAIL: help: gen"; fail=1; }
expect 1 "$exe" vhost --socket "$tmp/no/such/dir/s"

"$exe" vhost --socket "$tmp/s" --mode gen --frame-bytes 128 --stats-json "$tmp/stats.json" 2>"$tmp/log" &
pid=$!
(sleep 30 && kill -KILL $pid) >/dev/null 2>&1 & # bound the run: never hangs
watchdog=$!
n=0
while [ ! -S "$tmp/s" ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
[ -S "$tmp/s" ] || { echo "FAIL: no socket"; fail=1; }
kill -USR1 $pid
n=0
while [ ! -f "$tmp/stats.json" ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
grep -q '"connections": 0,' "$tmp/stats.json" 2>/dev/null ||
	{ echo "FAIL: no stats on SIGUSR1"; fail=1; }
grep -q '"outside_memtable": 0,' "$tmp/stats.json" 2>/dev/null ||
	{ echo "FAIL: stats without outside_memtable"; fail=1; }
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: exit $rc after SIGTERM"; fail=1; }
[ ! -e "$tmp/s" ] || { echo "FAIL: socket left behind"; fail=1; }
kill $watchdog 2>/dev/null
[ $fail -eq 0 ] || cat "$tmp/log"
exit $fail
