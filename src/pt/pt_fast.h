/* SPDX-License-Identifier: MIT */
/*
 * pt/pt_fast.h - one-granule map and unmap for the DMA layer (library private).
 *
 * The DMA layer maps most buffers (a packet, a 4K block) as exactly one granule, over and
 * over in the same few last-level tables. These two take the calling thread's last-leaf-table
 * hint (pt.c) and touch one entry: no argument search, no descent. Whenever the short way
 * does not apply (no valid hint, a slot that is not what it should be, an address that is
 * not aligned or beyond the output size, a one-level table) they call dg_pt_map() /
 * dg_pt_unmap(), which validate everything, so results and errors are exactly theirs.
 */
#ifndef DG_PT_FAST_H
#define DG_PT_FAST_H

#include <dmaguard/pt.h>

#include <stdint.h>

/* dg_pt_map(pt, iova, phys, granule, prot, gather). Any thread, as dg_pt_map. */
int pt_map_granule(struct dg_pt *pt, uint64_t iova, uint64_t phys, unsigned int prot,
		   struct dg_pt_gather *gather);

/*
 * pt_map_granule() of @n consecutive granules from @iova, the i-th to @phys[i] (a page list:
 * a scatter-gather list of whole pages). One hint lookup per last-level table the range
 * crosses, then one store per granule. Returns 0, or the error of the first granule that
 * failed with *done set to the granules mapped before it (the caller undoes those).
 */
int pt_map_granules(struct dg_pt *pt, uint64_t iova, const uint64_t *phys, unsigned int n,
		    unsigned int prot, struct dg_pt_gather *gather, unsigned int *done);
/* dg_pt_unmap(pt, iova, granule, gather, &unmapped) without the count. Any thread, as
 * dg_pt_unmap. */
int pt_unmap_granule(struct dg_pt *pt, uint64_t iova, struct dg_pt_gather *gather);

#endif /* DG_PT_FAST_H */
