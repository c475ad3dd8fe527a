/* SPDX-License-Identifier: MIT */
/*
 * vhost/virtq.h - split virtqueues seen from the device: address translation, descriptor
 * chains, the used ring (private).
 *
 * Address spaces (struct vhost_as): without VIRTIO_F_IOMMU_PLATFORM the rings are given as the
 * front end's virtual addresses and buffers as guest physical addresses, both resolved through
 * the memory table; with it, both are IOVAs resolved through the queue's cache (its IOTLB as an
 * agent of the IOMMU engine, vhost/agent.h) in front of the device IOTLB's store. Either way a
 * translation yields host segments, each checked against the memory table before it is returned
 * (the last line of defence, counted when it fires).
 *
 * A descriptor chain is walked once, copying each descriptor out of guest memory before using
 * it (the driver may rewrite it under us). Bounds: an index past the table, more descriptors
 * than the table holds (a loop), an indirect table that is empty, not a multiple of 16 bytes,
 * nested, larger than VHOST_MAX_INDIRECT entries or not translatable, a readable descriptor
 * after a writable one, more than VHOST_MAX_SEGS host segments: each is an error that stops the
 * queue (the driver broke the ring; virtio calls this "needs reset").
 *
 * Threading: the fields marked "data path" belong to the thread that processes the queue; the
 * others are written by the control thread only while the data path is paused (vhost/dev.c).
 */
#ifndef DG_VHOST_VIRTQ_H
#define DG_VHOST_VIRTQ_H

#include "vhost/agent.h"
#include "vhost/iotlb.h"
#include "vhost/memtable.h"
#include "vhost/proto.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define VHOST_MAX_SEGS	   64
#define VHOST_MAX_INDIRECT 1024

struct vhost_seg {
	uint8_t *host;
	uint32_t len;
};

struct vhost_as {
	const struct vhost_memtable *mt;
	const struct vhost_iotlb *iotlb; /* NULL: no IOMMU */
	_Atomic uint64_t *outside;	 /* counter of refused accesses outside the memory table */
	_Atomic uint64_t *fills;	 /* counter of queue-cache misses looked up in the store */
};

/* Why a translation failed, for the caller to send a MISS or an ACCESS_FAIL. */
struct vhost_fault {
	uint64_t addr;	   /* first address not translated (page aligned for a miss) */
	unsigned int perm; /* VU_ACCESS_RO/WO: what the access needed */
};

/*
 * Translate [addr, addr + len) for an access needing @perm (VU_ACCESS_RO to read, VU_ACCESS_WO
 * to write) into segments appended to @seg (capacity @max, *@nseg in use, updated). @ring: the
 * address is a ring address (front-end virtual address without IOMMU) rather than a buffer
 * address (guest physical without IOMMU). @agent: the queue's translation agent, whose IOTLB
 * caches the store (NULL: the store alone; the caller must be the agent's thread, online).
 * Returns 0, or -EAGAIN (IOTLB miss at fault->addr), -EACCES (granted without @perm), -EFAULT
 * (no memory-table region holds it, or the range wraps), -E2BIG (more than @max segments),
 * -EPERM (a segment failed the memory-table check: counted in as->outside).
 */
int vhost_xlate(const struct vhost_as *as, struct dg_device *agent, uint64_t addr, uint64_t len,
		unsigned int perm, bool ring, struct vhost_seg *seg, unsigned int max,
		unsigned int *nseg, struct vhost_fault *fault);

struct vhost_chain {
	uint16_t head;	    /* id to return in the used ring */
	unsigned int nread; /* seg[0, nread) device-readable, the rest device-writable */
	unsigned int nseg;
	uint64_t read_len;
	uint64_t write_len;
	struct vhost_seg seg[VHOST_MAX_SEGS];
};

struct vhost_vq {
	/* Set by the control thread (data path paused). */
	uint32_t num;	    /* ring size, power of two <= 32768; 0 = not set */
	uint64_t desc_addr; /* as given by SET_VRING_ADDR */
	uint64_t avail_addr;
	uint64_t used_addr;
	bool addr_set;
	bool enabled;  /* SET_VRING_ENABLE (or kick set without PROTOCOL_FEATURES) */
	bool started;  /* kick fd (or NOFD) given, not stopped by GET_VRING_BASE since */
	bool indirect; /* VIRTIO_RING_F_INDIRECT_DESC negotiated */
	int kick_fd;   /* -1: none */
	int call_fd;
	int err_fd;
	uint16_t last_avail; /* next avail entry to consume (data path while running) */
	uint16_t used_idx;   /* next used entry to fill (data path while running) */
	/* The driver's avail index as last read (data path; set to last_avail with it): entries
	   up to it are consumed before the index is read again, once per burst rather than per
	   chain, so the cache line the driver writes as it refills is not pulled back and forth
	   for every chain. Invariant: avail_idx - last_avail <= num (16-bit arithmetic). */
	uint16_t avail_idx;
	bool broken; /* ring error seen: no more processing until reset (data path) */
	/* Set by the control thread when an invalidation overlaps a ring, before it bumps the
	 * invalidation generation (seq_cst RMW); taken by the data path after its seq_cst load of
	 * the generation (net.c, vhost_dp_quiescent), which orders it: relaxed accesses here. */
	_Atomic bool ring_stale;
	/* Data path. */
	bool rings_ok; /* desc/avail/used below are valid translations */
	struct vring_desc *desc;
	uint8_t *avail;		 /* flags u16, idx u16, ring u16[num] */
	uint8_t *used;		 /* flags u16, idx u16, ring {u32 id, u32 len}[num] */
	uint64_t retry_ns;	 /* stopped on a miss: 0, or when to look again without news */
	uint16_t pending_used;	 /* used entries written but not yet published */
	bool kicks_off;		 /* we set VRING_USED_F_NO_NOTIFY (data path) */
	struct dg_device *agent; /* translation agent (vhost/agent.h); set at creation, kept by
				    vhost_vq_init() */
	struct vring_desc ind[VHOST_MAX_INDIRECT]; /* copy of the current indirect table */
};

/* Reset @vq to its state before any SET_VRING_* (fds must have been closed by the caller; the
 * agent stays, its cache is emptied by an engine command). */
void vhost_vq_init(struct vhost_vq *vq);

/*
 * Translate the three rings (each must come out as one host segment, suitably aligned).
 * Returns 0, or as vhost_xlate() (-EAGAIN with @fault set on a miss), or -EINVAL (not one
 * contiguous segment, misaligned, ring not set).
 */
int vhost_vq_map_rings(struct vhost_vq *vq, const struct vhost_as *as, struct vhost_fault *fault);

/* Entries the driver made available and the device has not consumed, reading the avail index
 * now (and remembering it in avail_idx); -EIO if impossible. */
int vhost_vq_avail(struct vhost_vq *vq);

/*
 * Walk the chain at the head of the avail ring into @ch. Returns 1 and consumes the entry,
 * 0 when the ring is empty, -EACCES with @fault and @ch->head set (a descriptor was granted
 * without the access it needs: the entry is consumed, to be returned empty), or (nothing
 * consumed) -EAGAIN with @fault set (IOTLB miss), or an error
 * of the ring (-EINVAL bad index or flags, -ELOOP loop or chain too long, -E2BIG, -EFAULT,
 * -EPERM: see vhost_xlate()) after which the queue must stop.
 */
int vhost_vq_pop(struct vhost_vq *vq, const struct vhost_as *as, struct vhost_chain *ch,
		 struct vhost_fault *fault);

/* Return chain @head with @len bytes written; visible to the driver at vhost_vq_publish(). */
void vhost_vq_push(struct vhost_vq *vq, uint16_t head, uint32_t len);

/* Publish the used entries pushed; true if the driver wants an interrupt for them. */
bool vhost_vq_publish(struct vhost_vq *vq);

/*
 * Notification suppression (virtio 1.x without EVENT_IDX): while the data path polls, the used
 * ring's flags say VRING_USED_F_NO_NOTIFY so the driver does not kick for every burst. Before
 * the data path sleeps it clears the flag and looks at the avail ring again (after a full
 * fence, which pairs with the driver's barrier between its avail index store and its read of
 * the flags): true when entries arrived meanwhile, so it must not sleep. The rings must be
 * translated (rings_ok).
 */
void vhost_vq_kicks_off(struct vhost_vq *vq);
bool vhost_vq_kicks_on(struct vhost_vq *vq);

/* Copy @len bytes out of segments @seg[0, n) starting @off bytes in; returns bytes copied. */
uint64_t vhost_segs_read(const struct vhost_seg *seg, unsigned int n, uint64_t off, void *dst,
			 uint64_t len);

/* Copy @len bytes into segments @seg[0, n) starting @off bytes in; returns bytes copied. */
uint64_t vhost_segs_write(const struct vhost_seg *seg, unsigned int n, uint64_t off,
			  const void *src, uint64_t len);

#endif /* DG_VHOST_VIRTQ_H */
