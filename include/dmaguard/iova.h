/* SPDX-License-Identifier: MIT */
/*
 * dmaguard/iova.h - the IOVA allocator: which device-visible addresses a mapping gets.
 *
 * An IOVA space covers [start, end] of one domain in units of a granule (the smallest IOMMU
 * page). Allocations are contiguous ranges, placed highest-first below a caller's limit (its
 * DMA mask) and naturally aligned by default. Two algorithms share this interface:
 *
 *  DG_IOVA_ALGO_AUGMENTED (default): an AVL tree of allocated ranges in which every node also
 *    knows the largest free gap of its subtree and the largest naturally aligned block any gap
 *    of its subtree can hold, so every tree operation is O(log n) in the worst case (including
 *    32-bit-limited requests and a full space), fronted by per-thread magazine caches and a
 *    shared depot (Bonwick & Adams) for every power-of-two size up to DG_IOVA_MAG_MAX_ORDER
 *    granules.
 *  DG_IOVA_ALGO_LINUX_REFERENCE: what Linux 6.1 drivers/iommu/iova.c does without its rcache:
 *    the tree is walked linearly down from a cached node. It exists to be measured against
 *    (dmaguard bench iova, the DMA layer's Linux-like configuration); it has no magazines.
 *
 * Sizes and alignment. A request of @size bytes takes n = ceil(size / granule) granules. By
 * default the range is naturally aligned: it reserves roundup_pow2(n) granules aligned to that
 * power of two (as Linux's dma-iommu does for cached sizes), so a cached range of a size class
 * serves any request of that class. DG_IOVA_ALLOC_PAGE_ALIGN asks for granule alignment only
 * and reserves exactly n granules. dg_iova_free() must be given the start and a size that
 * rounds to the same n; dg_iova_find() reports that size.
 *
 * Concurrency contract: every function except create/destroy may be called from any number of
 * threads at once. Each thread that allocates or frees through the magazines gets its own
 * cache of the space (on its first such call), entered without a lock or any atomic
 * read-modify-write; a free validates the range with one compare-exchange and nothing else;
 * the tree has one lock. dg_iova_flush_caches(), dg_iova_get_stats(), dg_iova_check() and
 * dg_iova_dump() take the other threads' caches for a moment with a process-wide memory
 * barrier (membarrier(2), PRIVATE_EXPEDITED, registered by the first dg_iova_create()); where
 * the kernel lacks it, or DG_IOVA_NO_MEMBARRIER=1 is set in the environment, a cache is
 * entered with one atomic exchange instead. A thread that exits gives its cached ranges back
 * (full magazines to the depot, the rest to the tree); a thread that stays idle keeps them
 * until a flush (an allocation that finds the space full flushes by itself), as a Linux CPU
 * keeps its per-CPU magazines.
 * Memory: tree nodes of allocations are kept for reuse once freed and given back to the system
 * by dg_iova_destroy() (lock-free readers may still look at them); a thread's cache allocates
 * a loaded magazine (about 1 KiB) per size class and zone when the thread first uses the space,
 * freed when the thread exits or the space is destroyed. dg_iova_get_stats() is a snapshot
 * that is exact when no other call is running. dg_iova_check() and dg_iova_dump() take every
 * lock and cache and see a consistent state.
 *
 * Errors: actions return 0 or a negative errno and change nothing when they fail;
 * dg_iova_create() returns NULL with errno set.
 */
#ifndef DMAGUARD_IOVA_H
#define DMAGUARD_IOVA_H

#include <dmaguard/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dg_iova_space;

enum dg_iova_algo {
	DG_IOVA_ALGO_AUGMENTED = 0,	  /* O(log n) augmented tree + magazines (default) */
	DG_IOVA_ALGO_LINUX_REFERENCE = 1, /* Linux 6.1 cached-node linear walk, no magazines */
};

/* dg_iova_config.flags */
#define DG_IOVA_CFG_NO_MAGAZINES (1u << 0) /* every alloc and free goes to the tree */

/* dg_iova_alloc() flags */
#define DG_IOVA_ALLOC_PAGE_ALIGN (1u << 0) /* granule alignment only, exact size */

/* Magazines cover sizes of 2^0 .. 2^DG_IOVA_MAG_MAX_ORDER granules (2 MiB with 4 KiB). */
#define DG_IOVA_MAG_MAX_ORDER 9
#define DG_IOVA_MAG_SIZE      127 /* ranges per magazine (Bonwick & Adams; Linux) */
#define DG_IOVA_DEPOT_MAX     32  /* full magazines per size class and zone in the depot */

struct dg_iova_config {
	uint64_t start;		/* first usable IOVA, granule aligned; IOVA 0 is always reserved */
	uint64_t end;		/* last usable IOVA (inclusive); end + 1 granule aligned */
	uint64_t granule;	/* smallest IOMMU page: a power of two, 1 .. 2^32 */
	enum dg_iova_algo algo; /* DG_IOVA_ALGO_* */
	unsigned int flags;	/* DG_IOVA_CFG_* */
	unsigned int ncpus;	/* 0 .. 4096, checked but unused: caches are per thread
				   (it set the number of per-CPU slots before) */
};

/*
 * Create an IOVA space. IOVA 0 is reserved when it lies in [start, end].
 * Errors (NULL, errno): EINVAL a field is out of range (granule not a power of two or above
 * 2^32, start or end + 1 not granule aligned, start > end, no usable granule, end + 1
 * overflowing at granule 1, unknown algo or flag, ncpus > 4096); ENOMEM; EAGAIN the
 * process-wide setup (a thread key for the caches) failed.
 */
DG_EXPORT struct dg_iova_space *dg_iova_create(const struct dg_iova_config *cfg);

/* Free the space and everything in it (live allocations are simply forgotten), including
 * the caches that threads still hold. NULL is a no-op. No other call may be running on the
 * space. */
DG_EXPORT void dg_iova_destroy(struct dg_iova_space *s);

/*
 * Never hand out [start, start + size): the range is widened to whole granules, the part
 * outside the space is ignored, and overlapping or touching reserved ranges merge. Cached
 * ranges in the way are flushed back first.
 * Errors: -EINVAL size 0 or start + size overflowing; -EBUSY the range overlaps a live
 * allocation; -ENOMEM.
 */
DG_EXPORT int dg_iova_reserve(struct dg_iova_space *s, uint64_t start, uint64_t size);

/*
 * Allocate a range of @size bytes whose last byte is <= @limit, highest first (the tree path
 * returns the highest fit; a magazine hit returns a recently freed range of the same class that
 * also lies below @limit). On success *iova is the first byte.
 * Errors: -EINVAL size 0, size (rounded as described above) larger than the space, unknown
 * flag, NULL iova; -ERANGE limit below the space's start; -ENOSPC no room below @limit even
 * after flushing the caches back to the tree; -ENOMEM no memory for a tree node.
 */
DG_EXPORT int dg_iova_alloc(struct dg_iova_space *s, uint64_t size, uint64_t limit,
			    unsigned int flags, uint64_t *iova);

/*
 * Like dg_iova_alloc(), but try below 4 GiB first (without flushing caches when that fails),
 * then anywhere up to @limit: for devices that can address more but are faster below 4 GiB.
 * Same errors.
 */
DG_EXPORT int dg_iova_alloc_prefer32(struct dg_iova_space *s, uint64_t size, uint64_t limit,
				     unsigned int flags, uint64_t *iova);

/*
 * Give back an allocation: @iova is the value dg_iova_alloc() returned and @size rounds to the
 * same number of granules as the size asked for.
 * Errors (counted in bad_frees; nothing changes): -EINVAL size 0 or iova not granule aligned;
 * -ENOENT no live allocation starts at @iova (never allocated, already freed, reserved);
 * -EINVAL the allocation has another size.
 */
DG_EXPORT int dg_iova_free(struct dg_iova_space *s, uint64_t iova, uint64_t size);

/*
 * The allocation whose reserved range contains @iova: *start is its first byte and *size the
 * size to pass to dg_iova_free() (either pointer may be NULL).
 * Errors: -ENOENT @iova is free or only cached; -EPERM @iova is reserved (then *start and
 * *size describe the reserved range).
 */
DG_EXPORT int dg_iova_find(const struct dg_iova_space *s, uint64_t iova, uint64_t *start,
			   uint64_t *size);

/* Return every range cached in magazines (every thread's) and the depot to the tree. */
DG_EXPORT void dg_iova_flush_caches(struct dg_iova_space *s);

/*
 * One gradual depot trim step: from every depot (size class, zone) that kept at least one
 * full magazine unused since the previous step, return one magazine's ranges to the tree, and
 * free one spare empty magazine. Meant to be called periodically (Linux trims every 100 ms).
 */
DG_EXPORT void dg_iova_trim(struct dg_iova_space *s);

struct dg_iova_stats {
	uint64_t live_ranges;		/* allocations handed out and not freed */
	uint64_t cached_ranges;		/* freed ranges held by magazines and the depot */
	uint64_t reserved_ranges;	/* reserved ranges in the tree (incl. IOVA 0) */
	uint64_t tree_nodes;		/* nodes in the tree (live + cached + reserved + 1) */
	uint64_t depot_magazines;	/* full magazines in the depot */
	uint64_t allocs;		/* successful allocations */
	uint64_t frees;			/* successful frees */
	uint64_t magazine_hits;		/* allocations served by a magazine or the depot */
	uint64_t magazine_misses;	/* cacheable allocations that went to the tree */
	uint64_t tree_allocs;		/* allocations searched in the tree */
	uint64_t tree_frees;		/* ranges removed from the tree */
	uint64_t tree_nodes_visited;	/* tree nodes examined by all tree operations */
	uint64_t last_op_nodes_visited; /* ... by the last tree operation */
	uint64_t max_op_nodes_visited;	/* ... by the most expensive tree operation */
	uint64_t alloc_failures;	/* allocations that failed with -ENOSPC or -ENOMEM */
	uint64_t bad_frees;		/* frees rejected (not allocated, wrong size, unaligned) */
	uint64_t cache_flushes;		/* flushes (explicit, on -ENOSPC, before a reserve) */
	uint64_t trimmed_magazines;	/* depot magazines returned to the tree by trim */
};

/* A snapshot of the counters (exact when no other call runs). */
DG_EXPORT void dg_iova_get_stats(const struct dg_iova_space *s, struct dg_iova_stats *st);

/*
 * Validate every invariant: tree order and balance, parent links, gap and augmented fields,
 * ranges inside the space and disjoint, alignment of cacheable ranges, counters, the live
 * range index, and that every cached range is in exactly one magazine of its class and zone.
 * Returns 0, or -EUCLEAN after describing the first violation on @why (if not NULL).
 */
DG_EXPORT int dg_iova_check(const struct dg_iova_space *s, FILE *why);

/* Print the configuration, counters, caches and every tree node in address order. */
DG_EXPORT void dg_iova_dump(const struct dg_iova_space *s, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* DMAGUARD_IOVA_H */
