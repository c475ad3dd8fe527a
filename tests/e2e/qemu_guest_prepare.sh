#!/bin/sh
# Prepare what the QEMU guest tests need, once, cached between runs (tests/e2e/cache/ by
# default, or $DG_E2E_CACHE): the Debian cloud kernel (vmlinuz + the virtio modules) and a busybox
# initramfs whose /init brings up eth0, pings the back end, tears the interface down, unloads
# virtio_net and powers off. Safe to run concurrently (flock); prints the cache directory.
#   qemu_guest_prepare.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${DG_E2E_CACHE:-$here/cache}
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

"$here/../../scripts/install-deps.sh" e2e >&2

if [ ! -f "$cache/vmlinuz" ] || [ ! -d "$cache/modules" ]; then
	pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
		awk '/Depends: linux-image-/{print $2; exit}')
	if [ -z "$pkg" ]; then
		apt-get update >/dev/null 2>&1 || true
		pkg=$(apt-cache depends linux-image-cloud-amd64 |
			awk '/Depends: linux-image-/{print $2; exit}')
	fi
	[ -n "$pkg" ] || { echo "prepare: cannot resolve linux-image-cloud-amd64" >&2; exit 1; }
	tmp=$(mktemp -d "$cache/kernel.XXXXXX")
	(cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) ||
		{ echo "prepare: apt-get download $pkg failed" >&2; rm -rf "$tmp"; exit 1; }
	dpkg-deb -x "$tmp"/*.deb "$tmp/root"
	mkdir -p "$tmp/modules"
	for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci \
		failover net_failover virtio_net; do
		f=$(find "$tmp/root/lib/modules" -name "$m.ko*" | head -n 1)
		[ -n "$f" ] || { echo "prepare: module $m not found in $pkg" >&2; exit 1; }
		case "$f" in
		*.xz) xz -dc "$f" >"$tmp/modules/$m.ko" ;;
		*.zst) zstd -dqc "$f" >"$tmp/modules/$m.ko" ;;
		*) cp "$f" "$tmp/modules/$m.ko" ;;
		esac
	done
	cp "$tmp"/root/boot/vmlinuz-* "$cache/vmlinuz.new"
	rm -rf "$cache/modules"
	mv "$tmp/modules" "$cache/modules"
	mv "$cache/vmlinuz.new" "$cache/vmlinuz"
	echo "$pkg" >"$cache/kernel-package"
	rm -rf "$tmp" "$cache/initrd.gz"
fi

if [ ! -f "$cache/initrd.gz" ] || [ "$here/qemu_guest_init.sh" -nt "$cache/initrd.gz" ]; then
	tmp=$(mktemp -d "$cache/initrd.XXXXXX")
	mkdir -p "$tmp/bin" "$tmp/sbin" "$tmp/proc" "$tmp/sys" "$tmp/dev" "$tmp/lib/modules"
	cp /bin/busybox "$tmp/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ "$a" = busybox ] || ln -s busybox "$tmp/bin/$a"
	done
	cp "$cache"/modules/*.ko "$tmp/lib/modules/"
	cp "$here/qemu_guest_init.sh" "$tmp/init"
	chmod 755 "$tmp/init"
	(cd "$tmp" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$cache/initrd.gz.new"
	mv "$cache/initrd.gz.new" "$cache/initrd.gz"
	rm -rf "$tmp"
fi
echo "$cache"
