/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_xdp.c - xdp64: a NIC receive ring of 64-byte packets; the driver maps a
 * buffer per descriptor, and per packet syncs and unmaps it, runs an XDP-style program that
 * reads and checks the header, drops the packet and recycles the buffer into the ring (the
 * seed: Linux XDP at 20 Mpps without the IOMMU, 6 Mpps with it).
 *
 * Variants by rx buffer size, which decides what else shares the buffer's page:
 *   xdp64      64-byte buffers, 64 to a page: a page-granular mapping exposes 4032 bytes of
 *              other buffers
 *   xdp64-2k   2 KiB half-page buffers (the common NIC layout): 2048 bytes exposed
 *   xdp64-4k   a page per buffer: nothing else exposed
 */
#include "wl_nic.h"

static const struct nic_param xdp64 = {
	.rx_ring = 512, .rx_buf = 64, .rx_frame = 64, .rx_frames = 1, .rx_is_io = true};
static const struct nic_param xdp64_2k = {
	.rx_ring = 512, .rx_buf = 2048, .rx_frame = 64, .rx_frames = 1, .rx_is_io = true};
static const struct nic_param xdp64_4k = {
	.rx_ring = 512, .rx_buf = 4096, .rx_frame = 64, .rx_frames = 1, .rx_is_io = true};

const struct wl_workload wl_xdp64 = {
	.name = "xdp64",
	.summary = "rx 64 B packets into 64 B buffers, XDP drop",
	.unit = "Mpps",
	.io = "packet",
	.unit_div = 1e6,
	.param = &xdp64,
	NIC_WORKLOAD_OPS,
};

const struct wl_workload wl_xdp64_2k = {
	.name = "xdp64-2k",
	.summary = "rx 64 B packets into 2 KiB half-page buffers, XDP drop",
	.unit = "Mpps",
	.io = "packet",
	.unit_div = 1e6,
	.param = &xdp64_2k,
	NIC_WORKLOAD_OPS,
};

const struct wl_workload wl_xdp64_4k = {
	.name = "xdp64-4k",
	.summary = "rx 64 B packets into full-page buffers, XDP drop",
	.unit = "Mpps",
	.io = "packet",
	.unit_div = 1e6,
	.param = &xdp64_4k,
	NIC_WORKLOAD_OPS,
};
