/* SPDX-License-Identifier: MIT */
/*
 * vhost/iotlb.c - the device IOTLB's radix tree (see iotlb.h for the design).
 *
 * Updates allocate every node the range needs first and write leaves only when all exist, so a
 * failed update changes no translation. Invalidations walk only the nodes that exist, so QEMU's
 * whole-space flush (iova 0xfef00000, size 0xffffffff01100000: the end is exactly 2^64) costs a
 * walk of the populated part of the tree, never 2^52 steps; every bound is computed on the last
 * page of the range (iova + size - 1), which never overflows once the range is checked.
 */
#include "vhost/iotlb.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#define NB	VHOST_IOTLB_NODE_BITS
#define NSLOTS	(1ull << NB)
#define NMASK	(NSLOTS - 1)
#define ROOT_SL (1ull << VHOST_IOTLB_ROOT_BITS)

typedef _Atomic uint64_t slot_t;

static slot_t *node_of(uint64_t v)
{
	return (slot_t *)(uintptr_t)v;
}

int vhost_iotlb_init(struct vhost_iotlb *t, size_t max_nodes)
{
	/* calloc of 512 KiB comes from fresh zero pages: only touched slots cost memory. */
	t->root = calloc(ROOT_SL, sizeof(slot_t));
	if (!t->root)
		return -ENOMEM;
	t->nodes = 0;
	t->max_nodes = max_nodes ? max_nodes : VHOST_IOTLB_MAX_NODES;
	t->entries = 0;
	return 0;
}

static void free_level(slot_t *n, unsigned int depth)
{
	for (uint64_t i = 0; i < NSLOTS; i++) {
		uint64_t c = atomic_load_explicit(&n[i], memory_order_relaxed);

		if (c && depth < 2)
			free_level(node_of(c), depth + 1);
	}
	free(n);
}

void vhost_iotlb_reset(struct vhost_iotlb *t)
{
	for (uint64_t i = 0; i < ROOT_SL; i++) {
		uint64_t c = atomic_load_explicit(&t->root[i], memory_order_relaxed);

		if (c) {
			free_level(node_of(c), 0);
			atomic_store_explicit(&t->root[i], 0, memory_order_relaxed);
		}
	}
	t->nodes = 0;
	t->entries = 0;
}

void vhost_iotlb_destroy(struct vhost_iotlb *t)
{
	if (!t->root)
		return;
	vhost_iotlb_reset(t);
	free(t->root);
	t->root = NULL;
}

/* The child of slot @s, allocated and published if absent. NULL: cap reached or no memory. */
static slot_t *child(struct vhost_iotlb *t, slot_t *s, int *err)
{
	uint64_t c = atomic_load_explicit(s, memory_order_relaxed); /* single writer */

	if (c)
		return node_of(c);
	if (t->nodes >= t->max_nodes) {
		*err = -ENOSPC;
		return NULL;
	}
	slot_t *n = calloc(NSLOTS, sizeof(slot_t));
	if (!n) {
		*err = -ENOMEM;
		return NULL;
	}
	t->nodes++;
	/* publish_node: release pairs with the acquires in vhost_iotlb_lookup(). */
	atomic_store_explicit(s, (uint64_t)(uintptr_t)n, memory_order_release);
	return n;
}

/* The leaf node holding page @pfn, allocated on the way if @alloc. */
static slot_t *leaf_node(struct vhost_iotlb *t, uint64_t pfn, bool alloc, int *err)
{
	slot_t *s = &t->root[pfn >> (3 * NB)];

	for (unsigned int shift = 2 * NB;; shift -= NB) {
		slot_t *n;

		if (alloc) {
			n = child(t, s, err);
		} else {
			uint64_t c = atomic_load_explicit(s, memory_order_relaxed);
			n = c ? node_of(c) : NULL;
		}
		if (!n || shift == 0)
			return n;
		s = &n[(pfn >> shift) & NMASK];
	}
}

int vhost_iotlb_update(struct vhost_iotlb *t, uint64_t iova, uint64_t size, uintptr_t host,
		       uint64_t perm, uint64_t *changed)
{
	const uint64_t pmask = VHOST_IOTLB_PAGE_SIZE - 1;
	uint64_t diff = 0;
	int err = 0;

	if (size == 0 || (iova & pmask) || (size & pmask) || !perm ||
	    (perm & ~(VHOST_IOTLB_READ | VHOST_IOTLB_WRITE)) || host == 0 ||
	    (uint64_t)host > VHOST_IOTLB_ADDR_MASK)
		return -EINVAL;
	if (iova + (size - 1) < iova)
		return -ERANGE;
	if ((uint64_t)host + (size - 1) < (uint64_t)host ||
	    (uint64_t)host + (size - 1) > VHOST_IOTLB_ADDR_MASK)
		return -EINVAL;

	uint64_t first = iova >> VHOST_IOTLB_PAGE_SHIFT;
	uint64_t last = (iova + (size - 1)) >> VHOST_IOTLB_PAGE_SHIFT;

	/* Pass 1: every leaf node the range needs (one per 4096 pages). */
	for (uint64_t pfn = first;;) {
		if (!leaf_node(t, pfn, true, &err))
			return err;
		uint64_t next = (pfn | NMASK) + 1;
		if (next > last || next == 0)
			break;
		pfn = next;
	}
	/* Pass 2: the leaves. */
	slot_t *n = NULL;
	for (uint64_t pfn = first, k = 0;; pfn++, k++) {
		if (!n || (pfn & NMASK) == 0)
			n = leaf_node(t, pfn, false, &err);
		slot_t *s = &n[pfn & NMASK];
		uint64_t leaf = ((uint64_t)host + (k << VHOST_IOTLB_PAGE_SHIFT)) | perm;

		uint64_t old = atomic_load_explicit(s, memory_order_relaxed); /* single writer */

		if (!old)
			t->entries++;
		else if (old != leaf)
			diff++;
		/* Relaxed: readers are ordered by the quiescent-state protocol (iotlb.h). */
		atomic_store_explicit(s, leaf, memory_order_relaxed);
		if (pfn == last)
			break;
	}
	if (changed)
		*changed = diff;
	return 0;
}

/* Clear the leaves of pages [first, last] under node @n, whose first page is @base. */
static uint64_t inval_level(struct vhost_iotlb *t, slot_t *n, unsigned int shift, uint64_t base,
			    uint64_t first, uint64_t last)
{
	uint64_t lo = first > base ? (first - base) >> shift : 0;
	uint64_t span = last - base; /* last >= base here */
	uint64_t hi = (span >> shift) < NMASK ? span >> shift : NMASK;
	uint64_t removed = 0;

	for (uint64_t i = lo; i <= hi; i++) {
		uint64_t c = atomic_load_explicit(&n[i], memory_order_relaxed);

		if (!c)
			continue;
		if (shift == 0) {
			atomic_store_explicit(&n[i], 0, memory_order_relaxed);
			t->entries--;
			removed++;
		} else {
			removed += inval_level(t, node_of(c), shift - NB, base + (i << shift),
					       first, last);
		}
	}
	return removed;
}

int vhost_iotlb_invalidate(struct vhost_iotlb *t, uint64_t iova, uint64_t size, uint64_t *removed)
{
	if (size == 0)
		return -EINVAL;
	if (iova + (size - 1) < iova)
		return -ERANGE;

	uint64_t first = iova >> VHOST_IOTLB_PAGE_SHIFT;
	uint64_t last = (iova + (size - 1)) >> VHOST_IOTLB_PAGE_SHIFT;
	uint64_t n = 0;

	for (uint64_t r = first >> (3 * NB); r <= last >> (3 * NB); r++) {
		uint64_t c = atomic_load_explicit(&t->root[r], memory_order_relaxed);

		if (c)
			n += inval_level(t, node_of(c), 2 * NB, r << (3 * NB), first, last);
	}
	if (removed)
		*removed = n;
	return 0;
}

void vhost_iotlb_flush(struct vhost_iotlb *t)
{
	(void)vhost_iotlb_invalidate(t, 0, UINT64_MAX, NULL);
	/* The last byte of the address space is in the same page as UINT64_MAX - 1: covered. */
}

static int check_level(const struct vhost_iotlb *t, slot_t *n, unsigned int depth, size_t *nodes,
		       uint64_t *leaves)
{
	(*nodes)++;
	for (uint64_t i = 0; i < NSLOTS; i++) {
		uint64_t c = atomic_load_explicit(&n[i], memory_order_relaxed);

		if (!c)
			continue;
		if (depth == 2) {
			if (!(c & (VHOST_IOTLB_READ | VHOST_IOTLB_WRITE)) ||
			    !(c & VHOST_IOTLB_ADDR_MASK))
				return -EUCLEAN;
			(*leaves)++;
		} else if (check_level(t, node_of(c), depth + 1, nodes, leaves)) {
			return -EUCLEAN;
		}
	}
	return 0;
}

int vhost_iotlb_check(const struct vhost_iotlb *t)
{
	size_t nodes = 0;
	uint64_t leaves = 0;

	for (uint64_t r = 0; r < ROOT_SL; r++) {
		uint64_t c = atomic_load_explicit(&t->root[r], memory_order_relaxed);

		if (c && check_level(t, node_of(c), 0, &nodes, &leaves))
			return -EUCLEAN;
	}
	if (nodes != t->nodes || leaves != t->entries || nodes > t->max_nodes)
		return -EUCLEAN;
	return 0;
}
