/* SPDX-License-Identifier: MIT */
/*
 * dmaguard/pt.h - IO page tables in real hardware formats.
 *
 * One generic walker and one ops table per format, bit-exact to the specifications:
 *  - DG_PT_FMT_VTD_SS       Intel VT-d second stage: 3/4/5 levels (39/48/57-bit input),
 *                           4K/2M/1G pages, R bit 0, W bit 1, super-page bit 7, SNP bit 11.
 *  - DG_PT_FMT_ARM_LPAE_S1  ARM LPAE stage 1, granules 4K/16K/64K, 32..48-bit input and
 *  - DG_PT_FMT_ARM_LPAE_S2  output (52 with 64K); stage 2 with concatenated roots as Linux.
 *  - DG_PT_FMT_FLAT         one level of 64-bit entries over a window (PowerPC TCE style).
 *
 * Concurrency contract:
 *  - dg_pt_map() and dg_pt_unmap() on disjoint IOVA ranges may run concurrently from any
 *    threads without locks. Overlapping concurrent calls are a caller bug (as in Linux).
 *  - dg_pt_walk()/dg_pt_iova_to_phys() may run concurrently with everything: they read
 *    entries with acquire loads and see either the old or the new entry.
 *  - A table page unlinked by map or unmap is not freed: it is put on the caller's
 *    struct dg_pt_gather and handed back by dg_pt_gather_release() once the caller knows the
 *    invalidation that covers it has completed (no walker or walk cache can still hold it).
 *
 * Memory: table pages come from an injectable allocator (struct dg_pt_mem_ops) so tests can
 * drive -ENOMEM; after any error the table is consistent and nothing leaks.
 */
#ifndef DMAGUARD_PT_H
#define DMAGUARD_PT_H

#include <dmaguard/common.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dg_pt;

enum dg_pt_format {
	DG_PT_FMT_VTD_SS = 1,
	DG_PT_FMT_ARM_LPAE_S1,
	DG_PT_FMT_ARM_LPAE_S2,
	DG_PT_FMT_FLAT,
};

/* Deepest table hierarchy any format builds (VT-d 5-level). */
#define DG_PT_MAX_DEPTH 5

/*
 * The shape of a page table. dg_pt_create() validates it and rejects what the hardware
 * cannot do; dg_pt_geometry() returns the effective values (defaults filled in).
 */
struct dg_pt_geometry {
	enum dg_pt_format format;
	/* Input (IOVA) bits: VT-d 39/48/57, LPAE 32..48 (..52 with 64K); 0 = 48. Flat: 0. */
	unsigned int ias;
	/* Output bits: VT-d 32..52, LPAE 32/36/40/42/44/48 (52 with 64K), flat 32..52; 0 = 48
	 * (flat: 52). */
	unsigned int oas;
	/* Smallest page: VT-d 4K, LPAE 4K/16K/64K, flat 4K/64K/2M; 0 = 4K. */
	uint64_t granule;
	/* Page sizes allowed: a subset of the format's that holds the granule; 0 = all of them.
	 * The effective set drops sizes no level can hold (>= 2^ias). */
	uint64_t pgsize_bitmap;
	/* Flat only: the window [window_base, window_base + window_size), granule aligned, at
	 * most 2^24 entries, base + size < 2^64. */
	uint64_t window_base;
	uint64_t window_size;
};

/*
 * Table-page allocator. Called from map (any thread, concurrently); must not block for long.
 *  alloc: return zero-filled memory of @size bytes aligned to @size (a power of two), or NULL.
 *  free:  give back a page obtained from alloc with the same size.
 * A NULL ops pointer at create selects the default allocator (aligned_alloc + memset). A page
 * that breaks the contract (misaligned, or an address the format's descriptors cannot hold) is
 * given back at once and the call fails as if alloc had returned NULL.
 */
struct dg_pt_mem_ops {
	void *(*alloc)(void *cookie, size_t size);
	void (*free)(void *cookie, void *page, size_t size);
};

/*
 * What map/unmap leave for the invalidation layer. One gather may collect several calls
 * (a batch); its range is then the hull of all of them.
 */
struct dg_pt_gather {
	uint64_t start;	    /* lowest IOVA whose translation changed; start == end: nothing */
	uint64_t end;	    /* one past the highest */
	uint64_t pgsize;    /* largest leaf removed (invalidation granularity hint) */
	bool leaf_only;	    /* true while no table page was unlinked: walk caches may stay */
	uint32_t nr_tables; /* table pages on freelist */
	void *freelist;	    /* unlinked table pages, chained through word 0; see release */
};

/*
 * The result of a read-only walk. On success every field is set. On -ENOENT only depth and
 * table[0..depth] are (the table holding the non-present entry), so a walk cache may keep
 * the tables it passed even for an IOVA that faults.
 */
struct dg_pt_walk {
	uint64_t phys;	    /* output address of the walked IOVA (leaf base + offset) */
	uint64_t pgsize;    /* size of the leaf */
	uint64_t pte;	    /* the leaf descriptor, exactly as the hardware reads it */
	unsigned int prot;  /* DG_PROT_* decoded from the leaf (ARM stage 1 cannot express
			       write-only: WRITE alone reads back as READ | WRITE) */
	unsigned int level; /* leaf level in the format's own numbering (LPAE: Linux's 0..3, leaf
			       3; VT-d: 1 = 4K leaf, 2 = 2M, 3 = 1G; flat: 0) */
	unsigned int depth; /* depth of the table holding the leaf: root = 0, so depth + 1
			       tables were read */
	const void *table[DG_PT_MAX_DEPTH]; /* table read at each depth 0..depth (walk caches) */
};

/*
 * Create an empty page table. Returns NULL with errno EINVAL (bad geometry: unsupported
 * format, address sizes or granule, page sizes the format lacks, misaligned flat window) or
 * ENOMEM. @mem may be NULL (default allocator); @cookie is handed back to @mem.
 */
DG_EXPORT struct dg_pt *dg_pt_create(const struct dg_pt_geometry *geo,
				     const struct dg_pt_mem_ops *mem, void *cookie);

/* Free every table page. The caller guarantees no walker and no concurrent map/unmap. */
DG_EXPORT void dg_pt_destroy(struct dg_pt *pt);

/* The effective geometry (defaults filled in, page sizes restricted as the format allows). */
DG_EXPORT void dg_pt_geometry(const struct dg_pt *pt, struct dg_pt_geometry *geo);

/* The root register value the hardware would be given (VT-d SLPTPTR, LPAE TTBR/VTTBR). */
DG_EXPORT uint64_t dg_pt_root(const struct dg_pt *pt);

/*
 * Map [iova, iova + size) to [phys, phys + size) with DG_PROT_* @prot, using the fewest
 * entries: the largest page sizes that alignment of both addresses and the format allow. An
 * empty table (no leaf anywhere below it) where a larger leaf fits is replaced by the leaf and
 * put on @gather with its span (leaf_only becomes false).
 * Errors (no translation changed): -EINVAL size zero or not granule aligned, addresses not
 * granule aligned, prot without READ or WRITE or with unknown bits, @gather NULL; -ERANGE iova
 * or phys range outside the geometry; -EEXIST part of the range already mapped; -ENOMEM table
 * allocation failed. A map that fails half way undoes what it mapped by an unmap into @gather:
 * after any error the caller treats @gather as after dg_pt_unmap() (it is empty when nothing
 * had to be undone). Tables allocated before the failure may stay linked, empty.
 */
DG_EXPORT int dg_pt_map(struct dg_pt *pt, uint64_t iova, uint64_t phys, uint64_t size,
			unsigned int prot, struct dg_pt_gather *gather);

/*
 * Map @pgcount pages of exactly @pgsize each (Linux's map_pages): like dg_pt_map() but every
 * leaf has size @pgsize, never a larger one. Errors as dg_pt_map(), plus -EINVAL when @pgsize
 * is not in the effective pgsize_bitmap, @pgcount is zero, or the addresses are not @pgsize
 * aligned.
 */
DG_EXPORT int dg_pt_map_pages(struct dg_pt *pt, uint64_t iova, uint64_t phys, uint64_t pgsize,
			      uint64_t pgcount, unsigned int prot, struct dg_pt_gather *gather);

/*
 * Remove every leaf that intersects [iova, iova + size). A leaf only partly covered is removed
 * whole; the walk never runs into a leaf that does not intersect the range. *unmapped gets the
 * total size of the leaves removed. Tables whose whole span is covered are unlinked and put on
 * @gather (leaf_only becomes false).
 * Errors: -EINVAL size zero or not granule aligned, iova not granule aligned, @gather or
 * @unmapped NULL; -ERANGE outside the geometry; -ENOENT no leaf intersects the range (no
 * translation changed; empty tables inside the range may still have been put on @gather).
 */
DG_EXPORT int dg_pt_unmap(struct dg_pt *pt, uint64_t iova, uint64_t size,
			  struct dg_pt_gather *gather, uint64_t *unmapped);

/*
 * Read-only walk of @iova (any thread, concurrently with everything; no allocation, no lock).
 * Errors: -ERANGE outside the geometry; -ENOENT not mapped.
 */
DG_EXPORT int dg_pt_walk(const struct dg_pt *pt, uint64_t iova, struct dg_pt_walk *w);

/*
 * Walk @iova starting from a table found earlier at @depth on a walk of the same region (a
 * page-walk cache entry: the table that covers @iova at @depth). Same results and errors as
 * dg_pt_walk(), plus -EINVAL when @depth is not a table depth or @table is NULL; w->table[]
 * is filled from @depth on. The caller guarantees @table is still linked or not yet released.
 */
DG_EXPORT int dg_pt_walk_from(const struct dg_pt *pt, uint64_t iova, const void *table,
			      unsigned int depth, struct dg_pt_walk *w);

/* IOVA bytes covered by one table at @depth (root: the whole input space). */
DG_EXPORT uint64_t dg_pt_table_span(const struct dg_pt *pt, unsigned int depth);

/* Output address of @iova, or 0 when it is not mapped (Linux's iova_to_phys). */
DG_EXPORT uint64_t dg_pt_iova_to_phys(const struct dg_pt *pt, uint64_t iova);

/*
 * Tables allocated, root included: those linked into the tree plus those waiting on a gather
 * for dg_pt_gather_release(). A table counts once whatever its size (an LPAE concatenated
 * root, a flat table).
 */
DG_EXPORT uint64_t dg_pt_table_pages(const struct dg_pt *pt);

/* Start an empty gather. */
DG_EXPORT void dg_pt_gather_init(struct dg_pt_gather *gather);

/*
 * Free the table pages on @gather and reset it. Call only after the invalidation covering the
 * gather's range (and walk caches, unless leaf_only) has completed. Every gather that holds
 * tables must be released before dg_pt_destroy().
 */
DG_EXPORT void dg_pt_gather_release(struct dg_pt *pt, struct dg_pt_gather *gather);

/*
 * Validate the whole structure: entry encodings, table linkage, alignment, the table-page
 * count. Returns 0, or -EUCLEAN after printing what is wrong to @why (may be NULL).
 * Not safe against concurrent map/unmap.
 */
DG_EXPORT int dg_pt_check(const struct dg_pt *pt, FILE *why);

/* Print every valid entry, one per line, indented by depth. */
DG_EXPORT void dg_pt_dump(const struct dg_pt *pt, FILE *out);

/* Name of a format ("vtd-ss", "arm-lpae-s1", "arm-lpae-s2", "flat"), or NULL. */
DG_EXPORT const char *dg_pt_format_name(enum dg_pt_format format);

#ifdef __cplusplus
}
#endif

#endif /* DMAGUARD_PT_H */
