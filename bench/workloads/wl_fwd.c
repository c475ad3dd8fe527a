/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_fwd.c - fwd64: receive 64-byte packets into 2 KiB buffers and send each
 * one back out from the same buffer (MAC addresses swapped), both directions mapped: per
 * packet an rx map/sync/unmap (from-device) and a tx map/unmap (to-device, 64 bytes). One
 * I/O is one forwarded packet (a completed send).
 */
#include "wl_nic.h"

static const struct nic_param fwd64 = {.rx_ring = 512,
				       .rx_buf = 2048,
				       .rx_frame = 64,
				       .rx_frames = 1,
				       .tx = NIC_TX_FORWARD,
				       .tx_ring = 512,
				       .tx_len = 64};

const struct wl_workload wl_fwd64 = {
	.name = "fwd64",
	.summary = "rx 64 B packets and forward them (rx + tx mapped)",
	.unit = "Mpps",
	.io = "packet",
	.unit_div = 1e6,
	.param = &fwd64,
	NIC_WORKLOAD_OPS,
};
