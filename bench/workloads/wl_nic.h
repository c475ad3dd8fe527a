/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_nic.h - the emulated NIC shared by xdp64, fwd64, bond4 and tcp: queue
 * pairs of descriptor rings in coherent memory, the driver's poll and the device's bursts
 * (wl_nic.c). A workload is a struct nic_param.
 */
#ifndef DG_BENCH_WL_NIC_H
#define DG_BENCH_WL_NIC_H

#include "wl.h"

enum nic_tx {
	NIC_TX_NONE,	/* receive only (xdp) */
	NIC_TX_FORWARD, /* every received packet goes back out from the same buffer (fwd) */
	NIC_TX_GEN,	/* the driver sends frames of its own from a tx buffer class (bond) */
	NIC_TX_TSO,	/* the driver sends tx_len bytes as an sg list of tx_buf pages (tcp) */
};

struct nic_param {
	uint32_t queues;    /* queue pairs in all, spread over the ports; 0 = one per port */
	uint32_t rx_ring;   /* rx descriptors per queue (power of two) */
	uint32_t rx_buf;    /* bytes of an rx buffer (mapped whole) */
	uint32_t rx_frame;  /* bytes the device writes per frame */
	uint32_t rx_frames; /* frames the device aggregates into one buffer (1 = one each) */
	uint32_t rx_stride; /* bytes between aggregated frames */
	bool rx_is_io;	    /* a received buffer counts as an I/O (fwd counts sends only) */
	enum nic_tx tx;
	uint32_t tx_ring;     /* tx descriptors per queue (power of two) */
	uint32_t tx_len;      /* bytes per send */
	uint32_t tx_buf;      /* GEN: tx buffer size; TSO: page size of the segments */
	uint32_t tx_inflight; /* GEN/TSO: sends outstanding per queue at most */
	uint32_t coalesce;    /* completions a ring holds before a poll reaps (0: any) */
};

/* Exposed for the workload tables (wl_xdp.c, ...): each fills one of these. */
void nic_classes(const struct wl_run *r, unsigned int port, struct wl_class *cls,
		 unsigned int *ncls);
int nic_port_init(struct wl_port *p);
void nic_port_fini(struct wl_port *p);
bool nic_drv_poll(struct wl_drv *d, struct wl_port *p);
bool nic_drv_idle(const struct wl_port *p);
bool nic_dev_poll(struct wl_dev *d, struct wl_port *p);
void nic_dump(const struct wl_port *p, FILE *out);

/* Queue pairs of port @port out of @nports for a workload with @queues in all (0: one). */
unsigned int nic_port_queues(uint32_t queues, unsigned int port, unsigned int nports);

/*
 * One aggregation buffer for nic_agg_fill() (wl_nic.c: the device's receive aggregation, also
 * driven by tests): its DMA address and bytes, the queue its frame headers name, the frame
 * template, and the acknowledgement point called between two frames every NIC_ACK_EVERY
 * frames: true when it acknowledged an invalidation (dg_dev_quiesce_if_pending() returned true
 * for the device: every translation the thread held is released).
 */
struct nic_agg_buf {
	uint64_t addr;
	uint32_t len;
	uint16_t queue;
	const uint8_t *tmpl;
	bool (*ack)(struct wl_dev *d, void *ctx);
	void *ctx;
};

uint32_t nic_agg_fill(struct wl_dev *d, struct wl_port *p, const struct nic_param *prm,
		      const struct nic_agg_buf *b, uint32_t *since_ack, uint64_t *seq,
		      uint32_t *frames);

/*
 * ---- A device burst's extent and early start (wl_nic.c; inline so that
 * tests/unit/bench/prefetch_test.c tests them and records their prefetches) ----
 *
 * A burst of a ring takes the 16-byte descriptors [from, from + n) (free running indices,
 * mask = ring size - 1, wrapping at the ring's end).
 */
#define NIC_BURST 32 /* descriptors per ring and device burst */
#define NIC_EOP	  1  /* desc.flags: last descriptor of a send */
#define NIC_SEGS  32 /* TSO: segments of a send at most */

struct nic_desc {
	uint64_t addr;		 /* DMA address (driver) */
	uint32_t len;		 /* buffer/segment bytes (driver); rx: bytes written (device) */
	uint16_t flags;		 /* NIC_EOP (driver) */
	_Atomic uint16_t status; /* NIC_DD: release by the device, acquire by the driver */
};
_Static_assert(sizeof(struct nic_desc) == 16, "descriptors are 16 bytes");

/* An rx burst from @avail published descriptors with buffers of @rx_buf bytes. */
static inline uint32_t nic_rx_extent(uint32_t avail, uint32_t rx_buf)
{
	uint32_t n = avail < NIC_BURST ? avail : NIC_BURST;

	if ((uint64_t)n * rx_buf > WL_BURST_BYTES)
		n = WL_BURST_BYTES / rx_buf ? WL_BURST_BYTES / rx_buf : 1;
	return n;
}

/*
 * A tx burst from @head with @avail published descriptors: whole sends (the driver publishes
 * whole chains; one without its EOP ends the burst before it), at most NIC_BURST descriptors
 * but a send started below it whole, and about WL_BURST_BYTES (one send more); returns the
 * descriptors, *@bytes their payload. Reads the len and flags of descriptors the device
 * owns (below the tail it loaded).
 */
static inline uint32_t nic_tx_extent(const struct nic_desc *ring, uint32_t mask, uint32_t head,
				     uint32_t avail, uint64_t *bytes)
{
	uint32_t n = 0, k = 0; /* whole sends [0, n); the next one's descriptors [n, k) */
	uint64_t b = 0, sb = 0;

	/* one pass, ~10 instructions a descriptor (the nested loop it replaces cost ~25) */
	while (k < avail) {
		const struct nic_desc *d = &ring[(head + k++) & mask];

		sb += d->len;
		if (d->flags & NIC_EOP) {
			n = k;
			b += sb;
			sb = 0;
			if (n >= NIC_BURST || b >= WL_BURST_BYTES)
				break;
		} else if (k - n >= NIC_SEGS) {
			break; /* not a whole send (the driver never publishes one) */
		}
	}
	*bytes = b;
	return n;
}

/*
 * At a burst's start, once its descriptors are known and before its first translation
 * (rx_burst(), rx_burst_agg(), tx_burst()): start the translations of the buffers of
 * [from, from + n) (wl_dev_prefetch(): each page-table line once, overlapping;
 * dmaguard/dev.h): @whole: every line of each descriptor's [addr, addr + len) (sends,
 * aggregation buffers), else the line of its start (a frame at the buffer's start). Two
 * straight runs around the ring's end: ~8 instructions a descriptor. Reads addr (and len) of
 * descriptors the device owns; pass-through and IOTLB levels do the same reads and their
 * prefetch does nothing.
 */
static inline void nic_prefetch_burst(const struct wl_port *p, const struct nic_desc *ring,
				      uint32_t mask, uint32_t from, uint32_t n, bool whole)
{
	uint32_t i = from & mask, size = mask + 1, a = size - i < n ? size - i : n;
	uint64_t last = UINT64_MAX;

	for (unsigned int run = 0; run < 2; run++) {
		const struct nic_desc *dsc = run ? ring : ring + i, *end = dsc + (run ? n - a : a);

		for (; dsc < end; dsc++) {
			if (whole)
				wl_dev_prefetch(p, dsc->addr, dsc->len, &last);
			else
				wl_dev_prefetch_line(p, dsc->addr, &last);
		}
	}
}

#define NIC_WORKLOAD_OPS                                                                \
	.classes = nic_classes, .port_init = nic_port_init, .port_fini = nic_port_fini, \
	.drv_poll = nic_drv_poll, .drv_idle = nic_drv_idle, .dev_poll = nic_dev_poll,   \
	.dump = nic_dump

#endif /* DG_BENCH_WL_NIC_H */
