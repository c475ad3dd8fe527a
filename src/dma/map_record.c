/* SPDX-License-Identifier: MIT */
/*
 * dma/map_record.c - the record table: what is mapped at the start of every live IOVA range.
 *
 * Unmap must refuse what was never mapped, a wrong size or direction and a double unmap
 * *before* it touches the page table, and the page table cannot answer (it knows pages, not
 * requests). Linux keeps such records only with CONFIG_DMA_API_DEBUG, in a hash under a lock.
 * Here the key is the IOVA itself, and the allocator already guarantees that a live range has
 * one owner, so the record can live at a fixed place indexed by the range's first granule:
 *
 *   top[g >> 24] -> middle[(g >> 12) & 4095] -> leaf[g & 4095] = struct dma_rec (32 bytes)
 *
 * A lookup is three dependent loads; map writes its record with plain relaxed stores and
 * publishes it with a release store of w0; unmap claims it with one compare-and-swap of w0 (so
 * of two racing unmaps exactly one wins) - a stream granule's mapping by clearing its bit in
 * the leaf's live bitmap instead, which follows the leaf's records (dma_internal.h, stream.c):
 *
 *   leaf = rec[0..4096) | live[0..64)  (bit g & 63 of live[(g & 4095) >> 6]: granule g)
 *
 * The bitmap lives in the leaf, not in the stream's chunk, because a leaf is never freed
 * before its table: a racing (or stale) unmap finds the word from the address alone and can
 * never touch freed memory, while a chunk can go back to the allocator (stream.c) between a
 * thread's read of a record and its claim. Nodes are allocated on first use and published with
 * a release CAS (the loser frees its own copy), and are never freed before the table: IOVAs
 * are allocated top-down and recycled through magazines, so the populated part stays small.
 *
 * Rejected alternative: a hash keyed by IOVA needs a lock or a lock-free resize; the radix
 * needs neither and its memory is bounded by the spread of IOVAs ever used.
 */
#include "dma/dma_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static_assert(sizeof(struct dma_rec) == 32 && REC_LEAF_BYTES % 64 == 0 &&
		      (REC_NODE * sizeof(struct dma_rec)) % 64 == 0,
	      "a leaf's live bitmap starts on a cache line");

_Thread_local struct dma_rec_hint dma_rec_tls __attribute__((tls_model("initial-exec")));

/* Generations of tables (dma_rec_table.gen): the last one handed out. */
static _Atomic uint64_t rec_gen;

int dma_rec_init(struct dma_rec_table *t, uint64_t base, unsigned int gshift)
{
	t->top = calloc(REC_NODE, sizeof(*t->top));
	if (!t->top)
		return -ENOMEM;
	t->base = base;
	t->gshift = gshift;
	/* Relaxed: only uniqueness matters; the table reaches other threads through the
	 * device's publication, which orders this store before their reads. */
	t->gen = atomic_fetch_add_explicit(&rec_gen, 1, memory_order_relaxed) + 1;
	return 0;
}

void dma_rec_fini(struct dma_rec_table *t)
{
	if (!t->top)
		return;
	for (unsigned int i = 0; i < REC_NODE; i++) {
		_Atomic(void *) *mid = atomic_load_explicit(&t->top[i], memory_order_relaxed);

		if (!mid)
			continue;
		for (unsigned int j = 0; j < REC_NODE; j++)
			free(atomic_load_explicit(&mid[j], memory_order_relaxed));
		free((void *)mid);
	}
	free((void *)t->top);
	t->top = NULL;
}

/* The child at @slot, allocating it (zeroed, @size bytes, a multiple of 64) when @create. */
static void *child(_Atomic(void *) *slot, size_t size, bool create)
{
	/* Acquire pairs with the release CAS below: the node's zeroes are visible. */
	void *p = atomic_load_explicit(slot, memory_order_acquire);
	void *fresh, *expected = NULL;

	if (dg_likely(p) || !create)
		return p;
	fresh = aligned_alloc(64, size); /* a leaf's live bitmap: cache lines of its own */
	if (!fresh)
		return NULL;
	memset(fresh, 0, size);
	/* Release pairs with the acquire load above in other threads. */
	if (atomic_compare_exchange_strong_explicit(slot, &expected, fresh, memory_order_acq_rel,
						    memory_order_acquire))
		return fresh;
	free(fresh); /* lost the race: use the winner's node */
	return expected;
}

struct dma_rec *dma_rec_get_slow(struct dma_rec_table *t, uint64_t iova, bool create)
{
	uint64_t g = (iova - t->base) >> t->gshift;
	_Atomic(void *) *mid;
	struct dma_rec *leaf;

	if (dg_unlikely(iova < t->base || g >= REC_MAX_GRANULES))
		return NULL;
	mid = child(&t->top[g >> (2 * REC_LEVEL_BITS)], REC_NODE * sizeof(_Atomic(void *)), create);
	if (!mid)
		return NULL;
	leaf = child(&mid[(g >> REC_LEVEL_BITS) & (REC_NODE - 1)], REC_LEAF_BYTES, create);
	if (!leaf)
		return NULL;
	return &leaf[g & (REC_NODE - 1)];
}

int dma_rec_for_each(const struct dma_rec_table *t,
		     int (*fn)(void *arg, uint64_t iova, uint64_t w0, uint64_t w1, uint64_t w2),
		     void *arg)
{
	for (uint64_t i = 0; i < REC_NODE; i++) {
		_Atomic(void *) *mid = atomic_load_explicit(&t->top[i], memory_order_acquire);

		if (!mid)
			continue;
		for (uint64_t j = 0; j < REC_NODE; j++) {
			struct dma_rec *leaf = atomic_load_explicit(&mid[j], memory_order_acquire);

			if (!leaf)
				continue;
			for (uint64_t k = 0; k < REC_NODE; k++) {
				/* Acquire pairs with the release store of w0 in dma_xl_map(). */
				uint64_t w0 =
					atomic_load_explicit(&leaf[k].w0, memory_order_acquire);
				uint64_t g = (i << (2 * REC_LEVEL_BITS)) | (j << REC_LEVEL_BITS) |
					     k;
				int r;

				if (!(w0 & REC_VALID))
					continue;
				r = fn(arg, t->base + (g << t->gshift), w0,
				       atomic_load_explicit(&leaf[k].w1, memory_order_relaxed),
				       atomic_load_explicit(&leaf[k].w2, memory_order_relaxed));
				if (r)
					return r;
			}
		}
	}
	return 0;
}
