#!/bin/sh
# /init of the QEMU guest (packed by qemu_guest_prepare.sh): load virtio_net, give eth0
# 10.0.0.2/24, ping the back end (10.0.0.1) dg.count times with dg.size bytes, print the result
# line the test looks for, take eth0 down, unload virtio_net (the driver's teardown unmaps its
# rings: invalidations) and power off.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /tmp
count=2000
size=1400
interval=0.003
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	dg.count=*) count=${arg#dg.count=} ;;
	dg.size=*) size=${arg#dg.size=} ;;
	dg.interval=*) interval=${arg#dg.interval=} ;;
	esac
done
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci failover \
	net_failover virtio_net; do
	insmod /lib/modules/$m.ko || echo "DG-ERROR insmod $m"
done
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 50 ]; do
	sleep 0.1
	n=$((n + 1))
done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.0.2/24 dev eth0
read -r t0 _ </proc/uptime
ping -c "$count" -s "$size" -i "$interval" -W 5 -w 120 10.0.0.1 >/tmp/ping.out 2>&1
read -r t1 _ </proc/uptime
grep -v ' bytes from ' /tmp/ping.out
tx=$(sed -n 's/^\([0-9]*\) packets transmitted.*/\1/p' /tmp/ping.out)
rx=$(sed -n 's/.* \([0-9]*\) packets received.*/\1/p' /tmp/ping.out)
echo "DG-PING transmitted=${tx:-0} received=${rx:-0}"
# guest seconds from boot to the first ping, and the pings' (ping's -w deadline is 120 s)
echo "DG-TIME boot=$t0 ping=$(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}')"
grep round-trip /tmp/ping.out | sed "s/^/DG-RTT /"
# If a reply did not reach ping: which ones (the first 20), the slowest that did, and what the
# guest kernel saw (an echo reply it counted reached the guest intact, checksums checked).
awk -v n="$count" '/ bytes from /{
	for (i = 1; i <= NF; i++) {
		if ($i ~ /^seq=/) s = substr($i, 5)
		if ($i ~ /^time=/) t = substr($i, 6) + 0
	}
	seen[s] = 1
	if (t > worst) { worst = t; wseq = s }
}
END {
	m = 0
	for (i = 0; i < n; i++)
		if (!(i in seen)) { m++; if (m <= 20) out = out " " i }
	print "DG-MISSING " m " (seq" out ") slowest seq " wseq " " worst " ms"
}' /tmp/ping.out
awk '/^Icmp:/ {
	if (!h) { for (i = 2; i <= NF; i++) name[i] = $i; h = 1 }
	else for (i = 2; i <= NF; i++) v[name[i]] = $i
}
END { print "DG-ICMP InEchoReps=" v["InEchoReps"] " InErrors=" v["InErrors"] " InCsumErrors=" v["InCsumErrors"] }' /proc/net/snmp
cat /proc/net/dev
ip link set eth0 down
rmmod virtio_net && echo "DG-RMMOD ok"
echo "DG-DONE"
poweroff -f
