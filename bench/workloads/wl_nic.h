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

#define NIC_WORKLOAD_OPS                                                                \
	.classes = nic_classes, .port_init = nic_port_init, .port_fini = nic_port_fini, \
	.drv_poll = nic_drv_poll, .drv_idle = nic_drv_idle, .dev_poll = nic_dev_poll,   \
	.dump = nic_dump

#endif /* DG_BENCH_WL_NIC_H */
