/* SPDX-License-Identifier: MIT */
/*
 * bench/workloads/wl_bond.c - bond4: four NIC ports aggregated (the Intel 82599 x4 bonding
 * case, 37.6 Gbit/s without the IOMMU and 28.7 with it, where dma_map_single was ~5x slower
 * through Linux's IOVA allocator). Each port receives 1500-byte frames into 2 KiB buffers and
 * sends 1500-byte frames of its own (iperf in both directions); four devices, each with its
 * own IOTLB, share one IOMMU and its invalidation queue. Throughput counts both directions.
 */
#include "wl_nic.h"

static const struct nic_param bond4 = {.rx_ring = 256,
				       .rx_buf = 2048,
				       .rx_frame = 1500,
				       .rx_frames = 1,
				       .rx_is_io = true,
				       .tx = NIC_TX_GEN,
				       .tx_ring = 256,
				       .tx_len = 1500,
				       .tx_buf = 2048,
				       .tx_inflight = 256};

const struct wl_workload wl_bond4 = {
	.name = "bond4",
	.summary = "4 bonded ports, rx + tx of 1500 B frames",
	.unit = "Gbit/s",
	.io = "frame",
	.unit_bits = true,
	.unit_div = 1,
	.fixed_ports = 4,
	.max_threads = 4,
	.param = &bond4,
	NIC_WORKLOAD_OPS,
};
