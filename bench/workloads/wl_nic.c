/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_nic.c - the emulated NIC: queue pairs of descriptor rings, the driver's
 * NAPI-style poll and the device's DMA bursts. Used by xdp64, fwd64, bond4 and tcp.
 *
 * Rings live in coherent memory (dg_dma_alloc_coherent), 16-byte descriptors:
 *
 *   struct nic_desc { addr; len; flags (EOP); status (DD) }
 *
 *   driver                                           device
 *   fill desc[ntu] (addr, len, flags), status = 0
 *   tail = ntu  (release: the doorbell register) --> acquire load of tail
 *                                                    translate the ring once per burst
 *                                                    translate the buffer(s), copy
 *                                                    desc.len = bytes written (rx)
 *   acquire load of desc.status  <------------------ status = DD (release), on the last
 *   unmap, look at the payload                       descriptor of a send (EOP)
 *
 * Indices are free-running 32-bit counters (in flight = ntu - ntc <= ring size), so a full
 * ring and an empty one differ. The device owns a descriptor from the tail store that covers
 * it until its DD store; the driver rewrites it only after the acquire load that saw DD, so
 * every plain access to a descriptor is ordered by one of those two release/acquire pairs.
 *
 * Driver poll of a port (all its queues), the phases of a Linux NAPI poll:
 *   1. reap: rx descriptors and tx sends whose DD is set (at most a budget per queue), once
 *      a ring of the port has prm->coalesce of them done, or all it holds (a draining
 *      driver reaps what is done): the completion threshold of DPDK's ixgbe_tx_free_bufs()
 *      (the DD bit of the descriptor tx_rs_thresh past the next to clean, then tx_rs_thresh
 *      buffers freed at once), or in Linux interrupt moderation (ethtool -C rx-frames), so
 *      a poll's unmaps share one invalidation and its wait; 0 reaps whatever is done;
 *   2. one dg_dma_batch: sync_for_cpu + unmap(SKIP_CPU_SYNC) of received buffers (the
 *      driver syncs what the device wrote, as drivers do with small packets), unmap of sent
 *      buffers and sg lists; dg_dma_batch_submit() starts the batch's invalidation;
 *   3. refill the rx rings from spare buffers (a page pool's worth: two budgets per queue
 *      more than the rings hold) and ring their doorbells;
 *   4. dg_dma_batch_end() of the PREVIOUS poll's batch: the one invalidation wait of the
 *      poll, for a batch the device has had a whole poll to acknowledge; only after it does
 *      the driver look at what that poll unmapped (a buffer is the device's until then).
 *      This poll's batch stays in flight until the next poll (two batches per port,
 *      alternating): strict's guarantee is unchanged - no buffer is read, reused or given
 *      back before the invalidation covering its unmap completed - but the driver does not
 *      stop for the device's acknowledgement, it works on the poll before; a poll that
 *      reaped nothing leaves a batch the device has not acknowledged yet in flight and polls
 *      again (dg_dma_batch_done) rather than waiting;
 *   5. work on the previous poll's buffers: every received frame's header is read and
 *      checked (magic, checksum, queue, sequence number); fwd swaps the MAC addresses and
 *      sends the packet back out; sent buffers go back; bond and tcp write the header of
 *      each new send;
 *   6. map new sends (map_single, or map_sg for TSO), write their descriptors, doorbell.
 * A draining driver keeps polling until nothing is in flight, its last batch included.
 * Phases 2, 3, 4 and 6 are the DMA API time (timed in one poll in WL_SAMPLE_EVERY).
 *
 * Device burst of a queue: at most NIC_BURST descriptors per ring. Once a burst's descriptors
 * are known, before its first translation, the device starts the translations of all its
 * buffers (nic_prefetch_burst(), wl_nic.h: dg_dev_prefetch_fast() of each distinct
 * page-table line once, dmaguard/dev.h; a send's or aggregation buffer's every line): a
 * strict burst of 32 buffers reads 4 lines (consecutive IOVAs, 8 entries a line; 5 when they
 * straddle), each written by the driver's core, and translated 8 at a time between the copies
 * they came one cross-core miss after another; prefetched together they overlap. Identity
 * runs the same loop (its prefetch does nothing). A look-ahead one burst further (the next
 * burst's descriptor and page-table lines asked for during this one) was tried and removed:
 * no gain in three timed A/Bs (docs/iommu.md). rx (rx_burst()): translate the ring, then,
 * NIC_ACK_EVERY buffers at a time, every frame's destination and copy the frames (a header
 * with the queue's next sequence number, the rest from a template); with rx_frames > 1
 * (receive aggregation, rx_burst_agg(): frames back to back, each its own DMA like a NIC
 * writing packets into a multi-packet buffer) each buffer's range is translated once and the
 * frames are copied into it at their offsets (nic_agg_fill()). tx (tx_burst()): the burst's
 * whole sends (nic_tx_extent(), wl_nic.h: one pass over the descriptors), NIC_ACK_EVERY
 * descriptors at a time translated and then copied to the wire scratch buffer (the group's
 * table reads overlap, as rx's do); check each send's header (and a TSO send's last byte,
 * tx_check()). Every NIC_ACK_EVERY of those DMAs the device acknowledges a pending
 * invalidation (dg_dev_quiesce_if_pending_fast(), dmaguard/dev.h: no call when nothing is
 * pending; what it translated before is released, the ring is translated again), as an IOMMU
 * completes an invalidation between two DMAs of the device, whatever its queue still holds;
 * so a driver's wait lasts a few DMAs, not a burst. The
 * burst's DD bits are written back together at its end (a NIC's descriptor write-back threshold):
 * written one by one, each store met the driver's poll of the same line and the device paid a cache
 * miss per descriptor, which made identity slower than strict (whose driver waits instead of
 * polling). After each ring's burst the device thread reaches a quiescent point of all its devices
 * (dg_dev_quiesce_fast(): the library's dg_dev_quiesce() only when something is pending), and a
 * burst moves at most WL_BURST_BYTES.
 */
#include "wl_nic.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIC_BUDGET 64 /* rx buffers / tx sends reaped per queue and poll */
/* DMAs (frames, tx descriptors) between two checks for a pending invalidation */
#define NIC_ACK_EVERY 8
#define NIC_DD	      1	 /* desc.status: done */
#define NIC_MAX_Q     64 /* queue pairs per port */
#define NIC_FRAME_SG  4	 /* translated segments per rx frame at most */

/* A received buffer on the rx ring (one per descriptor). */
struct nic_rxslot {
	void *buf;
	uint64_t dma;
	uint32_t slot; /* two-step: its IOVA slot */
};

/* A send: its buffer or page list and the descriptors it took on the tx ring. */
struct nic_send {
	void *buf;		       /* FORWARD/GEN: the buffer */
	uint64_t dma;		       /* its DMA address */
	uint32_t first;		       /* tx ring index of its first descriptor */
	uint16_t ndesc;		       /* descriptors (0: its map failed) */
	uint16_t nents;		       /* TSO: entries of sg */
	uint32_t slot;		       /* two-step: its IOVA slot */
	struct dg_dma_sg sg[NIC_SEGS]; /* TSO: the pages */
};

struct nic_ring {
	struct nic_desc *desc; /* CPU address of the coherent ring */
	uint64_t dma;	       /* its DMA address */
	uint32_t size, mask;
	/*
	 * Driver: next to use, next to clean (free running), written for every descriptor: a
	 * line of their own. Next to mask, dma and size (read by the device for every
	 * descriptor and ring translation) they cost the device a cross-core miss per driver
	 * poll and the driver one back (docs/iommu.md, "Shared cache lines").
	 */
	_Alignas(64) uint32_t ntu, ntc;
	/* The doorbell register: release store by the driver, acquire load by the device. */
	_Alignas(64) _Atomic uint32_t tail;
	_Alignas(64) uint32_t dev_head; /* device: next descriptor */
	uint64_t dev_seq;		/* device (rx): next frame's sequence number */
	struct wl_ring_xlat dev_x;	/* device: the ring's translation */
};
/* Four lines: read-only (both), the driver's indices, the doorbell, the device's. */
_Static_assert(offsetof(struct nic_ring, ntu) / 64 != offsetof(struct nic_ring, mask) / 64 &&
		       offsetof(struct nic_ring, ntu) / 64 !=
			       offsetof(struct nic_ring, tail) / 64 &&
		       offsetof(struct nic_ring, tail) / 64 !=
			       offsetof(struct nic_ring, dev_head) / 64,
	       "nic_ring: what the driver writes, the doorbell and what the device writes are on "
	       "lines of their own");

struct nic_queue {
	unsigned int id; /* queue number of the workload */
	struct nic_ring rx, tx;
	struct nic_rxslot *rxs;		    /* per rx descriptor */
	struct wl_slots rx_slots, tx_slots; /* two-step drivers: the rings' IOVA ranges */
	struct nic_send *sends;		    /* ring of sends: [send_head, send_tail) outstanding */
	uint32_t nsends, send_head, send_tail;
	uint64_t rx_seq; /* driver: next expected frame */
	uint64_t tx_seq; /* driver: next send's sequence number */
	/* this poll */
	uint32_t nrx, ntx; /* reaped */
	uint32_t rx_done[NIC_BUDGET], rx_len[NIC_BUDGET];
	void *rx_buf[NIC_BUDGET]; /* their buffers (the refill reuses the slots before work) */
	/* the previous poll's, unmapped in the batch still in flight: the work of this poll */
	uint32_t pnrx, pntx; /* the pntx sends after send_head are the pending ones */
	uint32_t prx_len[NIC_BUDGET];
	void *prx_buf[NIC_BUDGET];
	void *fwd[NIC_BUDGET]; /* received buffers to send (FORWARD) */
	uint32_t nfwd;
	uint32_t nrx_new, ntx_new; /* mapped, descriptors still to write */
};

struct nic_port {
	const struct nic_param *prm;
	unsigned int nq;
	struct nic_queue *q[NIC_MAX_Q];
	struct wl_batches batches; /* the driver's unmap batches: one in flight */
	uint8_t tmpl[65536];	   /* frame template the device copies from */
};

enum { CLS_RX = 0, CLS_TX = 1 };

unsigned int nic_port_queues(uint32_t queues, unsigned int port, unsigned int nports)
{
	if (!queues)
		return 1;
	return queues / nports + (port < queues % nports ? 1 : 0);
}

static uint32_t tso_segs(const struct nic_param *prm)
{
	return (prm->tx_len + prm->tx_buf - 1) / prm->tx_buf;
}

/* Descriptors a send may need at most (TSO: one per page under identity). */
static uint32_t send_descs(const struct nic_param *prm)
{
	return prm->tx == NIC_TX_TSO ? tso_segs(prm) : 1;
}

void nic_classes(const struct wl_run *r, unsigned int port, struct wl_class *cls,
		 unsigned int *ncls)
{
	const struct nic_param *prm = r->wl->param;
	unsigned int nq = nic_port_queues(prm->queues, port, r->nports);
	uint32_t rx = prm->rx_ring;

	/* Exactly what can be out at once: a poll unmaps before it maps again. */
	if (prm->tx == NIC_TX_FORWARD)
		rx += prm->tx_ring; /* buffers in flight on the tx ring too */
	/* a poll refills before the buffers it reaped come back, which is a poll later (the
	   batch unmapping them ends in the next poll) */
	rx += 2 * NIC_BUDGET;
	cls[CLS_RX] = (struct wl_class){.size = prm->rx_buf, .count = nq * rx};
	*ncls = 1;
	if (prm->tx == NIC_TX_GEN) {
		cls[CLS_TX] =
			(struct wl_class){.size = prm->tx_buf, .count = nq * prm->tx_inflight};
		*ncls = 2;
	} else if (prm->tx == NIC_TX_TSO) {
		cls[CLS_TX] = (struct wl_class){.size = prm->tx_buf,
						.count = nq * prm->tx_inflight * tso_segs(prm),
						.shuffle = true};
		*ncls = 2;
	}
}

static int ring_init(struct wl_port *p, struct nic_ring *rg, uint32_t size)
{
	rg->size = size;
	rg->mask = size - 1;
	rg->desc = dg_dma_alloc_coherent(p->dd, (size_t)size * sizeof(struct nic_desc), &rg->dma);
	if (!rg->desc) {
		fprintf(stderr, "bench workloads: ring: %s\n", strerror(errno));
		return -ENOMEM;
	}
	return 0;
}

static void ring_fini(struct wl_port *p, struct nic_ring *rg)
{
	if (rg->desc)
		dg_dma_free_coherent(p->dd, rg->desc, (size_t)rg->size * sizeof(struct nic_desc),
				     rg->dma);
}

static int slots_init(struct wl_port *p, struct wl_slots *s, uint32_t n, uint64_t bytes)
{
	int e = wl_slots_init(s, p->dd, n, bytes);

	if (e)
		fprintf(stderr, "bench workloads: ring slots: %s\n", strerror(-e));
	return e;
}

static void slots_fini(struct wl_port *p, struct wl_slots *s)
{
	int e = wl_slots_fini(s);

	if (e) /* a slot still linked: the teardown's own checks report the run as failed */
		fprintf(stderr, "bench workloads: port %u: ring slots: %s\n", p->idx, strerror(-e));
}

/* Bytes of a tx slot: a send's buffer, or a TSO send's pages one granule each. */
static uint64_t tx_slot_bytes(const struct nic_param *prm)
{
	if (prm->tx == NIC_TX_TSO)
		return (uint64_t)tso_segs(prm) * 4096;
	return prm->tx == NIC_TX_FORWARD ? prm->rx_buf : prm->tx_buf;
}

int nic_port_init(struct wl_port *p)
{
	const struct nic_param *prm = p->run->wl->param;
	struct nic_port *np = calloc(1, sizeof(*np));
	unsigned int first = 0;

	if (!np)
		return -ENOMEM;
	p->priv = np;
	np->prm = prm;
	np->nq = nic_port_queues(prm->queues, p->idx, p->run->nports);
	if (np->nq > NIC_MAX_Q)
		return -EINVAL;
	for (unsigned int i = 0; i < p->idx; i++)
		first += nic_port_queues(prm->queues, i, p->run->nports);
	for (size_t i = 0; i < sizeof(np->tmpl); i++)
		np->tmpl[i] = (uint8_t)(i * 7 + 3);
	for (unsigned int i = 0; i < np->nq; i++) {
		struct nic_queue *q = aligned_alloc(64, sizeof(*q));

		if (!q)
			return -ENOMEM;
		memset(q, 0, sizeof(*q));
		np->q[i] = q;
		q->id = first + i;
		if (prm->rx_ring) {
			q->rxs = calloc(prm->rx_ring, sizeof(*q->rxs));
			if (!q->rxs || ring_init(p, &q->rx, prm->rx_ring))
				return -ENOMEM;
			/* the ring, and the refill made while two polls' unlinks are in flight */
			if (p->two_step &&
			    slots_init(p, &q->rx_slots, prm->rx_ring + 2 * NIC_BUDGET, prm->rx_buf))
				return -ENOMEM;
		}
		if (prm->tx != NIC_TX_NONE) {
			q->nsends = 1;
			while (q->nsends < prm->tx_ring)
				q->nsends <<= 1;
			q->sends = calloc(q->nsends, sizeof(*q->sends));
			if (!q->sends || ring_init(p, &q->tx, prm->tx_ring))
				return -ENOMEM;
			/* sends are linked after the poll's wait: the outstanding ones suffice */
			if (p->two_step &&
			    slots_init(p, &q->tx_slots, q->nsends, tx_slot_bytes(prm)))
				return -ENOMEM;
		}
	}
	return 0;
}

void nic_port_fini(struct wl_port *p)
{
	struct nic_port *np = p->priv;

	for (unsigned int i = 0; i < np->nq; i++) {
		struct nic_queue *q = np->q[i];

		if (!q)
			continue;
		slots_fini(p, &q->rx_slots);
		slots_fini(p, &q->tx_slots);
		ring_fini(p, &q->rx);
		ring_fini(p, &q->tx);
		free(q->rxs);
		free(q->sends);
		free(q);
	}
	free(np);
	p->priv = NULL;
}

bool nic_drv_idle(const struct wl_port *p)
{
	const struct nic_port *np = p->priv;

	for (unsigned int i = 0; i < np->nq; i++) {
		const struct nic_queue *q = np->q[i];

		if (q->rx.ntu != q->rx.ntc || q->send_head != q->send_tail)
			return false;
	}
	return !np->batches.pend;
}

/* ---- driver ------------------------------------------------------------------------------------- */

static struct nic_send *send_at(struct nic_queue *q, uint32_t i)
{
	return &q->sends[i & (q->nsends - 1)];
}

static void reap(const struct nic_param *prm, struct nic_queue *q, bool go)
{
	q->nrx = q->ntx = q->nfwd = 0;
	if (!go)
		return;
	while (prm->rx_ring && q->rx.ntc != q->rx.ntu && q->nrx < NIC_BUDGET) {
		uint32_t i = q->rx.ntc & q->rx.mask;
		struct nic_desc *dsc = &q->rx.desc[i];

		/* Acquire pairs with the device's release store of DD in rx_burst(). */
		if (!(atomic_load_explicit(&dsc->status, memory_order_acquire) & NIC_DD))
			break;
		q->rx_done[q->nrx] = i;
		q->rx_buf[q->nrx] = q->rxs[i].buf;
		q->rx_len[q->nrx++] = dsc->len;
		q->rx.ntc++;
	}
	while (q->send_head + q->pntx + q->ntx != q->send_tail && q->ntx < NIC_BUDGET) {
		struct nic_send *s = send_at(q, q->send_head + q->pntx + q->ntx);
		uint32_t last = (s->first + s->ndesc - 1) & q->tx.mask;

		/* Acquire pairs with the device's release store of DD in tx_burst(). */
		if (!(atomic_load_explicit(&q->tx.desc[last].status, memory_order_acquire) &
		      NIC_DD))
			break;
		q->tx.ntc += s->ndesc;
		q->ntx++;
	}
}

/* True if a ring of @q has prm->coalesce completions (or all it holds) to reap. */
static bool ready(const struct nic_param *prm, const struct nic_queue *q)
{
	uint32_t c = prm->coalesce ? prm->coalesce : 1, n = q->rx.ntu - q->rx.ntc;

	/* Relaxed: a hint only, reap() loads every DD it uses with acquire. */
	if (prm->rx_ring && n &&
	    atomic_load_explicit(&q->rx.desc[(q->rx.ntc + (n < c ? n : c) - 1) & q->rx.mask].status,
				 memory_order_relaxed) &
		    NIC_DD)
		return true;
	n = q->send_tail - q->send_head - q->pntx;
	if (n) {
		const struct nic_send *s = send_at((struct nic_queue *)q,
						   q->send_head + q->pntx + (n < c ? n : c) - 1);

		return atomic_load_explicit(
			       &q->tx.desc[(s->first + s->ndesc - 1) & q->tx.mask].status,
			       memory_order_relaxed) &
		       NIC_DD;
	}
	return false;
}

/*
 * Are the two-step slots of this reap's rx buffers (tx sends) consecutive ring slots from the
 * first one's, wrapping at the slot count? Then one bulk unlink takes them. Each slot is
 * compared with what it should be (no list is built), in two straight runs around the wrap.
 */
static bool rx_consecutive(const struct nic_queue *q)
{
	const uint32_t s0 = q->rxs[q->rx_done[0]].slot, ns = q->rx_slots.nslots;
	uint32_t a = q->nrx, bad = 0;

	if (a > ns - s0)
		a = ns - s0;
	for (uint32_t k = 1; k < a; k++)
		bad |= q->rxs[q->rx_done[k]].slot ^ (s0 + k);
	for (uint32_t k = a; k < q->nrx; k++)
		bad |= q->rxs[q->rx_done[k]].slot ^ (k - a);
	return !bad;
}

static bool tx_consecutive(struct nic_queue *q)
{
	const uint32_t h = q->send_head + q->pntx, s0 = send_at(q, h)->slot;
	const uint32_t ns = q->tx_slots.nslots;
	uint32_t a = q->ntx, bad = 0;

	if (a > ns - s0)
		a = ns - s0;
	for (uint32_t k = 1; k < a; k++)
		bad |= send_at(q, h + k)->slot ^ (s0 + k);
	for (uint32_t k = a; k < q->ntx; k++)
		bad |= send_at(q, h + k)->slot ^ (k - a);
	return !bad;
}

static void unmap_done(struct wl_drv *d, struct wl_port *p, struct nic_queue *q,
		       struct dg_dma_batch *b)
{
	const struct nic_param *prm = d->run->wl->param;
	int e;

	uint64_t dma[NIC_BUDGET];
	bool bulk_rx = false, bulk_tx = false;

	/* a reap in one bulk call: the ring's consecutive slots, or the streaming addresses */
	if (q->nrx && p->two_step && rx_consecutive(q)) {
		bulk_rx = true;
		e = wl_slots_unlink_bulk(&q->rx_slots, q->rxs[q->rx_done[0]].slot, q->nrx,
					 prm->rx_buf, DG_DMA_FROM_DEVICE, b);
		if (e)
			wl_drv_fail(d, e);
	}
	for (uint32_t k = 0; k < q->nrx && p->two_step && !bulk_rx; k++) {
		e = wl_slots_unlink(&q->rx_slots, q->rxs[q->rx_done[k]].slot, prm->rx_buf,
				    DG_DMA_FROM_DEVICE, b);
		if (e)
			wl_drv_fail(d, e);
	}
	const bool sync = q->nrx && !p->two_step && dg_dma_need_sync(p->dd);

	for (uint32_t k = 0; k < q->nrx && !p->two_step; k++) {
		struct nic_rxslot *s = &q->rxs[q->rx_done[k]];

		dma[k] = s->dma;
		e = sync ? dg_dma_sync_for_cpu(p->dd, s->dma, q->rx_len[k], DG_DMA_FROM_DEVICE) : 0;
		if (!e && !p->bulk)
			e = dg_dma_unmap_single(p->dd, s->dma, prm->rx_buf, DG_DMA_FROM_DEVICE,
						DG_DMA_ATTR_SKIP_CPU_SYNC, b);
		if (e)
			wl_drv_fail(d, e);
	}
	if (q->nrx && p->bulk) {
		e = dg_dma_unmap_bulk(p->dd, dma, q->nrx, prm->rx_buf, DG_DMA_FROM_DEVICE,
				      DG_DMA_ATTR_SKIP_CPU_SYNC, b);
		if (e)
			wl_drv_fail(d, e);
	}
	if (q->ntx && prm->tx != NIC_TX_TSO && p->bulk) {
		for (uint32_t k = 0; k < q->ntx; k++)
			dma[k] = send_at(q, q->send_head + q->pntx + k)->dma;
		bulk_tx = true;
		e = dg_dma_unmap_bulk(p->dd, dma, q->ntx, prm->tx_len, DG_DMA_TO_DEVICE, 0, b);
		if (e)
			wl_drv_fail(d, e);
	} else if (q->ntx && prm->tx != NIC_TX_TSO && p->two_step && tx_consecutive(q)) {
		bulk_tx = true;
		e = wl_slots_unlink_bulk(&q->tx_slots, send_at(q, q->send_head + q->pntx)->slot,
					 q->ntx, prm->tx_len, DG_DMA_TO_DEVICE, b);
		if (e)
			wl_drv_fail(d, e);
	}
	for (uint32_t k = 0; k < q->ntx && !bulk_tx; k++) {
		struct nic_send *s = send_at(q, q->send_head + q->pntx + k);

		if (p->two_step && prm->tx == NIC_TX_TSO)
			e = wl_slots_unlink_sg(&q->tx_slots, s->slot, s->sg, s->nents,
					       DG_DMA_TO_DEVICE, b);
		else if (p->two_step)
			e = wl_slots_unlink(&q->tx_slots, s->slot, prm->tx_len, DG_DMA_TO_DEVICE,
					    b);
		else if (prm->tx == NIC_TX_TSO)
			e = dg_dma_unmap_sg(p->dd, s->sg, s->nents, DG_DMA_TO_DEVICE, 0, b);
		else
			e = dg_dma_unmap_single(p->dd, s->dma, prm->tx_len, DG_DMA_TO_DEVICE, 0, b);
		if (e)
			wl_drv_fail(d, e);
	}
}

/* Read and check every frame of a received buffer; returns the frames. */
static uint32_t rx_frames(struct wl_drv *d, struct nic_queue *q, const uint8_t *buf, uint32_t len,
			  const struct nic_param *prm)
{
	uint32_t n = prm->rx_frames > 1 ? len / prm->rx_stride : 1;
	uint32_t bad = 0;

	for (uint32_t f = 0; f < n; f++) {
		const struct wl_hdr *h = (const void *)(buf + (size_t)f * prm->rx_stride);

		bad += h->magic != WL_MAGIC || h->csum != wl_hdr_csum(h) || h->queue != q->id ||
		       h->seq != q->rx_seq || h->ethertype != 0x0800;
		q->rx_seq = h->seq + 1;
	}
	if (bad || (prm->rx_frames > 1 ? len % prm->rx_stride || !n : len != prm->rx_frame)) {
		if (!atomic_load_explicit(&d->ctr->errors, memory_order_relaxed))
			fprintf(stderr, "bench workloads: %s/%s: queue %u: bad frame\n",
				d->run->wl->name, wl_cfg_name[d->run->cfg], q->id);
		wl_ctr_add(&d->ctr->errors, 1);
	}
	return n;
}

static void tx_header(struct nic_queue *q, void *buf, uint32_t len)
{
	struct wl_hdr h = {.dst = {2, 0, 0, 0, 0, 1},
			   .src = {2, 0, 0, 0, 0, 2},
			   .ethertype = 0x0800,
			   .queue = (uint16_t)q->id,
			   .magic = WL_MAGIC,
			   .seq = q->tx_seq++,
			   .len = len};

	h.csum = wl_hdr_csum(&h);
	memcpy(buf, &h, sizeof(h));
}

/* Give back what a send holds. */
static void send_release(struct wl_port *p, const struct nic_param *prm, struct nic_send *s)
{
	if (prm->tx == NIC_TX_TSO)
		for (unsigned int i = 0; i < s->nents; i++)
			wl_stack_push(&p->stack[CLS_TX], s->sg[i].addr);
	else
		wl_stack_push(&p->stack[prm->tx == NIC_TX_GEN ? CLS_TX : CLS_RX], s->buf);
	s->buf = NULL;
	s->nents = 0;
}

/* Phase 5: what the driver does with what the previous poll reaped and unmapped (its batch
 * has just ended). Returns I/Os and adds payload bytes. */
static uint64_t work(struct wl_drv *d, struct wl_port *p, struct nic_queue *q, bool run,
		     uint64_t *bytes)
{
	const struct nic_param *prm = d->run->wl->param;
	uint64_t ios = 0;

	for (uint32_t k = 0; k < q->pnrx; k++) {
		void *buf = q->prx_buf[k];
		uint32_t f = rx_frames(d, q, buf, q->prx_len[k], prm);

		if (prm->rx_is_io) {
			ios++;
			*bytes += (uint64_t)f * prm->rx_frame;
		}
		if (prm->tx == NIC_TX_FORWARD && run) {
			struct wl_hdr *h = buf;
			uint8_t mac[6];

			memcpy(mac, h->dst, 6);
			memcpy(h->dst, h->src, 6);
			memcpy(h->src, mac, 6);
			q->fwd[q->nfwd++] = buf;
		} else {
			wl_stack_push(&p->stack[CLS_RX], buf);
		}
	}
	for (uint32_t k = 0; k < q->pntx; k++) {
		ios++;
		*bytes += prm->tx_len;
		send_release(p, prm, send_at(q, q->send_head + k));
	}
	q->send_head += q->pntx;
	q->pnrx = q->pntx = 0;
	return ios;
}

/* This poll's reaped buffers become the pending ones (their batch stays in flight). */
static void promote(struct nic_queue *q)
{
	memcpy(q->prx_len, q->rx_len, q->nrx * sizeof(q->rx_len[0]));
	memcpy(q->prx_buf, q->rx_buf, q->nrx * sizeof(q->rx_buf[0]));
	q->pnrx = q->nrx;
	q->pntx = q->ntx;
	q->nrx = q->ntx = 0;
}

/* Before the map phase: the buffers of new sends, with their headers written. */
static void prepare_tx(struct wl_port *p, struct nic_queue *q, const struct nic_param *prm)
{
	uint32_t room = q->tx.size - (q->tx.ntu - q->tx.ntc), per = send_descs(prm);
	uint32_t out = q->send_tail - q->send_head;

	q->ntx_new = 0;
	if (prm->tx == NIC_TX_FORWARD) {
		/* as many as the ring takes; the rest are dropped (recycled) */
		for (uint32_t k = 0; k < q->nfwd; k++) {
			if (room && out + q->ntx_new < q->nsends) {
				send_at(q, q->send_tail + q->ntx_new++)->buf = q->fwd[k];
				room--;
			} else {
				wl_stack_push(&p->stack[CLS_RX], q->fwd[k]);
			}
		}
		return;
	}
	while (out + q->ntx_new < prm->tx_inflight && out + q->ntx_new < q->nsends &&
	       q->ntx_new < NIC_BUDGET && room >= per && p->stack[CLS_TX].n >= per) {
		struct nic_send *s = send_at(q, q->send_tail + q->ntx_new++);

		if (prm->tx == NIC_TX_TSO) {
			for (uint32_t i = 0; i < per; i++) {
				uint32_t l = prm->tx_len - i * prm->tx_buf;

				s->sg[i] = (struct dg_dma_sg){
					.addr = wl_stack_pop(&p->stack[CLS_TX]),
					.len = l < prm->tx_buf ? l : prm->tx_buf};
			}
			s->nents = (uint16_t)per;
			tx_header(q, s->sg[0].addr, prm->tx_len);
		} else {
			s->buf = wl_stack_pop(&p->stack[CLS_TX]);
			tx_header(q, s->buf, prm->tx_len);
		}
		room -= per;
	}
}

/* map_rx() of the drivers with bulk calls: the refill's buffers in one call (two-step: the
 * next slots, one sync). All or nothing: on a failure the buffers go back to the stack. */
static void map_rx_bulk(struct wl_drv *d, struct wl_port *p, struct nic_queue *q)
{
	const struct nic_param *prm = d->run->wl->param;
	void *bufs[NIC_BUDGET];
	uint64_t dma[NIC_BUDGET];
	uint32_t n = 0, first = 0;
	int e;

	while (q->rx.ntu + n - q->rx.ntc < q->rx.size && n < NIC_BUDGET &&
	       (bufs[n] = wl_stack_pop(&p->stack[CLS_RX])))
		n++;
	q->nrx_new = 0;
	if (!n)
		return;
	if (p->two_step)
		e = wl_slots_link_bulk(&q->rx_slots, bufs, n, prm->rx_buf, DG_DMA_FROM_DEVICE, dma,
				       &first);
	else
		e = dg_dma_map_bulk(p->dd, bufs, n, prm->rx_buf, DG_DMA_FROM_DEVICE,
				    DG_DMA_ATTR_SKIP_CPU_SYNC, dma);
	if (e) {
		while (n--)
			wl_stack_push(&p->stack[CLS_RX], bufs[n]);
		wl_drv_fail(d, e);
		return;
	}
	for (uint32_t k = 0; k < n; k++) {
		struct nic_rxslot *s = &q->rxs[(q->rx.ntu + k) & q->rx.mask];

		s->buf = bufs[k];
		s->dma = dma[k];
		s->slot = first + k < q->rx_slots.nslots ? first + k :
							   first + k - q->rx_slots.nslots;
	}
	q->nrx_new = n;
}

static void map_rx(struct wl_drv *d, struct wl_port *p, struct nic_queue *q)
{
	const struct nic_param *prm = d->run->wl->param;

	if (p->two_step || p->bulk) {
		map_rx_bulk(d, p, q);
		return;
	}
	q->nrx_new = 0;
	while (q->rx.ntu + q->nrx_new - q->rx.ntc < q->rx.size && q->nrx_new < NIC_BUDGET) {
		struct nic_rxslot *s = &q->rxs[(q->rx.ntu + q->nrx_new) & q->rx.mask];
		void *buf = wl_stack_pop(&p->stack[CLS_RX]);
		int e;

		if (!buf)
			break;
		if (p->two_step)
			e = wl_slots_link(&q->rx_slots, buf, prm->rx_buf, DG_DMA_FROM_DEVICE,
					  &s->dma, &s->slot);
		else
			e = dg_dma_map_single(p->dd, buf, prm->rx_buf, DG_DMA_FROM_DEVICE,
					      DG_DMA_ATTR_SKIP_CPU_SYNC, &s->dma);
		if (e) {
			wl_stack_push(&p->stack[CLS_RX], buf);
			wl_drv_fail(d, e);
			break;
		}
		s->buf = buf;
		q->nrx_new++;
	}
}

static void map_tx(struct wl_drv *d, struct wl_port *p, struct nic_queue *q)
{
	const struct nic_param *prm = d->run->wl->param;

	if (q->ntx_new && prm->tx != NIC_TX_TSO && (p->two_step || p->bulk)) {
		/* the new sends in one bulk call; a failure drops them all */
		void *bufs[NIC_BUDGET];
		uint64_t dma[NIC_BUDGET];
		uint32_t first = 0;
		int e;

		for (uint32_t k = 0; k < q->ntx_new; k++)
			bufs[k] = send_at(q, q->send_tail + k)->buf;
		e = p->two_step ? wl_slots_link_bulk(&q->tx_slots, bufs, q->ntx_new, prm->tx_len,
						     DG_DMA_TO_DEVICE, dma, &first) :
				  dg_dma_map_bulk(p->dd, bufs, q->ntx_new, prm->tx_len,
						  DG_DMA_TO_DEVICE, 0, dma);
		if (e)
			wl_drv_fail(d, e);
		for (uint32_t k = 0; k < q->ntx_new; k++) {
			struct nic_send *s = send_at(q, q->send_tail + k);

			s->dma = e ? 0 : dma[k];
			s->slot = (uint32_t)(((uint64_t)first + k) %
					     (q->tx_slots.nslots ? q->tx_slots.nslots : 1));
			s->ndesc = e ? 0 : 1;
			if (e)
				send_release(p, prm, s);
		}
		return;
	}
	for (uint32_t k = 0; k < q->ntx_new; k++) {
		struct nic_send *s = send_at(q, q->send_tail + k);
		unsigned int nr = 1;
		int e;

		if (p->two_step && prm->tx == NIC_TX_TSO)
			e = wl_slots_link_sg(&q->tx_slots, s->sg, s->nents, DG_DMA_TO_DEVICE, &nr,
					     &s->slot);
		else if (p->two_step)
			e = wl_slots_link(&q->tx_slots, s->buf, prm->tx_len, DG_DMA_TO_DEVICE,
					  &s->dma, &s->slot);
		else if (prm->tx == NIC_TX_TSO)
			e = dg_dma_map_sg(p->dd, s->sg, s->nents, DG_DMA_TO_DEVICE, 0, &nr);
		else
			e = dg_dma_map_single(p->dd, s->buf, prm->tx_len, DG_DMA_TO_DEVICE, 0,
					      &s->dma);
		if (e) {
			wl_drv_fail(d, e);
			send_release(p, prm, s);
			nr = 0;
		}
		s->ndesc = (uint16_t)nr;
	}
}

static void post(struct nic_ring *rg, uint64_t addr, uint32_t len, uint16_t flags)
{
	struct nic_desc *dsc = &rg->desc[rg->ntu++ & rg->mask];

	dsc->addr = addr;
	dsc->len = len;
	dsc->flags = flags;
	atomic_store_explicit(&dsc->status, 0, memory_order_relaxed);
}

/* Phase 5: descriptors and doorbells, rx and tx. */
static void write_rx(struct nic_queue *q, const struct nic_param *prm)
{
	for (uint32_t k = 0; k < q->nrx_new; k++)
		post(&q->rx, q->rxs[q->rx.ntu & q->rx.mask].dma, prm->rx_buf, 0);
	if (q->nrx_new) {
		/* Release pairs with the device's acquire load of tail in rx_burst(). */
		atomic_store_explicit(&q->rx.tail, q->rx.ntu, memory_order_release);
	}
	q->nrx_new = 0;
}

static void write_tx(struct nic_queue *q, const struct nic_param *prm)
{
	uint32_t w = 0;

	for (uint32_t k = 0; k < q->ntx_new; k++) {
		struct nic_send *s = send_at(q, q->send_tail + k);

		if (!s->ndesc)
			continue; /* its map failed: dropped */
		if (w != k) {	  /* keep the outstanding sends contiguous (failure path only) */
			*send_at(q, q->send_tail + w) = *s;
			s = send_at(q, q->send_tail + w);
		}
		w++;
		s->first = q->tx.ntu;
		for (uint16_t i = 0; i < s->ndesc; i++) {
			uint64_t a = prm->tx == NIC_TX_TSO ? s->sg[i].dma_addr : s->dma;
			uint32_t l = prm->tx == NIC_TX_TSO ? (uint32_t)s->sg[i].dma_len :
							     prm->tx_len;

			post(&q->tx, a, l, i + 1 == s->ndesc ? NIC_EOP : 0);
		}
	}
	q->send_tail += w;
	if (w) {
		/* Release pairs with the device's acquire load of tail in tx_burst(). */
		atomic_store_explicit(&q->tx.tail, q->tx.ntu, memory_order_release);
	}
}

bool nic_drv_poll(struct wl_drv *d, struct wl_port *p)
{
	struct nic_port *np = p->priv;
	const struct nic_param *prm = np->prm;
	bool run = d->posting, reaped = false, refill = false, any, go = !run;
	uint64_t ios = 0, bytes = 0;
	struct dg_dma_batch *b = wl_batch_cur(&np->batches);
	int e;

	wl_drv_poll_start(d);
	for (unsigned int i = 0; i < np->nq && run; i++)
		go |= ready(prm, np->q[i]);
	for (unsigned int i = 0; i < np->nq; i++) {
		reap(prm, np->q[i], go);
		reaped |= np->q[i]->nrx || np->q[i]->ntx;
	}
	any = reaped || np->batches.pend;
	if (reaped) {
		/* unmap, and start the invalidation without waiting for it */
		wl_drv_dma_begin(d);
		dg_dma_batch_begin(p->dd, b);
		for (unsigned int i = 0; i < np->nq; i++)
			unmap_done(d, p, np->q[i], b);
		e = dg_dma_batch_submit(b);
		wl_drv_dma_end(d);
		if (e)
			wl_drv_fail(d, e);
	}
	if (run && prm->rx_ring) {
		/* refill rx from the spare buffers meanwhile: the device is fed before the wait */
		for (unsigned int i = 0; i < np->nq; i++)
			refill |= np->q[i]->rx.ntu - np->q[i]->rx.ntc < np->q[i]->rx.size;
		if (refill && p->stack[CLS_RX].n) {
			wl_drv_dma_begin(d);
			for (unsigned int i = 0; i < np->nq; i++)
				map_rx(d, p, np->q[i]);
			wl_drv_dma_end(d);
			for (unsigned int i = 0; i < np->nq; i++) {
				any |= np->q[i]->nrx_new;
				write_rx(np->q[i], prm);
			}
		}
	}
	/* the previous poll's batch: only after its end may the driver look at what it unmapped;
	   a poll that reaped nothing does not wait for it (it polls again) */
	if (wl_batch_end_pending(d, &np->batches, reaped)) {
		for (unsigned int i = 0; i < np->nq; i++)
			ios += work(d, p, np->q[i], run, &bytes);
	}
	if (reaped) { /* this poll's batch stays in flight until the next poll */
		for (unsigned int i = 0; i < np->nq; i++)
			promote(np->q[i]);
		wl_batch_keep(&np->batches);
	}
	if (run && prm->tx != NIC_TX_NONE) {
		bool maps = false;

		for (unsigned int i = 0; i < np->nq; i++) {
			prepare_tx(p, np->q[i], prm);
			maps |= np->q[i]->ntx_new;
		}
		if (maps) {
			wl_drv_dma_begin(d);
			for (unsigned int i = 0; i < np->nq; i++)
				map_tx(d, p, np->q[i]);
			wl_drv_dma_end(d);
			for (unsigned int i = 0; i < np->nq; i++) {
				any |= np->q[i]->ntx_new;
				write_tx(np->q[i], prm);
			}
		}
	}
	wl_drv_poll_end(d, ios, bytes);
	return any;
}

/* ---- device ---------------------------------------------------------------------------------------- */

/* Translate the ring (counted as translation time); NULL never happens: rings stay mapped. */
static struct nic_desc *dev_ring(struct wl_dev *d, struct wl_port *p, struct nic_ring *rg)
{
	struct nic_desc *ring;

	wl_dev_xlat_begin(d);
	ring = wl_dev_ring(d, p, rg->dma, (size_t)rg->size * sizeof(struct nic_desc), &rg->dev_x);
	wl_dev_xlat_end(d);
	return ring;
}

/* Between two DMAs: acknowledge a pending invalidation; *ring is translated again if one was
 * (the thread's earlier translations are released). False if that failed (never: rings stay
 * mapped). */
static bool dev_ack_between(struct wl_dev *d, struct wl_port *p, struct nic_ring *rg,
			    struct nic_desc **ring)
{
	if (!wl_dev_ack_pending(d))
		return true;
	*ring = dev_ring(d, p, rg);
	return *ring != NULL;
}

/*
 * The write-back of a receive burst's n descriptors together (a NIC's descriptor write-back
 * threshold: the driver's polls of DD take each ring line from the device once), with the
 * bytes written to each buffer; the ring's device head moves past them.
 */
static void rx_write_back(struct nic_desc *ring, struct nic_ring *rg, const uint32_t *written,
			  uint32_t n, uint64_t *units)
{
	for (uint32_t k = 0; k < n; k++) {
		struct nic_desc *dsc = &ring[(rg->dev_head + k) & rg->mask];

		dsc->len = written[k];
		/* Release pairs with the driver's acquire load of status in reap(). */
		atomic_store_explicit(&dsc->status, NIC_DD, memory_order_release);
	}
	rg->dev_head += n;
	*units += n;
}

/*
 * The receive ring with one frame per buffer (rx_frames == 1; aggregation buffers go to
 * rx_burst_agg()): at most NIC_BURST descriptors, NIC_ACK_EVERY at a time translated and then
 * written (header and payload), a pending invalidation acknowledged between two groups; a
 * frame whose translation faults (or whose buffer is too short) is written back with length
 * 0; the burst's descriptors are written back together at the end.
 */
static uint64_t rx_burst(struct wl_dev *d, struct wl_port *p, struct nic_port *np,
			 struct nic_queue *q, uint64_t *units)
{
	const struct nic_param *prm = np->prm;
	struct nic_ring *rg = &q->rx;
	/* Acquire pairs with the driver's release store of tail in write_rx(). */
	uint32_t tail = atomic_load_explicit(&rg->tail, memory_order_acquire);
	uint32_t n = tail - rg->dev_head;
	uint32_t written[NIC_BURST];
	unsigned int fnr[NIC_ACK_EVERY];
	uint64_t bytes = 0;
	struct nic_desc *ring;

	if (!n || !(ring = dev_ring(d, p, rg)))
		return 0;
	n = nic_rx_extent(n, prm->rx_buf);
	nic_prefetch_burst(p, ring, rg->mask, rg->dev_head, n, false);
	for (uint32_t k0 = 0; k0 < n; k0 += NIC_ACK_EVERY) {
		uint32_t m = n - k0 < NIC_ACK_EVERY ? n - k0 : NIC_ACK_EVERY;

		wl_dev_xlat_begin(d);
		for (uint32_t f = 0; f < m; f++) {
			const struct nic_desc *dsc = &ring[(rg->dev_head + k0 + f) & rg->mask];

			fnr[f] = dsc->len >= prm->rx_frame ?
					 wl_dev_translate(d, p, dsc->addr, prm->rx_frame,
							  DG_ACCESS_WRITE, &d->sg[f * NIC_FRAME_SG],
							  NIC_FRAME_SG) :
					 0;
		}
		wl_dev_xlat_end(d);
		for (uint32_t f = 0; f < m; f++) {
			const struct dg_sg *sg = &d->sg[f * NIC_FRAME_SG];
			struct wl_hdr h = {.dst = {2, 0, 0, 0, 0, 2},
					   .src = {2, 0, 0, 0, 0, 1},
					   .ethertype = 0x0800,
					   .queue = (uint16_t)q->id,
					   .magic = WL_MAGIC,
					   .seq = rg->dev_seq,
					   .len = prm->rx_frame};

			written[k0 + f] = 0;
			if (!fnr[f]) /* faulted: nothing written */
				continue;
			rg->dev_seq++;
			h.csum = wl_hdr_csum(&h);
			wl_sg_copy_to(sg, fnr[f], 0, &h, sizeof(h));
			wl_sg_copy_to(sg, fnr[f], sizeof(h), np->tmpl + sizeof(h),
				      prm->rx_frame - sizeof(h));
			written[k0 + f] = prm->rx_frame;
			bytes += prm->rx_frame;
		}
		if (k0 + m < n && !dev_ack_between(d, p, rg, &ring)) {
			/* never while the ring stays mapped: untranslatable, no descriptor can
			   be written back (the buffers are written again next burst) */
			wl_dev_ring_lost(d, n);
			return bytes;
		}
	}
	rx_write_back(ring, rg, written, n, units);
	return bytes;
}

/*
 * Receive aggregation (prm->rx_frames > 1) into one buffer: the device writes the frames back
 * to back (prm->rx_stride apart, each its own DMA as in rx_burst()), but the buffer's range is
 * translated once - frame by frame, the 42 frames of a 64 KiB buffer were 42 translations, ~10
 * of them across a page boundary - and each frame is copied into the resulting segments at its
 * offset. Every NIC_ACK_EVERY frames (*since_ack counts them across the burst) @ack is called
 * between two frames of the buffer; when it acknowledged an invalidation, every translation
 * the thread held is released and may be stale (the acknowledged command may have removed it),
 * so what is left of the buffer is translated again before its next frame: no frame is ever
 * written through a translation made before an acknowledged invalidation. A translation that
 * fails (counted as an error) ends the buffer there, as a faulting frame does in rx_burst().
 * Returns the bytes the descriptor reports (the last written frame's end, rounded up to the
 * stride; 0: none); *seq and *frames advance by the frames written.
 */
uint32_t nic_agg_fill(struct wl_dev *d, struct wl_port *p, const struct nic_param *prm,
		      const struct nic_agg_buf *b, uint32_t *since_ack, uint64_t *seq,
		      uint32_t *frames)
{
	uint32_t nfr = b->len < prm->rx_frame ? 0 : (b->len - prm->rx_frame) / prm->rx_stride + 1;
	uint64_t span, base = 0; /* the buffer offset d->sg starts at */
	uint32_t written = 0;
	unsigned int nr;

	nfr = nfr < prm->rx_frames ? nfr : prm->rx_frames;
	if (!nfr)
		return 0;
	span = (uint64_t)(nfr - 1) * prm->rx_stride + prm->rx_frame;
	wl_dev_xlat_begin(d);
	nr = wl_dev_translate(d, p, b->addr, span, DG_ACCESS_WRITE, d->sg, WL_DEV_SG);
	wl_dev_xlat_end(d);
	for (uint32_t j = 0; j < nfr && nr; j++) {
		uint64_t off = (uint64_t)j * prm->rx_stride - base;
		struct wl_hdr h = {.dst = {2, 0, 0, 0, 0, 2},
				   .src = {2, 0, 0, 0, 0, 1},
				   .ethertype = 0x0800,
				   .queue = b->queue,
				   .magic = WL_MAGIC,
				   .seq = (*seq)++,
				   .len = prm->rx_frame};

		h.csum = wl_hdr_csum(&h);
		wl_sg_copy_to(d->sg, nr, off, &h, sizeof(h));
		wl_sg_copy_to(d->sg, nr, off + sizeof(h), b->tmpl + sizeof(h),
			      prm->rx_frame - sizeof(h));
		written = (j + 1) * prm->rx_stride;
		(*frames)++;
		if (++*since_ack < NIC_ACK_EVERY || j + 1 == nfr)
			continue;
		*since_ack = 0;
		if (!b->ack(d, b->ctx))
			continue; /* nothing acknowledged: d->sg is still held */
		base = (uint64_t)(j + 1) * prm->rx_stride;
		wl_dev_xlat_begin(d);
		nr = wl_dev_translate(d, p, b->addr + base, span - base, DG_ACCESS_WRITE, d->sg,
				      WL_DEV_SG);
		wl_dev_xlat_end(d);
	}
	return written;
}

/* rx_burst_agg()'s acknowledgement point: dev_ack_between() on the rx ring. */
struct agg_ring {
	struct wl_port *p;
	struct nic_ring *rg;
	struct nic_desc *ring; /* NULL once translating it again failed (never: rings stay mapped) */
};

static bool agg_ack(struct wl_dev *d, void *ctx)
{
	struct agg_ring *a = ctx;

	if (!wl_dev_ack_pending(d))
		return false;
	a->ring = dev_ring(d, a->p, a->rg);
	return true;
}

/*
 * The receive ring with aggregation buffers (rx_frames > 1): whole buffers (at most
 * WL_BURST_BYTES of them, so one 64 KiB buffer), each filled by nic_agg_fill(); a pending
 * invalidation is acknowledged every NIC_ACK_EVERY frames, between two frames of a buffer or
 * before the next buffer; the descriptors are written back together at the end
 * (rx_write_back()).
 */
static uint64_t rx_burst_agg(struct wl_dev *d, struct wl_port *p, struct nic_port *np,
			     struct nic_queue *q, uint64_t *units)
{
	const struct nic_param *prm = np->prm;
	struct nic_ring *rg = &q->rx;
	/* Acquire pairs with the driver's release store of tail in write_rx(). */
	uint32_t tail = atomic_load_explicit(&rg->tail, memory_order_acquire);
	uint32_t n = tail - rg->dev_head, since_ack = 0, frames = 0;
	uint32_t written[NIC_BURST];
	struct agg_ring a = {.p = p, .rg = rg};
	struct nic_agg_buf b = {
		.queue = (uint16_t)q->id, .tmpl = np->tmpl, .ack = agg_ack, .ctx = &a};

	if (!n || !(a.ring = dev_ring(d, p, rg)))
		return 0;
	n = nic_rx_extent(n, prm->rx_buf);
	nic_prefetch_burst(p, a.ring, rg->mask, rg->dev_head, n, true);
	for (uint32_t k = 0; k < n; k++) {
		const struct nic_desc *dsc = &a.ring[(rg->dev_head + k) & rg->mask];

		b.addr = dsc->addr;
		b.len = dsc->len;
		written[k] = nic_agg_fill(d, p, prm, &b, &since_ack, &rg->dev_seq, &frames);
		if (a.ring && since_ack >= NIC_ACK_EVERY && k + 1 < n) { /* between two buffers */
			since_ack = 0;
			agg_ack(d, &a);
		}
		if (!a.ring) { /* never while the ring stays mapped (see rx_burst()) */
			wl_dev_ring_lost(d, n);
			return (uint64_t)frames * prm->rx_frame;
		}
	}
	rx_write_back(a.ring, rg, written, n, units);
	return (uint64_t)frames * prm->rx_frame;
}

/* tx_burst()'s check of a whole send assembled in the wire buffer (@off bytes). A TSO send's
 * payload after the header is what its pages held since set-up (WL_FILL, wl_env.c): its last
 * byte says the device read a page that was written, not the zero page. */
static void tx_check(struct wl_dev *d, const struct nic_param *prm, const struct nic_queue *q,
		     size_t off)
{
	const struct wl_hdr *h = (const void *)d->scratch;

	if (h->magic != WL_MAGIC || h->csum != wl_hdr_csum(h) || h->queue != q->id ||
	    off != prm->tx_len ||
	    (prm->tx == NIC_TX_TSO && off > sizeof(*h) && d->scratch[off - 1] != WL_FILL)) {
		if (!atomic_load_explicit(&d->ctr->errors, memory_order_relaxed))
			fprintf(stderr, "bench workloads: %s/%s: queue %u: bad send\n",
				d->run->wl->name, wl_cfg_name[d->run->cfg], q->id);
		wl_ctr_add(&d->ctr->errors, 1);
	}
}

/*
 * The sends of the tx ring, whole ones (the driver publishes whole chains), about NIC_BURST
 * descriptors and WL_BURST_BYTES of payload: NIC_ACK_EVERY descriptors at a time (across
 * sends, as rx_burst() takes its buffers) translated and then copied to the wire scratch
 * buffer, a pending invalidation acknowledged between two groups; each send's header
 * checked; the sends' DD written back together at the end. Translating a group before its
 * copies lets the table reads of its descriptors overlap (a TSO send's 16 pages have their
 * entries in two cache lines the driver has just written: translated one by one between
 * 4 KiB copies, the second line was only asked for after eight copies).
 */
static uint64_t tx_burst(struct wl_dev *d, struct wl_port *p, struct nic_port *np,
			 struct nic_queue *q, uint64_t *units)
{
	const struct nic_param *prm = np->prm;
	struct nic_ring *rg = &q->tx;
	/* Acquire pairs with the driver's release store of tail in write_tx(). */
	uint32_t tail = atomic_load_explicit(&rg->tail, memory_order_acquire);
	uint32_t avail = tail - rg->dev_head, n;
	unsigned int nr[NIC_ACK_EVERY];
	uint64_t bytes = 0, sent = 0; /* sent: the payload of the sends done so far */
	size_t off = 0;
	struct nic_desc *ring;

	static_assert(NIC_ACK_EVERY * NIC_SEGS <= WL_DEV_SG, "a group's sg lists fit in d->sg");
	if (!avail || !(ring = dev_ring(d, p, rg)))
		return 0;
	/* The whole sends of the burst: descriptors [0, n), bytes of payload. */
	n = nic_tx_extent(ring, rg->mask, rg->dev_head, avail, &bytes);
	nic_prefetch_burst(p, ring, rg->mask, rg->dev_head, n, true);
	for (uint32_t k0 = 0; k0 < n; k0 += NIC_ACK_EVERY) {
		uint32_t m = n - k0 < NIC_ACK_EVERY ? n - k0 : NIC_ACK_EVERY;

		wl_dev_xlat_begin(d);
		for (uint32_t f = 0; f < m; f++) {
			const struct nic_desc *dsc = &ring[(rg->dev_head + k0 + f) & rg->mask];

			nr[f] = wl_dev_translate(d, p, dsc->addr, dsc->len, DG_ACCESS_READ,
						 &d->sg[f * NIC_SEGS], NIC_SEGS);
		}
		wl_dev_xlat_end(d);
		for (uint32_t f = 0; f < m; f++) {
			const struct nic_desc *dsc = &ring[(rg->dev_head + k0 + f) & rg->mask];

			if (nr[f] && off + dsc->len <= 65536)
				wl_sg_copy_from(&d->sg[f * NIC_SEGS], nr[f], 0, d->scratch + off,
						dsc->len);
			off += dsc->len;
			if (dsc->flags & NIC_EOP) {
				tx_check(d, prm, q, off);
				(*units)++;
				sent += off;
				off = 0;
			}
		}
		if (k0 + m < n && !dev_ack_between(d, p, rg, &ring)) {
			/* never while the ring stays mapped (see rx_burst()) */
			wl_dev_ring_lost(d, n);
			return sent;
		}
	}
	/* write-back of the burst's sends together, as for rx */
	for (uint32_t k = 0; k < n; k++) {
		struct nic_desc *dsc = &ring[(rg->dev_head + k) & rg->mask];

		/* Release pairs with the driver's acquire load of status in reap(). */
		if (dsc->flags & NIC_EOP)
			atomic_store_explicit(&dsc->status, NIC_DD, memory_order_release);
	}
	rg->dev_head += n;
	return bytes;
}

bool nic_dev_poll(struct wl_dev *d, struct wl_port *p)
{
	struct nic_port *np = p->priv;
	uint64_t units = 0, bytes = 0;

	wl_dev_burst_start(d);
	for (unsigned int i = 0; i < np->nq; i++) {
		struct nic_queue *q = np->q[i];

		uint64_t before = units;

		/* each ring's burst ends at a quiescent point of every device of the thread */
		if (np->prm->rx_ring && np->prm->rx_frames > 1)
			bytes += rx_burst_agg(d, p, np, q, &units);
		else if (np->prm->rx_ring)
			bytes += rx_burst(d, p, np, q, &units);
		if (units != before)
			wl_dev_quiesce(d);
		before = units;
		if (np->prm->tx != NIC_TX_NONE)
			bytes += tx_burst(d, p, np, q, &units);
		if (units != before)
			wl_dev_quiesce(d);
	}
	wl_dev_burst_end(d, units, bytes);
	return units != 0;
}

/* A best-effort snapshot for the stuck-run report: it reads ring indices the driver and device
 * threads may still be writing (they are stuck, not stopped), so ThreadSanitizer does not
 * instrument it - a stall must be reported as a stall, not as a data race in its report. */
__attribute__((no_sanitize("thread"))) void nic_dump(const struct wl_port *p, FILE *out)
{
	const struct nic_port *np = p->priv;

	for (unsigned int i = 0; np && i < np->nq; i++) {
		const struct nic_queue *q = np->q[i];
		const struct nic_ring *rx = &q->rx, *tx = &q->tx;

		fprintf(out,
			"  port %u queue %u: rx ntu %u ntc %u tail %u dev_head %u status[ntc] %u; tx "
			"ntu %u ntc %u tail %u dev_head %u sends %u..%u",
			p->idx, q->id, rx->ntu, rx->ntc, atomic_load(&rx->tail), rx->dev_head,
			rx->desc ? atomic_load(&rx->desc[rx->ntc & rx->mask].status) : 0, tx->ntu,
			tx->ntc, atomic_load(&tx->tail), tx->dev_head, q->send_head, q->send_tail);
		if (q->send_head != q->send_tail) {
			const struct nic_send *s = &q->sends[q->send_head & (q->nsends - 1)];

			fprintf(out, " (first %u ndesc %u, EOP status %u)", s->first, s->ndesc,
				atomic_load(
					&tx->desc[(s->first + s->ndesc - 1) & tx->mask].status));
		}
		fputc('\n', out);
	}
}
