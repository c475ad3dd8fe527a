/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_tcp.c - tcp-x1, tcp-x4, tcp-x8: TCP-like streams (the ARM SMMUv3 50G NIC
 * case, TCP RX x8 at 36 Gbit/s without the IOMMU and 12.6 with it). Each stream is a queue
 * pair:
 *  - transmit: 64 KiB TSO sends, each an sg list of 16 pages taken from a scrambled page pool
 *    (not contiguous in host memory), mapped with dg_dma_map_sg; the driver writes the header,
 *    the device reads the whole send (under a translating policy the list is one contiguous
 *    IOVA range and one descriptor; under identity 16 descriptors);
 *  - receive: 64 KiB buffers into which the device writes 1500-byte frames back to back
 *    (1536-byte stride, 42 frames: hardware receive aggregation into a multi-packet buffer,
 *    whose range the device translates once, nic_agg_fill() in wl_nic.c);
 *    the driver maps each buffer once, and after its completion reads and checks every
 *    frame's header (sequence numbers in order) before handing the 64 KiB up.
 * One I/O is a 64 KiB send or a 64 KiB receive buffer; throughput counts both directions.
 * The driver reaps once a ring has 4 completions done (or all it holds: coalesce, wl_nic.c):
 * its poll is far shorter than a 64 KiB I/O, and reaping each one alone cost strict an
 * invalidation wait and a device acknowledgement per I/O.
 */
#include "wl_nic.h"

#define TCP_PARAM(n)                                                                             \
	{                                                                                        \
		.queues = (n), .rx_ring = 8, .rx_buf = 65536, .rx_frame = 1500, .rx_frames = 42, \
		.rx_stride = 1536, .rx_is_io = true, .tx = NIC_TX_TSO, .tx_ring = 64,            \
		.tx_len = 65536, .tx_buf = 4096, .tx_inflight = 4, .coalesce = 4                 \
	}

static const struct nic_param tcp_x1 = TCP_PARAM(1);
static const struct nic_param tcp_x4 = TCP_PARAM(4);
static const struct nic_param tcp_x8 = TCP_PARAM(8);

#define TCP_WORKLOAD(id, name_, summary_, prm, n) \
	const struct wl_workload id = {           \
		.name = name_,                    \
		.summary = summary_,              \
		.unit = "Gbit/s",                 \
		.io = "64 KiB",                   \
		.unit_bits = true,                \
		.unit_div = 1,                    \
		.max_threads = (n),               \
		.param = &(prm),                  \
		NIC_WORKLOAD_OPS,                 \
	}

TCP_WORKLOAD(wl_tcp_x1, "tcp-x1", "1 stream: 64 KiB TSO sends (sg) + rx aggregation", tcp_x1, 1);
TCP_WORKLOAD(wl_tcp_x4, "tcp-x4", "4 streams: 64 KiB TSO sends (sg) + rx aggregation", tcp_x4, 4);
TCP_WORKLOAD(wl_tcp_x8, "tcp-x8", "8 streams: 64 KiB TSO sends (sg) + rx aggregation", tcp_x8, 8);
