/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the vhost-user back end driven in process (fake_frontend.h): negotiation,
 * every kind of malformed message (refused or disconnect, fds closed), the echo/sink/loop data
 * path with and without the IOMMU, IOTLB misses on the back-end channel and their
 * de-duplication, invalidations (per-queue caches emptied, rings re-translated only when a ring
 * is hit), access failures, descriptor-chain attacks (loops, chains longer than the ring, bad
 * indirect tables, bad heads, rings outside the memory table), reset and a new front end;
 * generator mode (frames in order, valid headers, nothing written outside the posted buffers).
 * Every test ends with the memory-table defence counter at 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fake_frontend.h"

#include "vhost/dev.h"

#include <fcntl.h>
#include <time.h>

static struct dg_vhost_stats stats(struct fe *f)
{
	struct dg_vhost_stats s;

	dg_vhost_get_stats(f->v, &s);
	return s;
}

static void poll_n(struct fe *f, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(dg_vhost_poll(f->v, NULL), 0);
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) != -1;
}

static void finish(struct fe *f)
{
	assert_int_equal(stats(f).outside_memtable, 0);
	fe_fini(f);
}

static void test_negotiation(void **state)
{
	(void)state;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, true), 0);
	assert_int_equal(fe_send(&f, VU_GET_FEATURES, 0, NULL, 0, NULL, 0), 0);
	uint64_t feat = fe_reply_u64(&f);
	assert_true(feat & (1ull << VIRTIO_F_VERSION_1));
	assert_true(feat & (1ull << VIRTIO_F_IOMMU_PLATFORM));
	assert_true(feat & (1ull << VHOST_USER_F_PROTOCOL_FEATURES));
	assert_false(feat & (1ull << VIRTIO_NET_F_MRG_RXBUF));
	assert_int_equal(fe_send(&f, VU_GET_PROTOCOL_FEATURES, 0, NULL, 0, NULL, 0), 0);
	assert_int_equal(fe_reply_u64(&f),
			 (1ull << VU_PROTOCOL_F_REPLY_ACK) | (1ull << VU_PROTOCOL_F_BACKEND_REQ));
	/* Not offered: refused with a non-zero ack. */
	assert_int_equal(fe_u64(&f, VU_SET_FEATURES, 1ull << VIRTIO_NET_F_MRG_RXBUF), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_u64(&f, VU_SET_PROTOCOL_FEATURES, 1ull << VU_PROTOCOL_F_MQ), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	/* need_reply on a message without reply: ack 0; no need_reply: no reply at all. */
	assert_int_equal(fe_send(&f, VU_SET_OWNER, VU_FLAG_NEED_REPLY, NULL, 0, NULL, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 0);
	assert_int_equal(fe_send(&f, VU_SET_OWNER, 0, NULL, 0, NULL, 0), 0);
	assert_int_equal(f.reply_len, 0);
	assert_int_equal(fe_start(&f), 0);
	/* Reply header: same request, version 1, reply bit. */
	assert_int_equal(fe_state(&f, VU_GET_VRING_BASE, 1, 0), 0);
	struct vu_hdr h;
	memcpy(&h, f.reply, sizeof(h));
	assert_int_equal(h.request, VU_GET_VRING_BASE);
	assert_int_equal(h.flags, VU_VERSION | VU_FLAG_REPLY);
	assert_int_equal(h.size, 8);
	finish(&f);
}

static void test_bad_messages(void **state)
{
	(void)state;
	uint8_t raw[64] = {0}, reply[DG_VHOST_REPLY_MAX];
	struct vu_hdr h;
	size_t rlen;
	struct fe f;
	int p[2];

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, true), 0);
	/* Short header, bad version, a reply bit, payload size not matching the bytes. */
	assert_int_equal(dg_vhost_handle_message(f.v, raw, 11, NULL, 0, reply, &rlen), -EPROTO);
	h = (struct vu_hdr){.request = VU_SET_OWNER, .flags = 2, .size = 0};
	memcpy(raw, &h, sizeof(h));
	assert_int_equal(dg_vhost_handle_message(f.v, raw, 12, NULL, 0, reply, &rlen), -EPROTO);
	h.flags = VU_VERSION | VU_FLAG_REPLY;
	memcpy(raw, &h, sizeof(h));
	assert_int_equal(dg_vhost_handle_message(f.v, raw, 12, NULL, 0, reply, &rlen), -EPROTO);
	h = (struct vu_hdr){.request = VU_SET_OWNER, .flags = VU_VERSION, .size = 8};
	memcpy(raw, &h, sizeof(h));
	assert_int_equal(dg_vhost_handle_message(f.v, raw, 12, NULL, 0, reply, &rlen), -EPROTO);
	/* Long: more than any payload. */
	h.size = 300;
	memcpy(raw, &h, sizeof(h));
	uint8_t big[400] = {0};
	memcpy(big, &h, sizeof(h));
	assert_int_equal(dg_vhost_handle_message(f.v, big, 312, NULL, 0, reply, &rlen), -EPROTO);
	/* Unknown request: refused politely. */
	assert_int_equal(fe_send(&f, 99, VU_FLAG_NEED_REPLY, NULL, 0, NULL, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_send(&f, VU_SET_LOG_BASE, VU_FLAG_NEED_REPLY, raw, 16, NULL, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	/* Wrong payload size for its type: refused; for a GET with data: disconnect. */
	assert_int_equal(fe_send(&f, VU_SET_VRING_NUM, VU_FLAG_NEED_REPLY, raw, 4, NULL, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_send(&f, VU_GET_VRING_BASE, 0, raw, 4, NULL, 0), -EPROTO);
	assert_int_equal(fe_state(&f, VU_GET_VRING_BASE, 2, 0), -EPROTO);
	/* Extra fds are closed; the message is refused. */
	assert_int_equal(pipe(p), 0);
	int extra = p[0];
	assert_int_equal(fe_send(&f, VU_SET_OWNER, VU_FLAG_NEED_REPLY, NULL, 0, &extra, 1), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_false(fd_open(p[0]));
	/* Missing fd. */
	assert_int_equal(fe_u64(&f, VU_SET_VRING_KICK, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	/* NOFD flag and an fd anyway. */
	uint64_t u = 0 | VU_VRING_NOFD;
	assert_int_equal(fe_send(&f, VU_SET_VRING_CALL, VU_FLAG_NEED_REPLY, &u, 8, &p[1], 1), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_false(fd_open(p[1]));
	/* Bad vring index, size, base. */
	assert_int_equal(fe_state(&f, VU_SET_VRING_NUM, 2, 256), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_state(&f, VU_SET_VRING_NUM, 0, 255), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_state(&f, VU_SET_VRING_NUM, 0, 65536), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_state(&f, VU_SET_VRING_BASE, 0, 0x10000), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_u64(&f, VU_SET_VRING_KICK, 7 | VU_VRING_NOFD), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	/* Memory tables: fd count, overlap, unmappable fd, file too short. */
	struct vu_memory m = {.nregions = 2};
	m.regions[0] = (struct vu_region){.gpa = 0, .size = 0x1000, .uaddr = 0x10000};
	m.regions[1] = (struct vu_region){.gpa = 0x800, .size = 0x1000, .uaddr = 0x20000};
	int fds[3] = {dup(f.memfd), dup(f.memfd), dup(f.memfd)};
	assert_int_equal(fe_send(&f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &m, 72, fds, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	for (int i = 0; i < 3; i++)
		assert_false(fd_open(fds[i]));
	fds[0] = dup(f.memfd), fds[1] = dup(f.memfd);
	assert_int_equal(fe_send(&f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &m, 72, fds, 2), 0);
	assert_int_equal(fe_reply_u64(&f), 1); /* gpa overlap */
	m.regions[1].gpa = 0x1000;
	m.regions[1].size = FE_MEM_SIZE; /* past the end of the file */
	m.regions[1].mmap_off = 0x1000;
	fds[0] = dup(f.memfd), fds[1] = dup(f.memfd);
	assert_int_equal(fe_send(&f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &m, 72, fds, 2), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	m.regions[1].size = 0x1000;
	m.regions[1].mmap_off = 0;
	assert_int_equal(pipe(p), 0);
	fds[0] = p[0], fds[1] = dup(f.memfd);
	assert_int_equal(fe_send(&f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &m, 72, fds, 2), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_false(fd_open(p[0]));
	close(p[1]);
	assert_int_equal(fe_send(&f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &m, 40, NULL, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 1); /* size says 1 region, table says 2 */
	/* IOTLB before any memory table; IOTLB types the front end may not send. */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0, 0x1000, FE_UVA_BASE + FE_GPA_BASE, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(stats(&f).bad_messages, 24);
	finish(&f);
}

static void test_iotlb_messages(void **state)
{
	(void)state;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, true), 0);
	assert_int_equal(fe_start(&f), 0);
	const uint64_t uva = FE_UVA_BASE + FE_GPA_BASE;
	/* Outside the memory table, partly outside, wrapping, empty, misaligned, bad perm. */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0, 0x1000, uva - 0x1000, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0, 0x2000, uva + FE_MEM_SIZE - 0x1000, 3),
			 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, UINT64_MAX - 0xfff, 0x2000, uva, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0, 0, uva, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0x800, 0x1000, uva, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0, 0x1000, uva, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0, 0x1000, uva, 7), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_MISS, 0, 0x1000, uva, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_ACCESS_FAIL, 0, 0x1000, uva, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(stats(&f).iotlb_updates, 0);
	/* Good ones, and an INVALIDATE with garbage uaddr/perm, then a wrapping one. */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0x10000, 0x3000, uva, 3), 0);
	assert_int_equal(fe_reply_u64(&f), 0);
	assert_int_equal(stats(&f).iotlb_entries, 3);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, 0x11000, 0x1000, 0xdeadbeef, 0xa5), 0);
	assert_int_equal(fe_reply_u64(&f), 0);
	assert_int_equal(stats(&f).iotlb_entries, 2);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, 0xfffff000ull << 32, 1ull << 63, 0, 0),
			 0);
	assert_int_equal(fe_reply_u64(&f), 1);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, 0xfef00000ull, 0xffffffff01100000ull,
				  0x1234, 9),
			 0);
	assert_int_equal(fe_reply_u64(&f), 0);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, 0, 0xfee00000ull, 0, 0), 0);
	assert_int_equal(fe_reply_u64(&f), 0);
	assert_int_equal(stats(&f).iotlb_entries, 0);
	assert_int_equal(stats(&f).iotlb_invalidations, 3);
	/* A new memory table empties the IOTLB. */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_UPDATE, 0x10000, 0x3000, uva, 3), 0);
	assert_int_equal(fe_set_mem_table(&f), 0);
	assert_int_equal(fe_reply_u64(&f), 0);
	assert_int_equal(stats(&f).iotlb_entries, 0);
	finish(&f);
}

/* Transmit a ping and expect the echo reply on the receive queue. */
static void ping_once(struct fe *f, uint16_t seq, size_t plen)
{
	uint8_t req[2048], *rep;
	size_t len = fe_make_ping(req, 0x0a000001, seq, plen);
	uint32_t id, rlen;

	fe_rx_post(f, seq % 128);
	fe_tx(f, seq % 128, req, (uint32_t)len);
	for (int i = 0; i < 100; i++) {
		struct vu_iotlb m;

		poll_n(f, 1);
		while (fe_backend_msg(f, &m)) { /* answer misses like QEMU */
			assert_int_equal(m.type, VU_IOTLB_MISS);
			uint64_t gpa = m.iova - FE_IOVA_OFF;
			assert_int_equal(fe_map(f, gpa, 0x1000, VU_ACCESS_RW), 0);
			assert_int_equal(fe_reply_u64(f), 0);
		}
		if (f->used_seen[0] != *(uint16_t *)(void *)(fe_ptr(f, FE_RING(0) + 0x2002)))
			break;
	}
	assert_true(fe_used(f, 1, &id, &rlen));
	assert_int_equal(id, seq % 128);
	assert_true(fe_used(f, 0, &id, &rlen));
	assert_int_equal(id, seq % 128);
	assert_int_equal(rlen, FE_HDR + len);
	rep = fe_ptr(f, FE_BUF(256 + seq % 128)) + FE_HDR;
	assert_memory_equal(rep, req + 6, 6);		      /* back to the sender */
	assert_memory_equal(rep + 14 + 12, req + 14 + 16, 4); /* addresses swapped */
	assert_memory_equal(rep + 14 + 16, req + 14 + 12, 4);
	assert_int_equal(rep[14 + 20], 0);	    /* echo reply */
	assert_int_equal(fe_csum(rep + 14, 20), 0); /* checksums valid */
	assert_int_equal(fe_csum(rep + 34, len - 34), 0);
	assert_memory_equal(rep + 42, req + 42, plen); /* payload untouched */
}

static void test_echo_no_iommu(void **state)
{
	(void)state;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, false), 0);
	assert_int_equal(fe_start(&f), 0);
	for (uint16_t s = 0; s < 300; s++)
		ping_once(&f, s, s % 2 ? 1400 : 56 + s);
	/* ARP for our address. */
	uint8_t arp[42] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0, 1, 2,
			   3,	 0x08, 0x06, 0,	   1,	 0x08, 0,    6,	   4, 0, 1,
			   0x52, 0x54, 0,    1,	   2,	 3,    10,   0,	   0, 2, 0,
			   0,	 0,    0,    0,	   0,	 10,   0,    0,	   1};
	uint32_t id, len;
	fe_rx_post(&f, 5);
	fe_tx(&f, 5, arp, sizeof(arp));
	poll_n(&f, 2);
	assert_true(fe_used(&f, 1, &id, &len));
	assert_true(fe_used(&f, 0, &id, &len));
	assert_int_equal(len, FE_HDR + 42);
	uint8_t *r = fe_ptr(&f, FE_BUF(256 + 5)) + FE_HDR;
	assert_int_equal(r[21], 2); /* ARP reply */
	assert_memory_equal(r + 28, "\x0a\x00\x00\x01", 4);
	struct dg_vhost_stats s = stats(&f);
	assert_int_equal(s.icmp_replies, 300);
	assert_int_equal(s.arp_replies, 1);
	assert_int_equal(s.queue[1].packets, 301);
	assert_int_equal(s.queue[0].packets, 301);
	assert_int_equal(s.iotlb_misses, 0);
	/* Something else: counted, no reply. */
	uint8_t junk[60] = {0};
	fe_tx(&f, 6, junk, sizeof(junk));
	poll_n(&f, 2);
	assert_int_equal(stats(&f).ignored, 1);
	assert_false(fe_used(&f, 0, &id, &len));
	finish(&f);
}

static void test_echo_iommu(void **state)
{
	(void)state;
	struct vu_iotlb m;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, true), 0);
	assert_int_equal(fe_start(&f), 0);
	/* Nothing granted yet: the first poll misses on the transmit ring; polling again while
	 * the miss is pending sends nothing more (de-duplicated). */
	poll_n(&f, 1);
	assert_true(fe_backend_msg(&f, &m));
	assert_int_equal(m.type, VU_IOTLB_MISS);
	assert_int_equal(m.iova, fe_addr(&f, FE_RING(1)));
	assert_int_equal(m.perm, VU_ACCESS_RO);
	poll_n(&f, 1);
	assert_false(fe_backend_msg(&f, &m));
	/* A queue that waits for a miss is retried after an UPDATE for another page too; the
	 * still-missing page is not asked again. */
	assert_int_equal(fe_map(&f, FE_BUF(400), 0x1000, VU_ACCESS_RW), 0);
	poll_n(&f, 1);
	assert_false(fe_backend_msg(&f, &m));
	assert_true(stats(&f).iotlb_miss_dedup >= 1);
	assert_int_equal(fe_map(&f, FE_RING(1), 0x1000, VU_ACCESS_RW), 0);
	for (uint16_t s = 0; s < 200; s++)
		ping_once(&f, s, 1400);
	struct dg_vhost_stats st = stats(&f);
	assert_int_equal(st.icmp_replies, 200);
	assert_true(st.iotlb_misses >= 5);
	uint64_t rt = st.ring_translations, misses = st.iotlb_misses;

	/* Invalidate a buffer page: the next use misses again (caches emptied), rings stay. */
	assert_int_equal(
		fe_iotlb(&f, VU_IOTLB_INVALIDATE, fe_addr(&f, FE_BUF(7)), 0x1000, 0x55, 0xff), 0);
	ping_once(&f, 7, 100);
	st = stats(&f);
	assert_int_equal(st.iotlb_misses, misses + 1);
	assert_int_equal(st.ring_translations, rt);
	/* Invalidate the receive ring's used page: that ring is translated again. */
	assert_int_equal(
		fe_iotlb(&f, VU_IOTLB_INVALIDATE, fe_addr(&f, FE_RING(0) + 0x2100), 1, 0, 0), 0);
	ping_once(&f, 8, 100);
	st = stats(&f);
	assert_int_equal(st.ring_translations, rt + 1);
	assert_int_equal(st.iotlb_misses, misses + 2);
	/* A full flush: every ring again. */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, 0, UINT64_MAX, 0, 0), 0);
	ping_once(&f, 9, 100);
	assert_int_equal(stats(&f).ring_translations, rt + 3);
	finish(&f);
}

/* The next MISS the back end sent for @iova, skipping none; false if it sent nothing. */
static bool next_miss(struct fe *f, uint64_t iova)
{
	struct vu_iotlb m;

	if (!fe_backend_msg(f, &m))
		return false;
	assert_int_equal(m.type, VU_IOTLB_MISS);
	assert_int_equal(m.iova, iova);
	return true;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
			      .tv_nsec = (long)(ns % 1000000000u)};

	while (nanosleep(&ts, &ts))
		;
}

/*
 * A queue waiting for the answer to a miss must ask again when nothing can answer it any more:
 * after an invalidation covering its page (which forgets the pending miss: QEMU's answer may be
 * what it removed) and after VHOST_MISS_RESEND_NS without an answer; not after invalidations of
 * other pages. The first case is the ats-lazy flake: the
 * data path saw an UPDATE but not yet the concurrent whole-space INVALIDATE that removed it,
 * found its miss still pending (de-duplicated), then forgot it at the invalidation and waited
 * for an answer to a MISS that no longer existed, while the guest's kicks kept it from ever
 * timing out.
 */
static void test_miss_retry(void **state)
{
	(void)state;
	uint64_t ring = 0;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, true), 0);
	assert_int_equal(fe_start(&f), 0);
	ring = fe_addr(&f, FE_RING(1));
	poll_n(&f, 1);
	assert_true(next_miss(&f, ring));
	poll_n(&f, 3);
	assert_false(next_miss(&f, ring)); /* pending: not asked again */
	/* An UPDATE for another page: the queue looks again, the miss is still pending. */
	assert_int_equal(fe_map(&f, FE_BUF(400), 0x1000, VU_ACCESS_RW), 0);
	poll_n(&f, 1);
	assert_false(next_miss(&f, ring));
	assert_int_equal(stats(&f).iotlb_miss_dedup, 1);
	/* An invalidation of another page: the miss stays pending (under iommu.strict=1 one
	 * follows every unmap; asking again at each made QEMU translate unmapped IOVAs). */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, fe_addr(&f, FE_BUF(400)), 0x1000, 0, 0),
			 0);
	poll_n(&f, 1);
	assert_false(next_miss(&f, ring));
	/* An invalidation covering the page (a whole-space flush): the pending miss is
	 * forgotten, so it is asked again at once. */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, 0, UINT64_MAX, 0, 0), 0);
	poll_n(&f, 1);
	assert_true(next_miss(&f, ring));
	/* Unanswered: not asked again before VHOST_MISS_RESEND_NS, asked again after it. */
	poll_n(&f, 3);
	assert_false(next_miss(&f, ring));
	sleep_ns(VHOST_MISS_RESEND_NS + VHOST_MISS_RESEND_NS / 5);
	poll_n(&f, 1);
	assert_true(next_miss(&f, ring));
	assert_int_equal(stats(&f).iotlb_misses, 3);
	/* Answered: the queue works. */
	assert_int_equal(fe_map(&f, FE_RING(0), 0x3000, VU_ACCESS_RW), 0);
	assert_int_equal(fe_map(&f, FE_RING(1), 0x3000, VU_ACCESS_RW), 0);
	assert_int_equal(fe_map(&f, FE_BUF(0), 0x1000, VU_ACCESS_RW), 0);
	assert_int_equal(fe_map(&f, FE_BUF(256), 0x1000, VU_ACCESS_RW), 0);
	uint8_t req[200];
	uint32_t id, len;
	fe_rx_post(&f, 0);
	fe_tx(&f, 0, req, (uint32_t)fe_make_ping(req, 0x0a000001, 1, 100));
	poll_n(&f, 2);
	assert_true(fe_used(&f, 0, &id, &len));
	assert_int_equal(len, FE_HDR + 14 + 20 + 8 + 100);
	assert_int_equal(stats(&f).icmp_replies, 1);
	assert_false(next_miss(&f, ring));
	finish(&f);
}

/*
 * Notification suppression: while the data path works the driver is told not to kick; before it
 * sleeps kicks are enabled again and the rings looked at once more (an entry posted while kicks
 * were off must keep it awake), and a queue whose rings were invalidated with kicks off is
 * polled again until its rings are translated and the flag cleared.
 */
static void test_kick_suppression(void **state)
{
	(void)state;
	uint8_t fr[100] = {0};
	bool pending = false;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_SINK, true), 0);
	assert_int_equal(fe_start(&f), 0);
	assert_int_equal(fe_map(&f, FE_RING(0), 0x3000, VU_ACCESS_RW), 0);
	assert_int_equal(fe_map(&f, FE_RING(1), 0x3000, VU_ACCESS_RW), 0);
	assert_int_equal(fe_map(&f, FE_BUF(0), 0x2000, VU_ACCESS_RW), 0);
	uint16_t *flags = (uint16_t *)(void *)fe_ptr(&f, FE_RING(1) + 0x2000);
	fe_tx(&f, 0, fr, 60);
	poll_n(&f, 1);
	assert_int_equal(stats(&f).queue[1].packets, 1);
	vhost_dp_kicks(f.v, false, NULL); /* it worked: kicks off */
	assert_int_equal(*flags, VRING_USED_F_NO_NOTIFY);
	fe_tx(&f, 1, fr, 60); /* posted while kicks are off: no kick would come */
	vhost_dp_kicks(f.v, true, &pending);
	assert_int_equal(*flags, 0);
	assert_true(pending);
	poll_n(&f, 1);
	assert_int_equal(stats(&f).queue[1].packets, 2);
	pending = false;
	vhost_dp_kicks(f.v, true, &pending);
	assert_false(pending);
	/* Kicks off, then the used ring's page is invalidated: not left asleep. */
	vhost_dp_kicks(f.v, false, NULL);
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, fe_addr(&f, FE_RING(1) + 0x2000), 0x1000,
				  0, 0),
			 0);
	vhost_dp_quiescent(f.v); /* drops the ring translation */
	vhost_dp_kicks(f.v, true, &pending);
	assert_true(pending);
	assert_int_equal(*flags, VRING_USED_F_NO_NOTIFY); /* not through the old translation */
	poll_n(&f, 1);					  /* re-translation misses */
	pending = false;
	vhost_dp_kicks(f.v, true, &pending);
	assert_false(pending); /* waiting for the MISS: sleep until its UPDATE */
	assert_int_equal(fe_map(&f, FE_RING(1) + 0x2000, 0x1000, VU_ACCESS_RW), 0);
	poll_n(&f, 1);
	vhost_dp_kicks(f.v, true, &pending);
	assert_false(pending);
	assert_int_equal(*flags, 0);
	finish(&f);
}

static void test_access_fail(void **state)
{
	(void)state;
	uint8_t req[256];
	struct vu_iotlb m;
	uint32_t id, len;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, true), 0);
	assert_int_equal(fe_start(&f), 0);
	assert_int_equal(fe_map(&f, FE_RING(0), 0x3000, VU_ACCESS_RW), 0);
	assert_int_equal(fe_map(&f, FE_RING(1), 0x3000, VU_ACCESS_RW), 0);
	/* The transmit buffer is granted write-only: the device may not read it. */
	assert_int_equal(fe_map(&f, FE_BUF(3), 0x1000, VU_ACCESS_WO), 0);
	fe_tx(&f, 3, req, (uint32_t)fe_make_ping(req, 0x0a000001, 1, 64));
	poll_n(&f, 2);
	assert_true(fe_backend_msg(&f, &m));
	assert_int_equal(m.type, VU_IOTLB_ACCESS_FAIL);
	assert_int_equal(m.iova, fe_addr(&f, FE_BUF(3)));
	assert_true(fe_used(&f, 1, &id, &len)); /* returned unprocessed */
	assert_int_equal(len, 0);
	assert_int_equal(stats(&f).iotlb_access_fails, 1);
	assert_int_equal(stats(&f).icmp_replies, 0);
	finish(&f);
}

static void test_sink_loop(void **state)
{
	(void)state;
	uint8_t fr[1000];
	uint32_t id, len;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_SINK, false), 0);
	assert_int_equal(fe_start(&f), 0);
	fe_rx_post(&f, 0);
	for (uint16_t i = 0; i < 10; i++)
		fe_tx(&f, i, fr, 100 + i);
	poll_n(&f, 2);
	assert_int_equal(stats(&f).queue[1].packets, 10);
	assert_int_equal(stats(&f).queue[1].bytes, 1045);
	assert_false(fe_used(&f, 0, &id, &len));
	fe_fini(&f);

	assert_int_equal(fe_init(&f, DG_VHOST_LOOP, true), 0);
	assert_int_equal(fe_start(&f), 0);
	assert_int_equal(fe_map(&f, FE_GPA_BASE, FE_MEM_SIZE, VU_ACCESS_RW), 0);
	for (unsigned int i = 0; i < sizeof(fr); i++)
		fr[i] = (uint8_t)(i * 3);
	fe_tx(&f, 0, fr, sizeof(fr));
	poll_n(&f, 2);
	assert_false(fe_used(&f, 0, &id, &len)); /* no buffer yet: the frame waits */
	fe_rx_post(&f, 0);
	poll_n(&f, 1);
	assert_true(fe_used(&f, 0, &id, &len));
	assert_int_equal(len, FE_HDR + sizeof(fr));
	assert_memory_equal(fe_ptr(&f, FE_BUF(256)) + FE_HDR, fr, sizeof(fr));
	/* A receive buffer too small for the frame: returned empty, frame dropped. */
	fe_tx(&f, 1, fr, sizeof(fr));
	fe_set_desc(&f, 0, 1, FE_BUF(257), 100, VRING_DESC_F_WRITE, 0);
	fe_avail(&f, 0, 1);
	poll_n(&f, 2);
	assert_true(fe_used(&f, 0, &id, &len));
	assert_int_equal(len, 0);
	assert_int_equal(stats(&f).queue[0].dropped, 1);
	finish(&f);
}

/* Ring attacks: each stops the queue with a ring error and touches nothing outside. */
enum attack {
	A_LOOP,
	A_TOO_LONG,
	A_BAD_HEAD,
	A_NEXT_OOB,
	A_IND_OOB,
	A_IND_NESTED,
	A_IND_LEN,
	A_IND_NEXT_OOB,
	A_IND_LOOP,
	A_BUF_OUTSIDE,
	A_RD_AFTER_WR,
	A_AVAIL_JUMP,
	A_RING_OUTSIDE,
	A_N
};

static void test_ring_attacks(void **state)
{
	(void)state;

	for (int a = 0; a < A_N; a++) {
		struct vring_desc *ind;
		struct fe f;

		assert_int_equal(fe_init(&f, DG_VHOST_ECHO, false), 0);
		assert_int_equal(fe_start(&f), 0);
		ind = (struct vring_desc *)(void *)fe_ptr(&f, FE_BUF(100));
		switch (a) {
		case A_LOOP:
			fe_set_desc(&f, 1, 0, FE_BUF(0), 64, VRING_DESC_F_NEXT, 1);
			fe_set_desc(&f, 1, 1, FE_BUF(1), 64, VRING_DESC_F_NEXT, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_TOO_LONG: /* every descriptor chained: 256 + 1 */
			for (uint16_t i = 0; i < FE_QSIZE; i++)
				fe_set_desc(&f, 1, i, FE_BUF(0), 16, VRING_DESC_F_NEXT,
					    (uint16_t)((i + 1) % FE_QSIZE));
			fe_avail(&f, 1, 0);
			break;
		case A_BAD_HEAD:
			fe_avail(&f, 1, FE_QSIZE);
			break;
		case A_NEXT_OOB:
			fe_set_desc(&f, 1, 0, FE_BUF(0), 64, VRING_DESC_F_NEXT, 300);
			fe_avail(&f, 1, 0);
			break;
		case A_IND_OOB: /* indirect table outside the memory table */
			fe_set_desc(&f, 1, 0, FE_GPA_BASE + FE_MEM_SIZE - 32, 64,
				    VRING_DESC_F_INDIRECT, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_IND_NESTED:
			ind[0] = (struct vring_desc){
				.addr = FE_BUF(101), .len = 16, .flags = VRING_DESC_F_INDIRECT};
			fe_set_desc(&f, 1, 0, FE_BUF(100), 16, VRING_DESC_F_INDIRECT, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_IND_LEN:
			fe_set_desc(&f, 1, 0, FE_BUF(100), 24, VRING_DESC_F_INDIRECT, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_IND_NEXT_OOB:
			ind[0] = (struct vring_desc){.addr = FE_BUF(0),
						     .len = 64,
						     .flags = VRING_DESC_F_NEXT,
						     .next = 2};
			ind[1] = ind[0];
			fe_set_desc(&f, 1, 0, FE_BUF(100), 32, VRING_DESC_F_INDIRECT, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_IND_LOOP:
			ind[0] = (struct vring_desc){.addr = FE_BUF(0),
						     .len = 64,
						     .flags = VRING_DESC_F_NEXT,
						     .next = 1};
			ind[1] = (struct vring_desc){.addr = FE_BUF(0),
						     .len = 64,
						     .flags = VRING_DESC_F_NEXT,
						     .next = 0};
			fe_set_desc(&f, 1, 0, FE_BUF(100), 32, VRING_DESC_F_INDIRECT, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_BUF_OUTSIDE: /* a buffer running past the region */
			fe_set_desc(&f, 1, 0, FE_GPA_BASE + FE_MEM_SIZE - 16, 64, 0, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_RD_AFTER_WR:
			fe_set_desc(&f, 1, 0, FE_BUF(0), 64, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
				    1);
			fe_set_desc(&f, 1, 1, FE_BUF(1), 64, 0, 0);
			fe_avail(&f, 1, 0);
			break;
		case A_AVAIL_JUMP: /* avail index 1000 entries ahead of a 256-entry ring */
			__atomic_store_n((uint16_t *)(void *)fe_ptr(&f, FE_RING(1) + 0x1002), 1000,
					 __ATOMIC_RELEASE);
			break;
		case A_RING_OUTSIDE: {
			struct vu_vring_addr ad = {.index = 1,
						   .desc = FE_UVA_BASE + 0x1000,
						   .avail = FE_UVA_BASE + FE_GPA_BASE + 0x1000,
						   .used = FE_UVA_BASE + FE_GPA_BASE + 0x2000};
			assert_int_equal(
				fe_send(&f, VU_SET_VRING_ADDR, 0, &ad, sizeof(ad), NULL, 0), 0);
			break;
		}
		}
		poll_n(&f, 3);
		struct dg_vhost_stats s = stats(&f);
		if (s.ring_errors != 1)
			fail_msg("attack %d: %llu ring errors", a,
				 (unsigned long long)s.ring_errors);
		assert_int_equal(s.queue[1].packets, 0);
		/* The receive queue still works... the transmit one is stopped until reset. */
		uint32_t id, len;
		assert_false(fe_used(&f, 1, &id, &len));
		/* A new front end on the same back end works again. */
		dg_vhost_reset(f.v);
		assert_int_equal(fe_start(&f), 0);
		ping_once(&f, 1, 64);
		finish(&f);
	}
}

static void test_reset_reconnect(void **state)
{
	(void)state;
	struct fe f;

	assert_int_equal(fe_init(&f, DG_VHOST_ECHO, true), 0);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(fe_start(&f), 0);
		for (uint16_t s = 0; s < 20; s++)
			ping_once(&f, s, 200);
		/* Stop as QEMU does: GET_VRING_BASE returns where the driver is. */
		assert_int_equal(fe_state(&f, VU_GET_VRING_BASE, 1, 0), 0);
		struct vu_vring_state st;
		memcpy(&st, f.reply + VU_HDR_SIZE, sizeof(st));
		assert_int_equal(st.num, 20);
		if (round == 1)
			assert_int_equal(fe_send(&f, VU_RESET_OWNER, 0, NULL, 0, NULL, 0), 0);
		else
			dg_vhost_reset(f.v);
	}
	assert_int_equal(stats(&f).icmp_replies, 60);
	finish(&f);
}

/* ---- generator mode ---- */

#define GEN_CANARY 0xa5

/* Receive buffer slot @slot's bytes (4 KiB each, from FE_BUF(256)). */
static uint8_t *rxbuf(struct fe *f, unsigned int slot)
{
	return fe_ptr(f, FE_BUF(256 + slot));
}

static bool all_canary(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != GEN_CANARY)
			return false;
	return true;
}

/* @b holds the virtio-net header and generated frame number @seq of @len bytes. */
static void check_gen_frame(const uint8_t *b, uint32_t len, uint64_t seq)
{
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	static const uint8_t mac[6] = {0x02, 0, 0, 0, 0, 0x01};
	const uint8_t *fr = b + FE_HDR, *ip = fr + 14, *udp = ip + 20;
	struct virtio_net_hdr_v1 h;
	uint64_t got = 0;

	memcpy(&h, b, sizeof(h));
	assert_int_equal(h.num_buffers, 1);
	assert_int_equal(h.flags, 0);
	assert_memory_equal(fr, bcast, 6);
	assert_memory_equal(fr + 6, mac, 6);
	assert_int_equal(fr[12] << 8 | fr[13], 0x0800);
	assert_int_equal(ip[0], 0x45);
	assert_int_equal(ip[2] << 8 | ip[3], len - 14);
	assert_int_equal(ip[9], 17);
	assert_int_equal(fe_csum(ip, 20), 0); /* valid IPv4 header checksum */
	assert_memory_equal(ip + 12, "\x0a\x00\x00\x01", 4);
	assert_int_equal(udp[2] << 8 | udp[3], 9);
	assert_int_equal(udp[4] << 8 | udp[5], len - 34);
	for (int i = 0; i < 8; i++)
		got = got << 8 | fr[DG_VHOST_GEN_SEQ_OFFSET + i];
	assert_int_equal(got, seq);
	for (uint32_t i = DG_VHOST_GEN_SEQ_OFFSET + 8; i < len; i++)
		assert_int_equal(fr[i], 0);
}

static void test_gen(void **state)
{
	(void)state;
	struct dg_vhost_config cfg;
	uint32_t id, len;
	struct vu_iotlb m;
	uint64_t seq = 0;
	struct fe f;

	dg_vhost_config_init(&cfg);
	cfg.mode = DG_VHOST_GEN;
	cfg.gen_frame_bytes = DG_VHOST_GEN_MIN_BYTES - 1;
	errno = 0;
	assert_null(dg_vhost_create(&cfg));
	assert_int_equal(errno, EINVAL);
	cfg.gen_frame_bytes = DG_VHOST_GEN_MAX_BYTES + 1;
	assert_null(dg_vhost_create(&cfg));
	assert_int_equal(errno, EINVAL);
	cfg.gen_frame_bytes = 0; /* the default */
	assert_int_equal(fe_init_cfg(&f, &cfg, true), 0);
	assert_int_equal(fe_start(&f), 0);
	memset(rxbuf(&f, 0), GEN_CANARY, 256 * 0x1000);
	/* Rings granted, buffers not yet: a MISS for write, nothing written, nothing used. */
	assert_int_equal(fe_map(&f, FE_GPA_BASE, 0x40000, VU_ACCESS_RW), 0);
	for (uint16_t i = 0; i < 3; i++)
		fe_rx_post(&f, i);
	poll_n(&f, 2);
	assert_true(fe_backend_msg(&f, &m));
	assert_int_equal(m.type, VU_IOTLB_MISS);
	assert_int_equal(m.iova, fe_addr(&f, FE_BUF(256)));
	assert_int_equal(m.perm, VU_ACCESS_WO);
	assert_false(fe_used(&f, 0, &id, &len));
	assert_true(all_canary(rxbuf(&f, 0), 3 * 0x1000));
	/* Granted: the three buffers get frames 0, 1, 2, and nothing past the frame. */
	assert_int_equal(fe_map(&f, FE_BUF(256), 256 * 0x1000, VU_ACCESS_RW), 0);
	poll_n(&f, 2);
	for (uint16_t i = 0; i < 3; i++) {
		assert_true(fe_used(&f, 0, &id, &len));
		assert_int_equal(id, i);
		assert_int_equal(len, FE_HDR + 64);
		check_gen_frame(rxbuf(&f, i), 64, seq++);
		assert_true(all_canary(rxbuf(&f, i) + FE_HDR + 64, 0x1000 - FE_HDR - 64));
	}
	assert_false(fe_used(&f, 0, &id, &len));

	/* A buffer granted read-only: ACCESS_FAIL, returned empty, untouched, no number used. */
	assert_int_equal(fe_iotlb(&f, VU_IOTLB_INVALIDATE, fe_addr(&f, FE_BUF(259)), 0x1000, 0, 0),
			 0);
	assert_int_equal(fe_map(&f, FE_BUF(259), 0x1000, VU_ACCESS_RO), 0);
	fe_rx_post(&f, 3);
	poll_n(&f, 2);
	assert_true(fe_used(&f, 0, &id, &len));
	assert_int_equal(id, 3);
	assert_int_equal(len, 0);
	assert_int_equal(stats(&f).iotlb_access_fails, 1);
	assert_true(fe_backend_msg(&f, &m));
	assert_int_equal(m.type, VU_IOTLB_ACCESS_FAIL);
	assert_true(all_canary(rxbuf(&f, 3), 0x1000));

	/* A chain of 20 + 2048 bytes: the frame is split over both, the rest untouched. */
	fe_set_desc(&f, 0, 4, FE_BUF(260), 20, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 5);
	fe_set_desc(&f, 0, 5, FE_BUF(261), 2048, VRING_DESC_F_WRITE, 0);
	fe_avail(&f, 0, 4);
	/* Too small (header + 50 bytes): returned empty, untouched, dropped, no number used. */
	fe_set_desc(&f, 0, 6, FE_BUF(262), FE_HDR + 50, VRING_DESC_F_WRITE, 0);
	fe_avail(&f, 0, 6);
	poll_n(&f, 2);
	assert_true(fe_used(&f, 0, &id, &len));
	assert_int_equal(id, 4);
	assert_int_equal(len, FE_HDR + 64);
	uint8_t joined[FE_HDR + 64];
	memcpy(joined, rxbuf(&f, 4), 20);
	memcpy(joined + 20, rxbuf(&f, 5), sizeof(joined) - 20);
	check_gen_frame(joined, 64, seq++);
	assert_true(all_canary(rxbuf(&f, 4) + 20, 0x1000 - 20));
	assert_true(all_canary(rxbuf(&f, 5) + sizeof(joined) - 20, 0x1000 - sizeof(joined) + 20));
	assert_true(fe_used(&f, 0, &id, &len));
	assert_int_equal(id, 6);
	assert_int_equal(len, 0);
	assert_true(all_canary(rxbuf(&f, 6), 0x1000));
	assert_int_equal(stats(&f).queue[0].dropped, 1);

	/* 600 more in rounds of 200 (the avail and used indexes wrap the 256-entry ring): in
	 * order, no gap, each within its frame. */
	for (int round = 0; round < 3; round++) {
		memset(rxbuf(&f, 8), GEN_CANARY, 200 * 0x1000);
		for (uint16_t i = 8; i < 208; i++)
			fe_rx_post(&f, i);
		poll_n(&f, 5); /* 64 per burst */
		for (uint16_t i = 8; i < 208; i++) {
			assert_true(fe_used(&f, 0, &id, &len));
			assert_int_equal(id, i);
			assert_int_equal(len, FE_HDR + 64);
			check_gen_frame(rxbuf(&f, i), 64, seq++);
			assert_true(all_canary(rxbuf(&f, i) + FE_HDR + 64, 0x1000 - FE_HDR - 64));
		}
		assert_false(fe_used(&f, 0, &id, &len));
	}
	/* Transmitted frames are counted and dropped (sink). */
	uint8_t fr[100] = {0};
	assert_int_equal(fe_map(&f, FE_BUF(0), 0x1000, VU_ACCESS_RO), 0);
	fe_tx(&f, 0, fr, sizeof(fr));
	poll_n(&f, 2);
	assert_false(fe_used(&f, 0, &id, &len));
	assert_int_equal(stats(&f).queue[1].packets, 1);
	assert_int_equal(stats(&f).queue[0].packets, seq);
	assert_int_equal(stats(&f).queue[0].bytes, seq * 64);
	assert_int_equal(stats(&f).iotlb_access_fails, 1);

	/* A new front end starts again at 0. */
	dg_vhost_reset(f.v);
	assert_int_equal(fe_start(&f), 0);
	assert_int_equal(fe_map(&f, FE_GPA_BASE, FE_MEM_SIZE, VU_ACCESS_RW), 0);
	fe_rx_post(&f, 0);
	poll_n(&f, 2);
	assert_true(fe_used(&f, 0, &id, &len));
	check_gen_frame(rxbuf(&f, 0), 64, 0);
	finish(&f);

	/* No IOMMU, 1500-byte frames. */
	cfg.gen_frame_bytes = 1500;
	assert_int_equal(fe_init_cfg(&f, &cfg, false), 0);
	assert_int_equal(fe_start(&f), 0);
	memset(rxbuf(&f, 0), GEN_CANARY, 2 * 0x1000);
	fe_rx_post(&f, 0);
	fe_rx_post(&f, 1);
	poll_n(&f, 2);
	for (uint16_t i = 0; i < 2; i++) {
		assert_true(fe_used(&f, 0, &id, &len));
		assert_int_equal(len, FE_HDR + 1500);
		check_gen_frame(rxbuf(&f, i), 1500, i);
		assert_true(all_canary(rxbuf(&f, i) + FE_HDR + 1500, 0x1000 - FE_HDR - 1500));
	}
	assert_int_equal(stats(&f).queue[0].bytes, 3000);
	finish(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_negotiation),	 cmocka_unit_test(test_bad_messages),
		cmocka_unit_test(test_iotlb_messages),	 cmocka_unit_test(test_echo_no_iommu),
		cmocka_unit_test(test_echo_iommu),	 cmocka_unit_test(test_miss_retry),
		cmocka_unit_test(test_kick_suppression), cmocka_unit_test(test_access_fail),
		cmocka_unit_test(test_sink_loop),	 cmocka_unit_test(test_ring_attacks),
		cmocka_unit_test(test_reset_reconnect),	 cmocka_unit_test(test_gen),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
