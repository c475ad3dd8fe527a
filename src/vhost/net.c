/* SPDX-License-Identifier: MIT */
/*
 * vhost/net.c - the data path of the net device: transmit queue in, receive queue out.
 *
 * One pass (vhost_dp_poll) = for each started queue: make sure its rings are translated, then
 * at most VHOST_BURST chains. Transmitted frames are copied out of guest memory once (the
 * driver may change them), handled by the mode (echo builds its reply in a private buffer,
 * loop queues the frame, sink counts it), and replies wait in a small frame queue until the
 * driver posts receive buffers. Used entries are published once per burst and the driver is
 * notified once per burst.
 *
 * Generator mode (do_gen): the receive queue is the only producer. Each posted receive buffer
 * gets the template built at creation (virtio-net header + Ethernet/IPv4/UDP frame, its IPv4
 * checksum computed once: the identification field stays 0 with DF set, so only the payload's
 * sequence number changes from frame to frame) and the frame's 8-byte sequence number, through
 * the same vhost_vq_pop() translation (per-queue IOTLB, memory-table check) as every other
 * access; one copy per frame when the buffer's first writable segment holds it whole (the
 * common case), vhost_segs_write() otherwise. Used entries, counters and the interrupt are
 * once per burst as elsewhere. A buffer too small for the frame is returned empty and counted
 * in dropped, without using a sequence number, so the driver sees 0, 1, 2, ... with no gap.
 *
 * IOTLB misses: a chain or a ring that needs a translation the IOTLB does not hold is left
 * where it is (nothing consumed), a MISS is sent on the back-end channel unless the same page
 * with the same access is already pending (de-duplicated for VHOST_MISS_RESEND_NS), and the
 * queue waits (retry_ns) until one of three things happens, whichever comes first:
 *  - an UPDATE (update_gen moved): it may be the answer;
 *  - an invalidation covering its page (inval_gen, inval_log): the pending miss is forgotten,
 *    since the invalidation may have removed what answered it (QEMU's lazy flushes remove
 *    everything), so nothing would ever answer it again;
 *  - the deadline: the miss went unanswered (lost, or the send failed) and is sent again.
 * A queue's wait is a deadline, not a flag cleared by an idle wake-up: a guest that keeps
 * kicking must not keep a queue from ever asking again (it did: a MISS answered and at once
 * invalidated left the transmit queue waiting while the guest's pings kicked it every 3 ms,
 * until the guest ran out of socket buffer with ENOBUFS). The control thread never waits for
 * the data path to make progress, only for it to reach a quiescent point, so the front end's
 * UPDATE (sent in answer to the MISS, and acknowledged before the front end does anything
 * else) is always served.
 *
 * Sends on the back-end channel are non-blocking (a 44-byte message goes whole or not at all
 * on a unix stream socket): if the socket is full the miss is not recorded as pending and the
 * queue looks again after VHOST_MISS_SENDFAIL_NS.
 */
#include "vhost/dev.h"

#include "base/clock.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HDR_LEN sizeof(struct virtio_net_hdr_v1)

/* ---- echo mode: ARP and ICMP echo ---- */

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* One's-complement sum of @len bytes, folded, not inverted. */
static uint32_t csum_add(uint32_t sum, const uint8_t *p, size_t len)
{
	for (size_t i = 0; i + 1 < len; i += 2)
		sum += get16(p + i);
	if (len & 1)
		sum += (uint32_t)p[len - 1] << 8;
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

size_t vhost_net_echo(const uint8_t *in, size_t len, uint32_t ip, const uint8_t mac[6],
		      uint8_t *out, size_t cap, int *kind)
{
	*kind = VHOST_ECHO_IGNORED;
	if (len < 14 || len > cap)
		return 0;
	uint16_t type = get16(in + 12);

	if (type == 0x0806) { /* ARP */
		const uint8_t *a = in + 14;

		if (len < 14 + 28 || get16(a) != 1 || get16(a + 2) != 0x0800 || a[4] != 6 ||
		    a[5] != 4 || get16(a + 6) != 1 || get32(a + 24) != ip)
			return 0;
		memcpy(out, in + 6, 6); /* to the asker */
		memcpy(out + 6, mac, 6);
		put16(out + 12, 0x0806);
		uint8_t *r = out + 14;
		put16(r, 1);
		put16(r + 2, 0x0800);
		r[4] = 6;
		r[5] = 4;
		put16(r + 6, 2);       /* reply */
		memcpy(r + 8, mac, 6); /* sender: us */
		memcpy(r + 14, a + 24, 4);
		memcpy(r + 18, a + 8, 6); /* target: the asker */
		memcpy(r + 24, a + 14, 4);
		*kind = VHOST_ECHO_ARP;
		return 14 + 28;
	}
	if (type != 0x0800 || len < 14 + 20)
		return 0;

	const uint8_t *iph = in + 14;
	size_t ihl = (size_t)(iph[0] & 0xf) * 4, tot = get16(iph + 2);

	if ((iph[0] >> 4) != 4 || ihl < 20 || tot < ihl + 8 || 14 + tot > len || iph[9] != 1 ||
	    get32(iph + 16) != ip || (get16(iph + 6) & 0x3fff) || /* fragments: not ours */
	    csum_add(0, iph, ihl) != 0xffff)
		return 0;
	const uint8_t *icmp = iph + ihl;
	if (icmp[0] != 8 || icmp[1] != 0 || csum_add(0, icmp, tot - ihl) != 0xffff)
		return 0;

	/* The reply: same frame, addresses swapped, type 0; the payload is copied untouched. */
	memcpy(out, in, 14 + tot);
	memcpy(out, in + 6, 6);
	memcpy(out + 6, mac, 6);
	uint8_t *oip = out + 14;
	memcpy(oip + 12, iph + 16, 4);
	memcpy(oip + 16, iph + 12, 4);
	/* Swapping the addresses leaves the IP checksum as it was. */
	uint8_t *oicmp = oip + ihl;
	oicmp[0] = 0;
	/* RFC 1624 incremental update for the type byte 8 -> 0: HC' = ~(~HC + ~m + m'). */
	uint32_t sum = (uint32_t)(~get16(icmp + 2) & 0xffff) + (uint32_t)(~0x0800u & 0xffff);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	put16(oicmp + 2, (uint16_t)~sum);
	*kind = VHOST_ECHO_ICMP;
	return 14 + tot;
}

/* ---- generator mode ---- */

void vhost_net_gen_template(uint8_t *out, uint32_t len, uint32_t ip, const uint8_t mac[6])
{
	uint8_t *fr = out + HDR_LEN, *iph = fr + 14, *udp = iph + 20;
	struct virtio_net_hdr_v1 h = {.num_buffers = 1};

	memcpy(out, &h, HDR_LEN);
	memset(fr, 0, len);
	memset(fr, 0xff, 6); /* broadcast: every driver takes it */
	memcpy(fr + 6, mac, 6);
	put16(fr + 12, 0x0800);
	iph[0] = 0x45;
	put16(iph + 2, (uint16_t)(len - 14));
	put16(iph + 6, 0x4000); /* DF, identification 0: the checksum is the same for all */
	iph[8] = 64;
	iph[9] = 17; /* UDP */
	put16(iph + 12, (uint16_t)(ip >> 16));
	put16(iph + 14, (uint16_t)ip);
	memset(iph + 16, 0xff, 4); /* 255.255.255.255 */
	put16(iph + 10, (uint16_t)~csum_add(0, iph, 20));
	put16(udp, 9); /* discard */
	put16(udp + 2, 9);
	put16(udp + 4, (uint16_t)(len - 34));
	/* UDP checksum 0: none (IPv4); the sequence number at DG_VHOST_GEN_SEQ_OFFSET is 0. */
}

/* ---- IOTLB misses and access failures, on the back-end channel ---- */

static int backend_send(struct dg_vhost *v, uint64_t iova, unsigned int perm, uint8_t type)
{
	struct vu_hdr h = {.request = VU_BACKEND_IOTLB_MSG,
			   .flags = VU_VERSION,
			   .size = sizeof(struct vu_iotlb)};
	struct vu_iotlb m = {.iova = iova, .perm = (uint8_t)perm, .type = type};
	uint8_t msg[VU_HDR_SIZE + sizeof(m)]; /* packed on the wire: no padding after the header */

	if (v->backend_fd < 0)
		return -ENOTCONN;
	memcpy(msg, &h, VU_HDR_SIZE);
	memcpy(msg + VU_HDR_SIZE, &m, sizeof(m));
	ssize_t n = send(v->backend_fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL);
	return n == (ssize_t)sizeof(msg) ? 0 : -EAGAIN;
}

static void miss(struct dg_vhost *v, struct vhost_vq *q, const struct vhost_fault *f)
{
	uint64_t now = dg_now_ns();
	unsigned int i;

	for (i = 0; i < v->nmiss; i++) {
		if (v->miss[i].page == f->addr && (v->miss[i].perm & f->perm) == f->perm) {
			if (now - v->miss[i].sent_ns < VHOST_MISS_RESEND_NS) {
				vhost_count(&v->st.iotlb_miss_dedup, 1);
				q->retry_ns = v->miss[i].sent_ns + VHOST_MISS_RESEND_NS;
				return;
			}
			break;
		}
	}
	if (backend_send(v, f->addr, f->perm, VU_IOTLB_MISS)) {
		q->retry_ns = now + VHOST_MISS_SENDFAIL_NS; /* not pending: try again soon */
		return;
	}
	q->retry_ns = now + VHOST_MISS_RESEND_NS;
	vhost_count(&v->st.iotlb_misses, 1);
	vhost_log(v, 2, "iotlb miss vring %u iova 0x%llx perm %u", (unsigned int)(q - v->vq),
		  (unsigned long long)f->addr, f->perm);
	if (i == v->nmiss) {
		if (v->nmiss == VHOST_MAX_PENDING) {
			/* Forget the oldest: at worst it is asked for once more. */
			memmove(&v->miss[0], &v->miss[1], sizeof(v->miss[0]) * (v->nmiss - 1));
			i = --v->nmiss;
		}
		v->nmiss++;
	}
	v->miss[i] = (struct vhost_miss){.page = f->addr, .perm = f->perm, .sent_ns = now};
}

/* After UPDATEs: forget the pending misses that now translate, retry every queue. */
static void updates_arrived(struct dg_vhost *v)
{
	unsigned int k = 0;

	for (unsigned int i = 0; i < v->nmiss; i++) {
		uint64_t leaf =
			vhost_iotlb_lookup(&v->iotlb, v->miss[i].page >> VHOST_IOTLB_PAGE_SHIFT);
		unsigned int p = (leaf & VHOST_IOTLB_READ ? VU_ACCESS_RO : 0) |
				 (leaf & VHOST_IOTLB_WRITE ? VU_ACCESS_WO : 0);

		if (!leaf || (p & v->miss[i].perm) != v->miss[i].perm)
			v->miss[k++] = v->miss[i];
	}
	v->nmiss = k;
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++)
		v->vq[i].retry_ns = 0;
}

static void access_fail(struct dg_vhost *v, const struct vhost_fault *f)
{
	vhost_count(&v->st.iotlb_access_fails, 1);
	vhost_log(v, 0, "access outside what was granted: iova 0x%llx needs %s",
		  (unsigned long long)f->addr, f->perm == VU_ACCESS_WO ? "write" : "read");
	(void)backend_send(v, f->addr, f->perm, VU_IOTLB_ACCESS_FAIL);
}

static void ring_error(struct dg_vhost *v, unsigned int qi, int rc)
{
	struct vhost_vq *q = &v->vq[qi];
	uint64_t one = 1;

	q->broken = true;
	vhost_count(&v->st.ring_errors, 1);
	vhost_log(v, 0, "vring %u stopped: malformed ring or descriptor (%s)", qi, strerror(-rc));
	if (q->rings_ok)
		vhost_log(v, 0, "vring %u: avail idx %u flags %u, next avail %u, used idx %u", qi,
			  atomic_load_explicit((_Atomic uint16_t *)(void *)(q->avail + 2),
					       memory_order_relaxed),
			  atomic_load_explicit((_Atomic uint16_t *)(void *)q->avail,
					       memory_order_relaxed),
			  q->last_avail, q->used_idx);
	if (q->err_fd >= 0)
		(void)!write(q->err_fd, &one, sizeof(one));
}

/* ---- the data path ---- */

void vhost_dp_reset(struct dg_vhost *v)
{
	v->nmiss = 0;
	v->fq_head = v->fq_len = 0;
	v->gen_seq = 0;
}

/* Invalidation number @k's range, or false when its record was overwritten meanwhile. */
static bool inval_range(struct dg_vhost *v, uint64_t k, uint64_t *first, uint64_t *last)
{
	struct vhost_inval_rec *r = &v->sync.inval_log[(k - 1) % VHOST_INVAL_LOG];
	/* Seqlock reader: acquire pairs with the writer's release store of gen. */
	uint64_t g1 = atomic_load_explicit(&r->gen, memory_order_acquire);

	/* Acquire loads: the gen load below stays after them, and a range from a newer writer
	 * (release stores in invalidated(), dev.c) makes that load see gen = 0 or newer. */
	*first = atomic_load_explicit(&r->first, memory_order_acquire);
	*last = atomic_load_explicit(&r->last, memory_order_acquire);
	return g1 == k && atomic_load_explicit(&r->gen, memory_order_relaxed) == k;
}

/*
 * Invalidations (@from, @to] happened: what answered a pending miss for a page they cover may be
 * gone (answered by an UPDATE, removed at once, as QEMU's lazy flushes do), so nothing would
 * answer it again: forget those misses and let the waiting queues ask again now. Misses for
 * other pages stay pending (under iommu.strict=1 an INVALIDATE follows every unmap: asking
 * again for every pending miss at each one made QEMU translate IOVAs the guest had unmapped
 * meanwhile, and report them to the guest as DMA faults). When the log was overrun, forget all.
 */
static void forget_invalidated_misses(struct dg_vhost *v, uint64_t from, uint64_t to)
{
	bool all = to - from > VHOST_INVAL_LOG, forgot = false;
	unsigned int k = 0;

	for (unsigned int i = 0; i < v->nmiss; i++) {
		bool covered = all;

		for (uint64_t g = from + 1; !covered && g <= to; g++) {
			uint64_t first, last;

			if (!inval_range(v, g, &first, &last))
				covered = true; /* overwritten: assume it covered the page */
			else if (v->miss[i].page <= last && first <= v->miss[i].page + 4095)
				covered = true;
		}
		if (covered)
			forgot = true;
		else
			v->miss[k++] = v->miss[i];
	}
	v->nmiss = k;
	if (forgot || all)
		for (unsigned int i = 0; i < VHOST_NR_VQ; i++)
			v->vq[i].retry_ns = 0;
}

void vhost_dp_quiescent(struct dg_vhost *v)
{
	/*
	 * The agents' quiescent point: each applies the engine's invalidation commands to its
	 * cache and acknowledges them (nothing translated before this point is used after it).
	 * Its acquire of the commands also makes visible what the control thread wrote before
	 * queueing them: inval_gen and the ring_stale flags, read below (relaxed).
	 */
	vhost_agents_quiesce(v->agent, VHOST_NR_VQ);
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++) {
		struct vhost_vq *q = &v->vq[i];

		if (atomic_exchange_explicit(&q->ring_stale, false, memory_order_relaxed))
			q->rings_ok = false;
	}
	/* Acquire pairs with the release store of inval_gen in invalidated() (dev.c). */
	uint64_t g = atomic_load_explicit(&v->sync.inval_gen, memory_order_acquire);
	if (g != v->local_gen) {
		forget_invalidated_misses(v, v->local_gen, g);
		v->local_gen = g;
	}
	/* Acquire pairs with the release in vhost_sync_pause(). */
	if (v->sync.worker && atomic_load_explicit(&v->sync.pause_req, memory_order_acquire)) {
		/* Offline while parked: the control thread may invalidate meanwhile. */
		vhost_agents_offline(v->agent, VHOST_NR_VQ);
		pthread_mutex_lock(&v->sync.lock);
		v->sync.parked = true;
		pthread_cond_broadcast(&v->sync.cond);
		while (atomic_load_explicit(&v->sync.pause_req, memory_order_relaxed))
			pthread_cond_wait(&v->sync.cond, &v->sync.lock);
		v->sync.parked = false;
		pthread_mutex_unlock(&v->sync.lock);
		vhost_agents_online(v->agent, VHOST_NR_VQ);
		/* Caught up: what was invalidated while parked is visible now. */
		vhost_dp_quiescent(v);
		return;
	}
	/* Acquire pairs with the release after each UPDATE in handle_iotlb(). */
	uint64_t u = atomic_load_explicit(&v->sync.update_gen, memory_order_acquire);
	if (u != v->seen_update_gen) {
		v->seen_update_gen = u;
		updates_arrived(v);
	}
}

static bool queue_ready(struct dg_vhost *v, unsigned int qi)
{
	struct vhost_vq *q = &v->vq[qi];

	if (!q->enabled || !q->started || q->broken || !q->num || !q->addr_set || !v->mt.n)
		return false;
	if (q->retry_ns) {
		if (dg_now_ns() < q->retry_ns)
			return false; /* waiting for the answer to a miss */
		q->retry_ns = 0;
	}
	if (!q->rings_ok) {
		struct vhost_as as = vhost_dev_as(v);
		struct vhost_fault f;
		int rc = vhost_vq_map_rings(q, &as, &f);

		if (rc == -EAGAIN) {
			miss(v, q, &f);
			return false;
		}
		if (rc) {
			if (rc == -EACCES)
				access_fail(v, &f);
			ring_error(v, qi, rc);
			return false;
		}
		vhost_count(&v->st.ring_translations, 1);
	}
	return true;
}

static void notify(struct dg_vhost *v, unsigned int qi)
{
	struct vhost_vq *q = &v->vq[qi];
	uint64_t one = 1;

	if (vhost_vq_publish(q) && q->call_fd >= 0) {
		(void)!write(q->call_fd, &one, sizeof(one));
		vhost_count(&v->st.q[qi].calls, 1);
	}
}

static void enqueue_frame(struct dg_vhost *v, const uint8_t *data, size_t len)
{
	if (v->fq_len == VHOST_FRAMEQ || len > VHOST_FRAME_MAX) {
		vhost_count(&v->st.q[VHOST_RXQ].dropped, 1);
		return;
	}
	struct vhost_frame *f = &v->frames[(v->fq_head + v->fq_len) % VHOST_FRAMEQ];

	memcpy(f->data, data, len);
	f->len = (uint32_t)len;
	v->fq_len++;
}

/*
 * The next chain of queue @qi for the data path: 1 = a chain to use, 0 = stop this burst (the
 * ring is empty, a miss was asked for, or the ring is broken and stopped), -1 = a chain refused
 * for an access outside what was granted, already returned empty to the driver (count it and
 * go on).
 */
static int next_chain(struct dg_vhost *v, unsigned int qi, const struct vhost_as *as,
		      struct vhost_chain *ch)
{
	struct vhost_vq *q = &v->vq[qi];
	struct vhost_fault f;
	int rc = vhost_vq_pop(q, as, ch, &f);

	if (rc > 0)
		return 1;
	if (rc == 0)
		return 0;
	if (rc == -EAGAIN) {
		miss(v, q, &f);
		return 0;
	}
	if (rc == -EACCES) {
		access_fail(v, &f);
		vhost_vq_push(q, ch->head, 0);
		return -1;
	}
	ring_error(v, qi, rc);
	return 0;
}

static unsigned int do_rx(struct dg_vhost *v)
{
	struct vhost_vq *q = &v->vq[VHOST_RXQ];
	struct vhost_as as = vhost_dev_as(v);
	struct vhost_chain ch;
	unsigned int done = 0, sent = 0;
	uint64_t bytes = 0;

	while (v->fq_len && done < VHOST_BURST) {
		struct vhost_frame *fr = &v->frames[v->fq_head];
		int rc = next_chain(v, VHOST_RXQ, &as, &ch);

		if (rc == 0)
			break; /* no buffer posted: the frame waits */
		if (rc < 0) {
			done++;
			continue;
		}
		const struct vhost_seg *ws = ch.seg + ch.nread;
		unsigned int nw = ch.nseg - ch.nread;

		if (ch.write_len < HDR_LEN + fr->len) {
			vhost_vq_push(q, ch.head, 0);
			vhost_count(&v->st.q[VHOST_RXQ].dropped, 1);
		} else {
			struct virtio_net_hdr_v1 h = {.num_buffers = 1};

			vhost_segs_write(ws, nw, 0, &h, HDR_LEN);
			vhost_segs_write(ws, nw, HDR_LEN, fr->data, fr->len);
			vhost_vq_push(q, ch.head, (uint32_t)(HDR_LEN + fr->len));
			bytes += fr->len;
			sent++;
		}
		v->fq_head = (v->fq_head + 1) % VHOST_FRAMEQ;
		v->fq_len--;
		done++;
	}
	if (sent) { /* once per burst: an atomic add per frame costs more than the rest */
		vhost_count(&v->st.q[VHOST_RXQ].packets, sent);
		vhost_count(&v->st.q[VHOST_RXQ].bytes, bytes);
	}
	if (done)
		vhost_log(v, 3, "vring 0: %u chains, %u frames wait", done, v->fq_len);
	notify(v, VHOST_RXQ);
	return done;
}

static void put_seq(uint8_t *p, uint64_t seq)
{
	for (int i = 7; i >= 0; i--, seq >>= 8)
		p[i] = (uint8_t)seq;
}

static unsigned int do_gen(struct dg_vhost *v)
{
	struct vhost_vq *q = &v->vq[VHOST_RXQ];
	struct vhost_as as = vhost_dev_as(v);
	const size_t n = HDR_LEN + v->gen_len, seq_off = HDR_LEN + DG_VHOST_GEN_SEQ_OFFSET;
	struct vhost_chain ch;
	unsigned int done = 0, sent = 0, dropped = 0;

	while (done < VHOST_BURST) {
		int rc = next_chain(v, VHOST_RXQ, &as, &ch);

		if (rc == 0)
			break; /* no buffer posted */
		if (rc < 0) {
			done++;
			continue;
		}
		const struct vhost_seg *ws = ch.seg + ch.nread;
		unsigned int nw = ch.nseg - ch.nread;

		if (ch.write_len < n) {
			vhost_vq_push(q, ch.head, 0);
			dropped++;
		} else if (ws[0].len >= n) {
			memcpy(ws[0].host, v->gen_tmpl, n);
			put_seq(ws[0].host + seq_off, v->gen_seq++);
			vhost_vq_push(q, ch.head, (uint32_t)n);
			sent++;
		} else {
			uint8_t seq[8];

			put_seq(seq, v->gen_seq++);
			vhost_segs_write(ws, nw, 0, v->gen_tmpl, n);
			vhost_segs_write(ws, nw, seq_off, seq, sizeof(seq));
			vhost_vq_push(q, ch.head, (uint32_t)n);
			sent++;
		}
		done++;
	}
	if (sent) {
		vhost_count(&v->st.q[VHOST_RXQ].packets, sent);
		vhost_count(&v->st.q[VHOST_RXQ].bytes, (uint64_t)sent * v->gen_len);
	}
	if (dropped)
		vhost_count(&v->st.q[VHOST_RXQ].dropped, dropped);
	if (done)
		vhost_log(v, 3, "vring 0: %u chains generated", done);
	notify(v, VHOST_RXQ);
	return done;
}

static void handle_frame(struct dg_vhost *v, const uint8_t *frame, size_t len)
{
	uint8_t reply[VHOST_FRAME_MAX];
	size_t n;
	int kind;

	switch (v->cfg.mode) {
	case DG_VHOST_SINK:
	case DG_VHOST_GEN:
		return;
	case DG_VHOST_LOOP:
		enqueue_frame(v, frame, len);
		return;
	case DG_VHOST_ECHO:
		n = vhost_net_echo(frame, len, v->cfg.ipv4, v->mac, reply, sizeof(reply), &kind);
		if (kind == VHOST_ECHO_ARP)
			vhost_count(&v->st.arp_replies, 1);
		else if (kind == VHOST_ECHO_ICMP)
			vhost_count(&v->st.icmp_replies, 1);
		else
			vhost_count(&v->st.ignored, 1);
		if (n)
			enqueue_frame(v, reply, n);
		return;
	}
}

static unsigned int do_tx(struct dg_vhost *v)
{
	struct vhost_vq *q = &v->vq[VHOST_TXQ];
	struct vhost_as as = vhost_dev_as(v);
	struct vhost_chain ch;
	unsigned int done = 0, got = 0;
	uint64_t bytes = 0;

	while (done < VHOST_BURST) {
		if (v->cfg.mode != DG_VHOST_SINK && v->fq_len == VHOST_FRAMEQ)
			break; /* receive side full: leave frames in the ring (back-pressure) */
		int rc = next_chain(v, VHOST_TXQ, &as, &ch);

		if (rc == 0)
			break;
		if (rc < 0) {
			done++;
			continue;
		}
		if (ch.read_len < HDR_LEN || ch.read_len - HDR_LEN > VHOST_FRAME_MAX) {
			vhost_count(&v->st.q[VHOST_TXQ].dropped, 1);
		} else {
			size_t len = (size_t)ch.read_len - HDR_LEN;

			vhost_segs_read(ch.seg, ch.nread, HDR_LEN, v->txbuf, len);
			bytes += len;
			got++;
			handle_frame(v, v->txbuf, len);
		}
		vhost_vq_push(q, ch.head, 0);
		done++;
	}
	if (got) { /* once per burst, as in do_rx() */
		vhost_count(&v->st.q[VHOST_TXQ].packets, got);
		vhost_count(&v->st.q[VHOST_TXQ].bytes, bytes);
	}
	if (done)
		vhost_log(v, 3, "vring 1: %u chains", done);
	notify(v, VHOST_TXQ);
	return done;
}

unsigned int vhost_dp_poll(struct dg_vhost *v)
{
	unsigned int work = 0;

	if (queue_ready(v, VHOST_TXQ))
		work += do_tx(v);
	if (v->cfg.mode == DG_VHOST_GEN) {
		if (queue_ready(v, VHOST_RXQ))
			work += do_gen(v);
	} else if (v->fq_len && queue_ready(v, VHOST_RXQ)) {
		work += do_rx(v);
	}
	/* Frames delivered may have made room for more transmitted ones. */
	if (work && queue_ready(v, VHOST_TXQ))
		work += do_tx(v);
	return work;
}

void vhost_dp_kicks(struct dg_vhost *v, bool on, bool *pending)
{
	for (unsigned int i = 0; i < VHOST_NR_VQ; i++) {
		struct vhost_vq *q = &v->vq[i];

		if (!q->started || !q->enabled || q->broken)
			continue;
		if (!q->rings_ok) {
			/*
			 * Its rings were invalidated while kicks were off: the flag cannot be
			 * cleared through the old translation, so the queue is not left asleep
			 * with the driver told not to kick: poll again (which translates the
			 * rings, or waits for a MISS whose UPDATE wakes us).
			 */
			if (on && q->kicks_off && !q->retry_ns && q->num && q->addr_set && v->mt.n)
				*pending = true;
			continue;
		}
		if (!on)
			vhost_vq_kicks_off(q);
		else if (vhost_vq_kicks_on(q) && !q->retry_ns &&
			 (i == VHOST_TXQ || v->fq_len || v->cfg.mode == DG_VHOST_GEN))
			*pending = true; /* work arrived while kicks were off */
	}
}

int vhost_dp_idle_timeout_ms(const struct dg_vhost *v)
{
	uint64_t now = 0, first = UINT64_MAX;

	for (unsigned int i = 0; i < VHOST_NR_VQ; i++)
		if (v->vq[i].retry_ns && v->vq[i].retry_ns < first)
			first = v->vq[i].retry_ns;
	if (first == UINT64_MAX)
		return VHOST_IDLE_MS;
	now = dg_now_ns();
	if (first <= now)
		return 0;
	/* Round up: waking before the deadline would find the queue still waiting. */
	uint64_t ms = (first - now + 999999) / 1000000;
	return ms < VHOST_IDLE_MS ? (int)ms : VHOST_IDLE_MS;
}

int dg_vhost_poll(dg_vhost *v, unsigned int *work)
{
	unsigned int w;

	if (!v)
		return -EINVAL;
	/* The caller is the data path for this call only: online for it, offline after it, so a
	 * message handled between two polls never waits for the agents. */
	vhost_agents_online(v->agent, VHOST_NR_VQ);
	vhost_dp_quiescent(v);
	w = vhost_dp_poll(v);
	vhost_agents_offline(v->agent, VHOST_NR_VQ);
	if (work)
		*work = w;
	return 0;
}
