/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_index.c - the live-range index: first pfn -> tree node, for validating frees.
 *
 * With magazines, a free must not take the tree lock (that is the point of magazines), yet a
 * double free or a free of the wrong size must be caught before the range enters a magazine,
 * or two callers would later be handed the same IOVA. Every ALLOC node (live or cached) is in
 * this index for as long as it is in the tree; its state word says LIVE (with the size asked
 * for) or CACHED. A free looks the pfn up here and flips LIVE -> CACHED under the shard lock:
 * one uncontended lock and O(1) expected work, never the tree.
 *
 * Structure: 64 shards chosen by the top bits of a multiplicative (Fibonacci) hash of the pfn,
 * each a chained hash table with its own lock. A shard doubles when it averages more than two
 * nodes per bucket; the old table is drained incrementally, a few buckets per insert or
 * remove (as Redis does), so no single call rehashes a whole table and lookups consult the old
 * table for buckets not yet drained. If the new table cannot be allocated the shard simply
 * keeps longer chains: inserting never fails.
 *
 * Locking: the shard lock protects its tables, chains and count. Nodes enter and leave the
 * index with the tree lock held (lock order: tree -> shard). Lookups take only the shard lock.
 */
#include "iova/iova_priv.h"

#include <errno.h>
#include <stdlib.h>

#define INDEX_INIT_BITS	 4
#define INDEX_DRAIN_STEP 4 /* old buckets moved per insert/remove while resizing */

_Static_assert(IOVA_INDEX_SHARDS == 1 << IOVA_INDEX_SHARD_BITS, "shard bits");

int iova_index_init(struct dg_iova_space *s)
{
	for (unsigned int i = 0; i < IOVA_INDEX_SHARDS; i++) {
		struct iova_index_shard *sh = &s->index[i];

		dg_spin_init(&sh->lock);
		sh->bits = INDEX_INIT_BITS;
		sh->bshift = 64 - INDEX_INIT_BITS;
		sh->tab = iova_calloc(s, 1u << INDEX_INIT_BITS, sizeof(*sh->tab));
		if (!sh->tab) {
			iova_index_fini(s);
			return -ENOMEM;
		}
	}
	return 0;
}

void iova_index_fini(struct dg_iova_space *s)
{
	for (unsigned int i = 0; i < IOVA_INDEX_SHARDS; i++) {
		free(s->index[i].tab);
		free(s->index[i].old);
		s->index[i].tab = s->index[i].old = NULL;
	}
}

static void drain_step(struct iova_index_shard *sh)
{
	uint64_t nold = 1ull << sh->old_bits;

	for (unsigned int k = 0; k < INDEX_DRAIN_STEP && sh->migrate < nold; k++) {
		struct iova_node *n = sh->old[sh->migrate], *next;

		sh->old[sh->migrate++] = NULL;
		for (; n; n = next) {
			uint64_t b = iova_index_bucket(iova_index_hash(n->lo), sh->bits);

			next = n->hnext;
			n->hnext = sh->tab[b];
			sh->tab[b] = n;
		}
	}
	if (sh->migrate == nold) {
		free(sh->old);
		sh->old = NULL;
	}
}

void iova_index_insert(struct dg_iova_space *s, struct iova_index_shard *sh, struct iova_node *n)
{
	if (sh->old) {
		drain_step(sh);
	} else if (sh->count >= 2ull << sh->bits && sh->bits < 64 - IOVA_INDEX_SHARD_BITS) {
		struct iova_node **tab = iova_calloc(s, 2ull << sh->bits, sizeof(*tab));

		if (tab) {
			sh->old = sh->tab;
			sh->old_bits = sh->bits;
			sh->migrate = 0;
			sh->tab = tab;
			sh->bits++;
			sh->bshift--;
			drain_step(sh);
		}
	}
	struct iova_node **head = iova_index_chain(sh, iova_index_hash(n->lo));

	n->hnext = *head;
	*head = n;
	sh->count++;
}

void iova_index_remove(struct dg_iova_space *s, struct iova_index_shard *sh, struct iova_node *n)
{
	(void)s;
	struct iova_node **pp = iova_index_chain(sh, iova_index_hash(n->lo));

	while (*pp != n)
		pp = &(*pp)->hnext;
	*pp = n->hnext;
	n->hnext = NULL;
	sh->count--;
	if (sh->old)
		drain_step(sh);
}

uint64_t iova_index_count(const struct dg_iova_space *s)
{
	uint64_t c = 0;

	for (unsigned int i = 0; i < IOVA_INDEX_SHARDS; i++)
		c += s->index[i].count;
	return c;
}

/* Every chained node hashes to where it is; counts agree. Caller holds every shard lock. */
int iova_index_check(const struct dg_iova_space *s, FILE *why)
{
	for (unsigned int i = 0; i < IOVA_INDEX_SHARDS; i++) {
		const struct iova_index_shard *sh = &s->index[i];
		uint64_t seen = 0;

		for (int t = 0; t < 2; t++) {
			struct iova_node *const *tab = t ? sh->old : sh->tab;
			uint32_t bits = t ? sh->old_bits : sh->bits;

			if (!tab)
				continue;
			for (uint64_t b = t ? sh->migrate : 0; b < 1ull << bits; b++) {
				for (const struct iova_node *n = tab[b]; n; n = n->hnext) {
					uint64_t h = iova_index_hash(n->lo);

					if (h >> (64 - IOVA_INDEX_SHARD_BITS) != i ||
					    iova_index_bucket(h, bits) != b ||
					    n->kind != IOVA_KIND_ALLOC) {
						if (why)
							fprintf(why,
								"iova index: node %#llx misplaced\n",
								(unsigned long long)n->lo);
						return -EUCLEAN;
					}
					seen++;
				}
			}
		}
		if (seen != sh->count) {
			if (why)
				fprintf(why, "iova index: shard %u holds %llu, counted %llu\n", i,
					(unsigned long long)seen, (unsigned long long)sh->count);
			return -EUCLEAN;
		}
	}
	return 0;
}
