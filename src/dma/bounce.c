/* SPDX-License-Identifier: MIT */
/*
 * dma/bounce.c - the bounce policy: permanently mapped shadow areas and a copy ("shadow DMA
 * buffers", Markuze et al., ASPLOS'16; Linux's swiotlb for untrusted devices).
 *
 * The device never sees the driver's buffer: map takes a shadow slot, copies the buffer in
 * (to-device, bidirectional) and hands out the slot's address; unmap and sync_for_cpu copy
 * back (from-device, bidirectional). Shadow areas are mapped once when the policy starts and
 * never unmapped while it lasts, so there is no per-I/O page-table work and no invalidation
 * at all, and no window: after unmap the buffer was never reachable in the first place.
 *
 * Sub-page isolation: a slot is 64 bytes to 256 KiB (a power of two), the bytes of a slot
 * past the buffer are zeroed at map when the device can read the area, so what a device can
 * read around a 64-byte buffer is zeros and its own other shadow slots - never the rest of
 * the buffer's page. Areas are per device (a device only ever sees its own shadows) and per
 * direction, each mapped with the direction's permission: a to-device area is read-only for
 * the device, a from-device area write-only (where the format can say so). A from-device slot
 * is therefore not copied in at map (Linux swiotlb copies it since CVE-2022-24304 because its
 * pool is shared between devices; here it only ever holds what this device wrote itself).
 *
 * Layout: one IOVA range holds 3 x ncpus areas of area_size bytes (direction-major), backed
 * by one host allocation; area (dir, cpu) is at IOVA base + (dir * ncpus + cpu) * area_size.
 * Each area is a binary buddy allocator over 64-byte units with blocks of up to 256 KiB:
 *
 *   rec[u] for the first unit u of every block:  st = state | kind | dir | order | nents
 *     free block:  fl.prev/fl.next link it into free_head[order] (doubly linked)
 *     live block:  orig = the driver's buffer (or its sg array), len = bytes mapped
 *   rec[u].st == 0 for units inside a block
 *
 * Locking: each area has a spinlock taken by alloc and free (map on its own CPU's area;
 * an unmap frees into the area the slot came from, uncontended unless threads migrate).
 * Unmap and sync find and claim a slot without the lock: st is published with a release store
 * once orig/len are written, and unmap claims it with one CAS (ALLOC -> CLAIMED), which also
 * makes a double unmap fail. A batch defers the frees to dg_dma_batch_end().
 */
#include "dma/dma_internal.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Block states: free in the buddy lists, live, being unmapped, free in the quick cache. */
enum { ST_FREE = 1, ST_ALLOC = 2, ST_CLAIMED = 3, ST_CACHED = 4 };

/* st word: state [2:0] | kind [5:3] | dir [7:6] | order [12:8] | nents [31:16] */
#define ST(state, kind, dir, order, nents)                                  \
	((uint32_t)(state) | (uint32_t)(kind) << 3 | (uint32_t)(dir) << 6 | \
	 (uint32_t)(order) << 8 | (uint32_t)(nents) << 16)
#define ST_STATE(w) ((w)&7u)
#define ST_KIND(w)  (((w) >> 3) & 7u)
#define ST_DIR(w)   (((w) >> 6) & 3u)
#define ST_ORDER(w) (((w) >> 8) & 31u)
#define ST_NENTS(w) ((w) >> 16)

#define QC_MAX	    32 /* freed blocks kept per order without merging (the quick cache) */

struct bounce_rec {
	union {
		void *orig; /* live: the buffer, or the sg array */
		struct {
			uint32_t prev, next;
		} fl; /* free: free-list links (unit numbers) */
	} u;
	uint32_t len;	     /* live: bytes mapped */
	_Atomic uint32_t st; /* block head state word, 0 inside a block */
};
static_assert(sizeof(struct bounce_rec) == 16, "bounce_rec is 16 bytes");

struct bounce_area {
	struct dg_spinlock lock;
	uint32_t free_head[BOUNCE_MAX_ORDER + 1];  /* under lock */
	uint8_t qn[BOUNCE_MAX_ORDER + 1];	   /* quick cache fill, under lock */
	uint32_t qc[BOUNCE_MAX_ORDER + 1][QC_MAX]; /* quick cache: freed blocks, unmerged */
	uint64_t in_use;			   /* bytes in live blocks, under lock */
	uint8_t *mem;				   /* host memory of the area */
	uint64_t iova;				   /* its DMA address */
	struct bounce_rec *rec;			   /* one per unit */
	enum dg_dma_dir dir;
	bool readable; /* the device can read it: zero the padding */
} dg_cacheline;

struct dma_bounce {
	uint64_t area_size;
	unsigned int area_shift;
	unsigned int ncpus;
	unsigned int nareas;
	uint32_t units; /* per area */
	uint64_t iova;	/* first IOVA of all areas */
	uint64_t iova_size;
	uint8_t *mem;
	struct bounce_rec *rec;
	struct bounce_area *area;
};

/* ---- buddy allocator (area lock held) --------------------------------------------------------- */

static void fl_push(struct bounce_area *a, uint32_t u, unsigned int order)
{
	struct bounce_rec *r = &a->rec[u];

	r->u.fl.prev = BOUNCE_NONE;
	r->u.fl.next = a->free_head[order];
	if (a->free_head[order] != BOUNCE_NONE)
		a->rec[a->free_head[order]].u.fl.prev = u;
	a->free_head[order] = u;
	atomic_store_explicit(&r->st, ST(ST_FREE, 0, 0, order, 0), memory_order_relaxed);
}

static void fl_remove(struct bounce_area *a, uint32_t u, unsigned int order)
{
	struct bounce_rec *r = &a->rec[u];

	if (r->u.fl.prev != BOUNCE_NONE)
		a->rec[r->u.fl.prev].u.fl.next = r->u.fl.next;
	else
		a->free_head[order] = r->u.fl.next;
	if (r->u.fl.next != BOUNCE_NONE)
		a->rec[r->u.fl.next].u.fl.prev = r->u.fl.prev;
	atomic_store_explicit(&r->st, 0, memory_order_relaxed);
}

static uint32_t buddy_alloc(struct bounce_area *a, unsigned int order)
{
	unsigned int o = order;
	uint32_t u;

	while (o <= BOUNCE_MAX_ORDER && a->free_head[o] == BOUNCE_NONE)
		o++;
	if (o > BOUNCE_MAX_ORDER)
		return BOUNCE_NONE;
	u = a->free_head[o];
	fl_remove(a, u, o);
	while (o > order) {
		o--;
		fl_push(a, u + (1u << o), o);
	}
	return u;
}

static void buddy_free(struct bounce_area *a, uint32_t u, unsigned int order)
{
	atomic_store_explicit(&a->rec[u].st, 0, memory_order_relaxed);
	while (order < BOUNCE_MAX_ORDER) {
		uint32_t b = u ^ (1u << order);

		if (atomic_load_explicit(&a->rec[b].st, memory_order_relaxed) !=
		    ST(ST_FREE, 0, 0, order, 0))
			break;
		fl_remove(a, b, order);
		u &= ~(1u << order);
		order++;
	}
	fl_push(a, u, order);
}

/* Give every quick-cached block back to the buddy lists (merging). */
static void qc_drain(struct bounce_area *a)
{
	for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++) {
		while (a->qn[o])
			buddy_free(a, a->qc[o][--a->qn[o]], o);
	}
}

/*
 * Take a block of 2^order units (lock held): the quick cache first (no splitting), then the
 * buddy lists, then the buddy lists after draining the quick caches into them. Like the
 * per-CPU page lists in front of Linux's buddy allocator, this keeps a steady stream of same-
 * sized buffers from splitting and merging a 256 KiB block on every map and unmap.
 */
static uint32_t slot_take(struct bounce_area *a, unsigned int order)
{
	uint32_t u;

	if (a->qn[order]) {
		u = a->qc[order][--a->qn[order]];
	} else {
		u = buddy_alloc(a, order);
		if (u == BOUNCE_NONE) {
			qc_drain(a);
			u = buddy_alloc(a, order);
			if (u == BOUNCE_NONE)
				return u;
		}
	}
	a->in_use += 1ull << (order + BOUNCE_UNIT_SHIFT);
	return u;
}

/* Give a block back (lock held). */
static void slot_give(struct bounce_area *a, uint32_t u, unsigned int order)
{
	a->in_use -= 1ull << (order + BOUNCE_UNIT_SHIFT);
	if (a->qn[order] < QC_MAX) {
		a->qc[order][a->qn[order]++] = u;
		atomic_store_explicit(&a->rec[u].st, ST(ST_CACHED, 0, 0, order, 0),
				      memory_order_relaxed);
		return;
	}
	buddy_free(a, u, order);
}

/* ---- setup ------------------------------------------------------------------------------------ */

int dma_bounce_create(struct dg_dma_dev *dd, struct dma_space *sp, struct dma_bounce **out)
{
	struct dma_bounce *bo = calloc(1, sizeof(*bo));
	uint64_t dir_bytes;
	int r = -ENOMEM;

	if (!bo)
		return -ENOMEM;
	bo->area_size = dd->cfg.bounce.area_size;
	bo->area_shift = dg_ilog2(bo->area_size);
	bo->ncpus = dd->dma->ncpus;
	bo->nareas = 3 * bo->ncpus;
	bo->units = (uint32_t)(bo->area_size >> BOUNCE_UNIT_SHIFT);
	bo->iova_size = bo->area_size * bo->nareas;
	dir_bytes = bo->area_size * bo->ncpus;
	r = dma_fail(dd, DG_DMA_FAIL_ALLOC);
	if (r)
		goto fail;
	r = -ENOMEM;
	bo->mem = aligned_alloc(DMA_HOST_PAGE > sp->granule ? DMA_HOST_PAGE : sp->granule,
				bo->iova_size);
	bo->rec = calloc((size_t)bo->units * bo->nareas, sizeof(*bo->rec));
	bo->area = aligned_alloc(DG_CACHELINE, sizeof(*bo->area) * bo->nareas);
	if (!bo->mem || !bo->rec || !bo->area)
		goto fail;
	memset(bo->mem, 0, bo->iova_size);
	r = dg_iova_alloc(sp->iova, bo->iova_size, sp->limit, 0, &bo->iova);
	if (r)
		goto fail;
	for (unsigned int d = 0; d < 3; d++) {
		r = dg_domain_map(sp->dom, bo->iova + d * dir_bytes,
				  (uintptr_t)(bo->mem + d * dir_bytes), dir_bytes,
				  dma_dir_prot((enum dg_dma_dir)d), NULL);
		if (r) {
			/* The domain is not attached yet: nobody can have cached these. */
			struct dg_pt_gather g;
			uint64_t un;

			dg_pt_gather_init(&g);
			if (d)
				dg_domain_unmap(sp->dom, bo->iova, d * dir_bytes, &g, &un);
			dg_iommu_flush_gather(dd->dma->mmu, sp->dom, &g);
			dg_iova_free(sp->iova, bo->iova, bo->iova_size);
			goto fail;
		}
	}
	for (unsigned int i = 0; i < bo->nareas; i++) {
		struct bounce_area *a = &bo->area[i];
		enum dg_dma_dir dir = (enum dg_dma_dir)(i / bo->ncpus);

		memset(a, 0, sizeof(*a));
		dg_spin_init(&a->lock);
		a->dir = dir;
		a->readable = dir != DG_DMA_FROM_DEVICE || !sp->write_only_ok;
		a->mem = bo->mem + (uint64_t)i * bo->area_size;
		a->iova = bo->iova + (uint64_t)i * bo->area_size;
		a->rec = bo->rec + (uint64_t)i * bo->units;
		for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++)
			a->free_head[o] = BOUNCE_NONE;
		for (uint32_t u = bo->units; u > 0; u -= 1u << BOUNCE_MAX_ORDER)
			fl_push(a, u - (1u << BOUNCE_MAX_ORDER), BOUNCE_MAX_ORDER);
	}
	atomic_fetch_add_explicit(&dd->persistent, bo->iova_size, memory_order_relaxed);
	*out = bo;
	return 0;
fail:
	free(bo->mem);
	free(bo->rec);
	free(bo->area);
	free(bo);
	return r;
}

/* The domain goes away with the space (the device is already elsewhere). */
void dma_bounce_destroy(struct dg_dma_dev *dd, struct dma_space *sp, struct dma_bounce *bo)
{
	(void)sp;
	if (!bo)
		return;
	atomic_fetch_sub_explicit(&dd->persistent, bo->iova_size, memory_order_relaxed);
	free(bo->mem);
	free(bo->rec);
	free(bo->area);
	free(bo);
}

uint64_t dma_bounce_bytes(const struct dma_bounce *bo)
{
	return bo->iova_size;
}

/* ---- copies ----------------------------------------------------------------------------------- */

/* Copy @len bytes starting @off bytes into the concatenation of @sg (to or from @flat). */
static void sg_copy(const struct dg_dma_sg *sg, unsigned int nents, uint64_t off, uint8_t *flat,
		    uint64_t len, bool to_sg)
{
	for (unsigned int i = 0; i < nents && len; i++) {
		uint64_t n;

		if (off >= sg[i].len) {
			off -= sg[i].len;
			continue;
		}
		n = sg[i].len - off < len ? sg[i].len - off : len;
		if (to_sg)
			memcpy((uint8_t *)sg[i].addr + off, flat, n);
		else
			memcpy(flat, (uint8_t *)sg[i].addr + off, n);
		flat += n;
		len -= n;
		off = 0;
	}
}

/* ---- map / unmap ------------------------------------------------------------------------------ */

static unsigned int order_of(uint64_t len)
{
	return len <= (1u << BOUNCE_UNIT_SHIFT) ?
		       0 :
		       dg_ilog2(dg_roundup_pow2(len)) - BOUNCE_UNIT_SHIFT;
}

/* Take a slot for @len bytes in direction @dir: this CPU's area first, then the others. */
static int slot_alloc(struct dg_dma_dev *dd, struct dma_bounce *bo, enum dg_dma_dir dir,
		      uint64_t len, struct bounce_area **ap, uint32_t *up)
{
	unsigned int order = order_of(len), cpu = dma_cpu(bo->ncpus);
	int r = dma_fail(dd, DG_DMA_FAIL_SHADOW);

	if (dg_unlikely(r))
		return r == -ENOSPC ? DMA_ENOSHADOW : r;
	for (unsigned int k = 0; k < bo->ncpus; k++) {
		struct bounce_area *a = &bo->area[dir * bo->ncpus + (cpu + k) % bo->ncpus];
		uint32_t u;

		dg_spin_lock(&a->lock);
		u = slot_take(a, order);
		dg_spin_unlock(&a->lock);
		if (u != BOUNCE_NONE) {
			*ap = a;
			*up = u;
			return 0;
		}
	}
	return DMA_ENOSHADOW;
}

/* Map a list (single: one entry) of @total bytes into one slot. */
static int bounce_map_list(struct dg_dma_dev *dd, const struct dg_dma_sg *sg, unsigned int nents,
			   uint64_t total, enum dg_dma_dir dir, unsigned int attrs,
			   enum dma_kind kind, void *orig, uint64_t *dma)
{
	struct dma_bounce *bo = dd->bounce;
	struct bounce_area *a;
	struct dma_tstats *t;
	struct bounce_rec *rec;
	unsigned int order = order_of(total);
	uint64_t slot_bytes = 1ull << (order + BOUNCE_UNIT_SHIFT);
	uint8_t *slot;
	uint32_t u;
	int r;

	if (total > BOUNCE_MAX)
		return -EINVAL;
	r = slot_alloc(dd, bo, dir, total, &a, &u);
	if (r)
		return r;
	rec = &a->rec[u];
	rec->u.orig = orig;
	rec->len = (uint32_t)total;
	slot = a->mem + ((uint64_t)u << BOUNCE_UNIT_SHIFT);
	t = dma_tstats(dd);
	if (dir != DG_DMA_FROM_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC)) {
		sg_copy(sg, nents, 0, slot, total, false);
		ctr_add(t, CTR_BOUNCE_IN, total);
	}
	if (a->readable && slot_bytes > total) {
		memset(slot + total, 0, slot_bytes - total);
		ctr_add(t, CTR_BOUNCE_ZERO, slot_bytes - total);
	}
	/* Release pairs with the acquire load/CAS in find_slot() and claim(): orig, len and the
	 * copied data are visible to whoever finds the slot live. */
	atomic_store_explicit(&rec->st, ST(ST_ALLOC, kind, dir, order, kind == KIND_SG ? nents : 0),
			      memory_order_release);
	*dma = a->iova + ((uint64_t)u << BOUNCE_UNIT_SHIFT);
	return 0;
}

static int bounce_map(struct dg_dma_dev *dd, void *buf, size_t len, enum dg_dma_dir dir,
		      unsigned int attrs, enum dma_kind kind, uint64_t *dma)
{
	struct dg_dma_sg s = {.addr = buf, .len = len};

	return bounce_map_list(dd, &s, 1, len, dir, attrs, kind, buf, dma);
}

/* The area and unit of a slot's first byte, or NULL. */
static struct bounce_area *area_of(struct dma_bounce *bo, uint64_t dma, uint32_t *u)
{
	struct bounce_area *a;

	if (dma < bo->iova || dma - bo->iova >= bo->iova_size)
		return NULL;
	a = &bo->area[(dma - bo->iova) >> bo->area_shift];
	*u = (uint32_t)((dma - a->iova) >> BOUNCE_UNIT_SHIFT);
	return a;
}

/* Validate and claim the live slot at @dma. */
static int claim(struct dma_bounce *bo, uint64_t dma, uint64_t len, enum dg_dma_dir dir,
		 enum dma_kind kind, uint32_t nents, struct bounce_area **ap, uint32_t *up)
{
	struct bounce_area *a;
	uint32_t u, st;

	a = area_of(bo, dma, &u);
	if (!a || (dma & ((1u << BOUNCE_UNIT_SHIFT) - 1)))
		return -ENOENT;
	/* Acquire pairs with the release store in bounce_map_list(). */
	st = atomic_load_explicit(&a->rec[u].st, memory_order_acquire);
	if (ST_STATE(st) != ST_ALLOC)
		return -ENOENT;
	if (ST_DIR(st) != dir || ST_KIND(st) != kind || ST_NENTS(st) != nents ||
	    a->rec[u].len != len)
		return -EINVAL;
	/* One of two racing unmaps wins; acquire, like the load above, pairs with the release
	 * store in bounce_map_list() (orig and len are read after it). */
	if (!atomic_compare_exchange_strong_explicit(&a->rec[u].st, &st, (st & ~7u) | ST_CLAIMED,
						     memory_order_acquire, memory_order_relaxed))
		return -ENOENT;
	*ap = a;
	*up = u;
	return 0;
}

void dma_bounce_free(struct dg_dma_dev *dd, uint64_t dma)
{
	struct dma_bounce *bo = dd->bounce;
	uint32_t u;
	struct bounce_area *a = area_of(bo, dma, &u);
	uint32_t st = atomic_load_explicit(&a->rec[u].st, memory_order_relaxed);

	dg_spin_lock(&a->lock);
	slot_give(a, u, ST_ORDER(st));
	dg_spin_unlock(&a->lock);
}

/* Unmap the slot at @dma: a single buffer (@sg NULL) or the list @sg. */
static int bounce_unmap_list(struct dg_dma_dev *dd, uint64_t dma, const struct dg_dma_sg *sg,
			     unsigned int nents, uint64_t total, enum dg_dma_dir dir,
			     unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	struct dma_bounce *bo = dd->bounce;
	struct bounce_area *a;
	struct dg_dma_sg s;
	uint32_t u;
	int r = claim(bo, dma, total, dir, kind, kind == KIND_SG ? nents : 0, &a, &u);

	if (r)
		return r;
	if (!sg) { /* the claim made the record ours */
		s.addr = a->rec[u].u.orig;
		s.len = total;
		sg = &s;
	}
	if (dir != DG_DMA_TO_DEVICE && !(attrs & DG_DMA_ATTR_SKIP_CPU_SYNC)) {
		sg_copy(sg, nents, 0, a->mem + ((uint64_t)u << BOUNCE_UNIT_SHIFT), total, true);
		ctr_add(dma_tstats(dd), CTR_BOUNCE_OUT, total);
	}
	if (b) {
		dma_batch_add_bounce(b, dma);
	} else {
		dg_spin_lock(&a->lock);
		slot_give(a, u,
			  ST_ORDER(atomic_load_explicit(&a->rec[u].st, memory_order_relaxed)));
		dg_spin_unlock(&a->lock);
	}
	return 0;
}

static int bounce_unmap(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
			unsigned int attrs, enum dma_kind kind, struct dg_dma_batch *b)
{
	return bounce_unmap_list(dd, dma, NULL, 1, len, dir, attrs, kind, b);
}

/* Split a slot of @total bytes at @dma into DMA segments (max_seg, boundary). */
static int bounce_segments(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			   uint64_t dma, uint64_t total, unsigned int *nr_dma)
{
	unsigned int nr = 0;
	uint64_t pos = 0;

	while (pos < total) {
		uint64_t a = dma + pos, n = total - pos;
		uint64_t to_boundary = (dd->boundary - (a & dd->boundary)) + 1;

		if (n > dd->max_seg)
			n = dd->max_seg;
		if (to_boundary && n > to_boundary)
			n = to_boundary;
		if (nr == nents)
			return -EINVAL;
		sg[nr].dma_addr = a;
		sg[nr].dma_len = n;
		nr++;
		pos += n;
	}
	for (unsigned int i = nr; i < nents; i++) {
		sg[i].dma_addr = 0;
		sg[i].dma_len = 0;
	}
	*nr_dma = nr;
	return 0;
}

static uint64_t sg_total(const struct dg_dma_sg *sg, unsigned int nents)
{
	uint64_t t = 0;

	for (unsigned int i = 0; i < nents; i++)
		t += sg[i].len;
	return t;
}

static int bounce_map_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			 enum dg_dma_dir dir, unsigned int attrs, unsigned int *nr_dma)
{
	uint64_t total = sg_total(sg, nents), dma;
	int r = bounce_map_list(dd, sg, nents, total, dir, attrs, KIND_SG, sg, &dma);

	if (r)
		return r;
	r = bounce_segments(dd, sg, nents, dma, total, nr_dma);
	if (r) {
		struct bounce_area *a;
		uint32_t u;

		claim(dd->bounce, dma, total, dir, KIND_SG, nents, &a, &u);
		dma_bounce_free(dd, dma);
	}
	return r;
}

static int bounce_unmap_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			   enum dg_dma_dir dir, unsigned int attrs, struct dg_dma_batch *b)
{
	return bounce_unmap_list(dd, sg[0].dma_addr, sg, nents, sg_total(sg, nents), dir, attrs,
				 KIND_SG, b);
}

/* The live slot holding @dma: its head unit (blocks are aligned to their size). */
static int find_slot(struct dma_bounce *bo, uint64_t dma, struct bounce_area **ap, uint32_t *up,
		     uint32_t *stp)
{
	struct bounce_area *a;
	uint32_t u;

	a = area_of(bo, dma, &u);
	if (!a)
		return -ENOENT;
	for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++) {
		uint32_t h = u & ~((1u << o) - 1);
		/* Acquire pairs with the release store in bounce_map_list(). */
		uint32_t st = atomic_load_explicit(&a->rec[h].st, memory_order_acquire);

		if (ST_STATE(st) == ST_ALLOC && ST_ORDER(st) == o) {
			*ap = a;
			*up = h;
			*stp = st;
			return 0;
		}
	}
	return -ENOENT;
}

static int bounce_sync(struct dg_dma_dev *dd, uint64_t dma, size_t len, enum dg_dma_dir dir,
		       bool for_cpu)
{
	struct bounce_area *a;
	struct bounce_rec *rec;
	uint32_t u, st;
	uint64_t off;
	uint8_t *slot;
	int r = find_slot(dd->bounce, dma, &a, &u, &st);

	if (r)
		return r;
	rec = &a->rec[u];
	slot = a->mem + ((uint64_t)u << BOUNCE_UNIT_SHIFT);
	off = dma - (a->iova + ((uint64_t)u << BOUNCE_UNIT_SHIFT));
	if (ST_DIR(st) != dir || off + len > rec->len)
		return -EINVAL;
	if (for_cpu ? dir == DG_DMA_TO_DEVICE : dir == DG_DMA_FROM_DEVICE)
		return 0;
	if (ST_KIND(st) == KIND_SG) {
		sg_copy(rec->u.orig, ST_NENTS(st), off, slot + off, len, for_cpu);
	} else if (for_cpu) {
		memcpy((uint8_t *)rec->u.orig + off, slot + off, len);
	} else {
		memcpy(slot + off, (uint8_t *)rec->u.orig + off, len);
	}
	ctr_add(dma_tstats(dd), for_cpu ? CTR_BOUNCE_OUT : CTR_BOUNCE_IN, len);
	return 0;
}

static int bounce_sync_sg(struct dg_dma_dev *dd, struct dg_dma_sg *sg, unsigned int nents,
			  enum dg_dma_dir dir, bool for_cpu)
{
	struct bounce_area *a;
	uint32_t u, st;
	int r = find_slot(dd->bounce, sg[0].dma_addr, &a, &u, &st);

	if (r)
		return r;
	if (ST_KIND(st) != KIND_SG || ST_NENTS(st) != nents || a->rec[u].u.orig != sg ||
	    a->iova + ((uint64_t)u << BOUNCE_UNIT_SHIFT) != sg[0].dma_addr)
		return -EINVAL;
	return bounce_sync(dd, sg[0].dma_addr, a->rec[u].len, dir, for_cpu);
}

const struct dma_policy_ops dma_bounce_ops = {
	.map = bounce_map,
	.unmap = bounce_unmap,
	.map_sg = bounce_map_sg,
	.unmap_sg = bounce_unmap_sg,
	.sync = bounce_sync,
	.sync_sg = bounce_sync_sg,
};

/* ---- statistics and check --------------------------------------------------------------------- */

void dma_bounce_stats(const struct dma_bounce *cbo, struct dg_dma_stats *st)
{
	struct dma_bounce *bo = (struct dma_bounce *)cbo; /* the locks */

	for (unsigned int i = 0; i < bo->nareas; i++) {
		dg_spin_lock(&bo->area[i].lock);
		st->bounce_in_use += bo->area[i].in_use;
		dg_spin_unlock(&bo->area[i].lock);
	}
}

int dma_bounce_check(const struct dma_bounce *bo, FILE *why, uint64_t *live)
{
	*live = 0;
	for (unsigned int i = 0; i < bo->nareas; i++) {
		const struct bounce_area *a = &bo->area[i];
		uint64_t used = 0, nfree[BOUNCE_MAX_ORDER + 1] = {0}, ncached = 0;

		for (uint32_t u = 0; u < bo->units;) {
			uint32_t st = atomic_load_explicit(&a->rec[u].st, memory_order_relaxed);
			unsigned int o = ST_ORDER(st);

			if (!ST_STATE(st) || o > BOUNCE_MAX_ORDER || (u & ((1u << o) - 1))) {
				if (why)
					fprintf(why, "bounce area %u unit %u: bad head %#x\n", i, u,
						st);
				return -EUCLEAN;
			}
			for (uint32_t k = 1; k < (1u << o); k++)
				if (atomic_load_explicit(&a->rec[u + k].st, memory_order_relaxed)) {
					if (why)
						fprintf(why,
							"bounce area %u unit %u: inside a block "
							"but marked\n",
							i, u + k);
					return -EUCLEAN;
				}
			if (ST_STATE(st) == ST_FREE)
				nfree[o]++;
			else if (ST_STATE(st) == ST_CACHED)
				ncached++;
			else {
				used += 1ull << (o + BOUNCE_UNIT_SHIFT);
				*live += ST_STATE(st) == ST_ALLOC; /* not CLAIMED (in a batch) */
			}
			u += 1u << o;
		}
		if (used != a->in_use) {
			if (why)
				fprintf(why,
					"bounce area %u: in_use %" PRIu64 " but blocks %" PRIu64
					"\n",
					i, a->in_use, used);
			return -EUCLEAN;
		}
		for (unsigned int o = 0; o <= BOUNCE_MAX_ORDER; o++) {
			uint64_t n = 0;

			for (unsigned int k = 0; k < a->qn[o]; k++) {
				uint32_t st = atomic_load_explicit(&a->rec[a->qc[o][k]].st,
								   memory_order_relaxed);

				if (st != ST(ST_CACHED, 0, 0, o, 0)) {
					if (why)
						fprintf(why,
							"bounce area %u: quick cache %u holds "
							"unit %u in state %#x\n",
							i, o, a->qc[o][k], st);
					return -EUCLEAN;
				}
				ncached--;
			}

			for (uint32_t u = a->free_head[o]; u != BOUNCE_NONE;
			     u = a->rec[u].u.fl.next)
				if (++n > bo->units)
					break;
			if (n != nfree[o]) {
				if (why)
					fprintf(why,
						"bounce area %u: free list %u has %" PRIu64
						" blocks, %" PRIu64 " free blocks\n",
						i, o, n, nfree[o]);
				return -EUCLEAN;
			}
		}
		if (ncached) {
			if (why)
				fprintf(why,
					"bounce area %u: cached blocks not in the quick caches\n",
					i);
			return -EUCLEAN;
		}
	}
	return 0;
}
