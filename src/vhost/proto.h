/* SPDX-License-Identifier: MIT */
/*
 * vhost/proto.h - the vhost-user wire format (private): request codes, the 12-byte header,
 * payload layouts, feature bits, and the split-virtqueue layout of the virtio 1.x spec.
 *
 * Every message is a header {u32 request; u32 flags; u32 size} followed by @size payload bytes;
 * file descriptors travel as SCM_RIGHTS ancillary data with the header. Flags: bits 0-1 the
 * version (always 1), bit 2 "this is a reply", bit 3 "need reply" (REPLY_ACK). All fields are
 * little endian; dmaguard supports little-endian hosts only (static_assert below).
 */
#ifndef DG_VHOST_PROTO_H
#define DG_VHOST_PROTO_H

#include <assert.h>
#include <stdint.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "vhost-user is little endian");

/* Front end -> back end requests. */
enum {
	VU_GET_FEATURES = 1,
	VU_SET_FEATURES = 2,
	VU_SET_OWNER = 3,
	VU_RESET_OWNER = 4,
	VU_SET_MEM_TABLE = 5,
	VU_SET_LOG_BASE = 6,
	VU_SET_LOG_FD = 7,
	VU_SET_VRING_NUM = 8,
	VU_SET_VRING_ADDR = 9,
	VU_SET_VRING_BASE = 10,
	VU_GET_VRING_BASE = 11,
	VU_SET_VRING_KICK = 12,
	VU_SET_VRING_CALL = 13,
	VU_SET_VRING_ERR = 14,
	VU_GET_PROTOCOL_FEATURES = 15,
	VU_SET_PROTOCOL_FEATURES = 16,
	VU_GET_QUEUE_NUM = 17,
	VU_SET_VRING_ENABLE = 18,
	VU_SEND_RARP = 19,
	VU_NET_SET_MTU = 20,
	VU_SET_BACKEND_REQ_FD = 21,
	VU_IOTLB_MSG = 22,
	VU_SET_VRING_ENDIAN = 23,
	VU_GET_CONFIG = 24,
	VU_SET_CONFIG = 25,
	VU_RESET_DEVICE = 34,
	VU_REQUEST_MAX = 64,
};

/* Back end -> front end requests on the back-end channel. */
enum {
	VU_BACKEND_IOTLB_MSG = 1,
};

#define VU_VERSION	     1u
#define VU_FLAG_VERSION_MASK 3u
#define VU_FLAG_REPLY	     (1u << 2)
#define VU_FLAG_NEED_REPLY   (1u << 3)

#define VU_HDR_SIZE	     12u
#define VU_MAX_FDS	     8u /* regions of one SET_MEM_TABLE, and the most fds accepted */
#define VU_MAX_REGIONS	     8u

/* Virtio feature bits (virtio 1.x, 6 and 5.1.3). */
#define VIRTIO_NET_F_MTU	       3
#define VIRTIO_NET_F_MAC	       5
#define VIRTIO_NET_F_MRG_RXBUF	       15
#define VIRTIO_RING_F_INDIRECT_DESC    28
#define VIRTIO_RING_F_EVENT_IDX	       29
#define VHOST_USER_F_PROTOCOL_FEATURES 30
#define VIRTIO_F_VERSION_1	       32
#define VIRTIO_F_IOMMU_PLATFORM	       33
#define VIRTIO_F_RING_PACKED	       34

/* Protocol feature bits. */
#define VU_PROTOCOL_F_MQ	  0
#define VU_PROTOCOL_F_REPLY_ACK	  3
#define VU_PROTOCOL_F_BACKEND_REQ 5

/* The vring index and "no fd" flag of SET_VRING_KICK/CALL/ERR. */
#define VU_VRING_IDX_MASK 0xffull
#define VU_VRING_NOFD	  (1ull << 8)

struct vu_hdr {
	uint32_t request;
	uint32_t flags;
	uint32_t size;
};

struct vu_vring_state {
	uint32_t index;
	uint32_t num;
};

struct vu_vring_addr {
	uint32_t index;
	uint32_t flags; /* VHOST_VRING_F_LOG (bit 0): logging, ignored (no LOG_ALL offered) */
	uint64_t desc;	/* front-end virtual address, or IOVA with IOMMU_PLATFORM */
	uint64_t used;
	uint64_t avail;
	uint64_t log; /* guest physical address of the used ring for logging; ignored */
};

struct vu_region {
	uint64_t gpa;	   /* guest physical address */
	uint64_t size;	   /* bytes */
	uint64_t uaddr;	   /* front end's virtual address of the region */
	uint64_t mmap_off; /* offset of the region in the fd */
};

struct vu_memory {
	uint32_t nregions;
	uint32_t padding;
	struct vu_region regions[VU_MAX_REGIONS];
};

/* Device IOTLB message, as Linux's struct vhost_iotlb_msg. */
struct vu_iotlb {
	uint64_t iova;
	uint64_t size;
	uint64_t uaddr;
	uint8_t perm;
	uint8_t type;
};

#define VU_ACCESS_RO	     1u
#define VU_ACCESS_WO	     2u
#define VU_ACCESS_RW	     3u

#define VU_IOTLB_MISS	     1u
#define VU_IOTLB_UPDATE	     2u
#define VU_IOTLB_INVALIDATE  3u
#define VU_IOTLB_ACCESS_FAIL 4u

static_assert(sizeof(struct vu_hdr) == VU_HDR_SIZE, "vhost-user header");
static_assert(sizeof(struct vu_vring_state) == 8, "vring state");
static_assert(sizeof(struct vu_vring_addr) == 40, "vring addr");
static_assert(sizeof(struct vu_region) == 32, "memory region");
static_assert(sizeof(struct vu_memory) == 264, "memory table");
static_assert(sizeof(struct vu_iotlb) == 32, "iotlb message");

/* Split virtqueue layout (virtio 1.x 2.7). */
#define VRING_DESC_F_NEXT	   1u
#define VRING_DESC_F_WRITE	   2u
#define VRING_DESC_F_INDIRECT	   4u
#define VRING_USED_F_NO_NOTIFY	   1u
#define VRING_AVAIL_F_NO_INTERRUPT 1u
#define VRING_MAX_SIZE		   32768u

struct vring_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
	uint16_t next;
};

struct vring_used_elem {
	uint32_t id;
	uint32_t len;
};

/* Bytes of each part of a split ring of @num entries (no event-index words: not offered). */
static inline uint64_t vring_desc_bytes(uint32_t num)
{
	return 16ull * num;
}

static inline uint64_t vring_avail_bytes(uint32_t num)
{
	return 4ull + 2ull * num;
}

static inline uint64_t vring_used_bytes(uint32_t num)
{
	return 4ull + 8ull * num;
}

/* The virtio-net header of VERSION_1 devices (struct virtio_net_hdr_mrg_rxbuf). */
struct virtio_net_hdr_v1 {
	uint8_t flags;
	uint8_t gso_type;
	uint16_t hdr_len;
	uint16_t gso_size;
	uint16_t csum_start;
	uint16_t csum_offset;
	uint16_t num_buffers;
};

static_assert(sizeof(struct virtio_net_hdr_v1) == 12, "virtio-net header");

#endif /* DG_VHOST_PROTO_H */
