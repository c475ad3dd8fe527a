/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/vhost/msg_fuzz.c - the vhost-user message parser and everything behind it, fed
 * random and mutated message sequences, with the data path run after every message.
 *
 * Input: one mode byte, then records {u8 fds; u16 len (LE); len bytes of message}.
 *  mode bit 0: IOMMU offered/negotiated by the fake front end; bit 1: start with a valid
 *  session (negotiation, memory table, both rings, the whole region granted when the IOMMU is
 *  on), so mutations reach the IOTLB and ring code; bit 2: the bytes after the last record
 *  are copied over the transmit ring (descriptors and avail ring; the receive ring in gen
 *  mode), so the chain walker sees arbitrary rings; bits 4-5: the back end's mode, 1 loop,
 *  2 gen, else echo.
 *  record fds: bits 0-2 = how many dups of the guest memory fd to attach, bit 3 = attach a
 *  pipe (not mappable) as well.
 * Checked: no crash or sanitizer report, every fd handed over is closed or kept (the harness
 * checks the process's fd count does not grow across inputs), and the memory-table defence
 * counter stays 0 (nothing outside the table was ever about to be touched).
 */
#include "../../unit/vhost/fake_frontend.h"

#include <dirent.h>
#include <stdio.h>

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n++;
	closedir(d);
	return n;
}

static int baseline = -1;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fe f;
	size_t off = 1;

	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	bool gen = (mode & 0x30) == 0x20;
	uint32_t ring = gen ? 0 : 1; /* the ring bit 2 overwrites: the one the mode consumes */

	enum dg_vhost_mode m = (mode & 0x30) == 0x10 ? DG_VHOST_LOOP : DG_VHOST_ECHO;

	if (gen)
		m = DG_VHOST_GEN;
	if (fe_init(&f, m, mode & 1)) {
		fe_fini(&f);
		return 0;
	}
	if (mode & 2) {
		if (fe_start(&f) == 0 && f.iommu)
			(void)fe_map(&f, FE_GPA_BASE, FE_MEM_SIZE, VU_ACCESS_RW);
		fe_rx_post(&f, 0);
	}
	while (off + 3 <= size) {
		uint8_t fl = data[off];
		size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
		int fds[9], nfds = 0;

		off += 3;
		if (len > size - off)
			len = size - off;
		for (int i = 0; i < (fl & 7); i++)
			fds[nfds++] = dup(f.memfd);
		if (fl & 8) {
			int p[2];

			if (pipe(p) == 0) {
				fds[nfds++] = p[0];
				close(p[1]);
			}
		}
		(void)dg_vhost_handle_message(f.v, data + off, len, fds, (size_t)nfds, f.reply,
					      &f.reply_len);
		(void)dg_vhost_poll(f.v, NULL);
		off += len;
		if (len == 0)
			break;
	}
	if ((mode & 4) && off < size) {
		size_t n = size - off;

		if (n > 0x1000 + 4 + 2 * FE_QSIZE)
			n = 0x1000 + 4 + 2 * FE_QSIZE;
		memcpy(fe_ptr(&f, FE_RING(ring)), data + off, n < 0x1000 ? n : 0x1000);
		if (n > 0x1000)
			memcpy(fe_ptr(&f, FE_RING(ring) + 0x1000), data + off + 0x1000, n - 0x1000);
		for (int i = 0; i < 3; i++)
			(void)dg_vhost_poll(f.v, NULL);
	}

	struct dg_vhost_stats s;
	dg_vhost_get_stats(f.v, &s);
	if (s.outside_memtable) {
		fprintf(stderr, "fuzz_vhost_msg: access outside the memory table\n");
		abort();
	}
	fe_fini(&f);
	int now = count_fds();
	if (baseline < 0)
		baseline = now;
	else if (now != baseline) {
		fprintf(stderr, "fuzz_vhost_msg: fd leak: %d open, %d at start\n", now, baseline);
		abort();
	}
	return 0;
}
