/* SPDX-License-Identifier: MIT */
/*
 * vhost/iotlb.h - the device IOTLB of the vhost-user back end (private).
 *
 * What the front end granted (IOTLB UPDATE: iova -> its virtual address, with a permission) is
 * held per 4 KiB page in a radix tree indexed by the IOVA page number, so a lookup costs the
 * same four dependent loads whatever the number and order of entries (DPDK's sorted list costs a
 * scan, Linux vhost's interval tree a log; QEMU's VT-d hash flushes itself when full). A leaf is
 * one 64-bit word: the back end's host address of the page, bit 62 = device may read, bit 63 =
 * device may write; 0 = nothing granted.
 *
 *   pfn = iova >> 12 (52 bits):  [51:36] root (65536 slots)  [35:24] [23:12] [11:0] nodes of 4096
 *
 * Concurrency: one writer (the thread serving the socket: update, invalidate, flush), any
 * number of lock-free readers (vhost_iotlb_lookup() from data-path threads). Interior nodes are
 * published with a release store after they are zeroed, and are never freed while readers may
 * run (only vhost_iotlb_destroy()/vhost_iotlb_reset(), with the data path paused). Leaves are
 * written and cleared with relaxed stores: a reader may see an old or a new leaf until it passes
 * a quiescent point; the writer acknowledges an INVALIDATE only after every online reader has
 * passed one (the engine's wait, vhost/agent.h), which is what makes an invalidation complete.
 *
 * This is the store of what was granted. Each virtqueue caches translations in front of it in
 * its own IOTLB, an agent of dmaguard's IOMMU engine (vhost/agent.h), which applies
 * invalidations at its quiescent points.
 *
 * Coalescing happens at translation time (vhost/virtq.c): consecutive pages become one segment
 * only when their IOVAs and their host addresses are both contiguous.
 */
#ifndef DG_VHOST_IOTLB_H
#define DG_VHOST_IOTLB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define VHOST_IOTLB_PAGE_SHIFT 12
#define VHOST_IOTLB_PAGE_SIZE  (1ull << VHOST_IOTLB_PAGE_SHIFT)
#define VHOST_IOTLB_ROOT_BITS  16
#define VHOST_IOTLB_NODE_BITS  12
#define VHOST_IOTLB_READ       (1ull << 62)
#define VHOST_IOTLB_WRITE      (1ull << 63)
#define VHOST_IOTLB_ADDR_MASK  (VHOST_IOTLB_READ - 1)

/* Default cap on tree nodes (32 KiB each): 4096 nodes = 128 MiB, room for 64 GiB of pages. */
#define VHOST_IOTLB_MAX_NODES 4096

struct vhost_iotlb {
	_Atomic uint64_t *root; /* 2^16 slots: address of a level-1 node or 0; writer publishes */
	size_t nodes;		/* nodes below the root; writer only */
	size_t max_nodes;	/* allocation cap: update fails with -ENOSPC beyond it */
	uint64_t entries;	/* leaves != 0; writer only */
};

/* 0 or -ENOMEM. @max_nodes 0 = VHOST_IOTLB_MAX_NODES. */
int vhost_iotlb_init(struct vhost_iotlb *t, size_t max_nodes);

/* Free every node (no reader may run). */
void vhost_iotlb_destroy(struct vhost_iotlb *t);

/* Remove every entry and free the nodes (no reader may run). */
void vhost_iotlb_reset(struct vhost_iotlb *t);

/*
 * Grant [iova, iova + size) -> [host, host + size) with @perm (VHOST_IOTLB_READ|WRITE, at least
 * one). Replaces whatever was there; *@changed (may be NULL) gets the number of pages that held
 * a different translation before (caches may hold those: the caller invalidates them).
 * @host need not be page aligned (the leaf keeps it whole).
 * Returns 0, or -EINVAL (size 0, iova or size not 4 KiB aligned, perm empty or unknown, host 0
 * or above 2^62), -ERANGE (iova + size wraps past 2^64), -ENOSPC (node cap reached), -ENOMEM;
 * on error no translation changed.
 */
int vhost_iotlb_update(struct vhost_iotlb *t, uint64_t iova, uint64_t size, uintptr_t host,
		       uint64_t perm, uint64_t *changed);

/*
 * Remove every page that [iova, iova + size) touches; iova + size may equal 2^64 exactly (a
 * full flush as QEMU sends it). Sets *@removed (may be NULL) to the number of pages removed.
 * Returns 0, -EINVAL (size 0) or -ERANGE (the end wraps past 2^64); on error nothing changed.
 * Cost: proportional to the tree nodes the range touches, never to the range's size.
 */
int vhost_iotlb_invalidate(struct vhost_iotlb *t, uint64_t iova, uint64_t size, uint64_t *removed);

/* Remove every entry, keep the nodes (readers may run). */
void vhost_iotlb_flush(struct vhost_iotlb *t);

/* Check the invariants (entry and node counts, leaf format). 0 or -EUCLEAN. Writer only. */
int vhost_iotlb_check(const struct vhost_iotlb *t);

/* The leaf of IOVA page @pfn (< 2^52), 0 if none. Lock-free, any thread. */
static inline uint64_t vhost_iotlb_lookup(const struct vhost_iotlb *t, uint64_t pfn)
{
	const unsigned int nb = VHOST_IOTLB_NODE_BITS;
	const uint64_t m = (1ull << nb) - 1;
	/* Acquire pairs with the release in publish_node(): the node is zeroed before it is seen. */
	uint64_t n = atomic_load_explicit(&t->root[pfn >> (3 * nb)], memory_order_acquire);

	if (!n)
		return 0;
	n = atomic_load_explicit(&((_Atomic uint64_t *)(uintptr_t)n)[(pfn >> (2 * nb)) & m],
				 memory_order_acquire);
	if (!n)
		return 0;
	n = atomic_load_explicit(&((_Atomic uint64_t *)(uintptr_t)n)[(pfn >> nb) & m],
				 memory_order_acquire);
	if (!n)
		return 0;
	return atomic_load_explicit(&((_Atomic uint64_t *)(uintptr_t)n)[pfn & m],
				    memory_order_relaxed);
}

#endif /* DG_VHOST_IOTLB_H */
