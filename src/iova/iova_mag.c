/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_mag.c - per-CPU magazines and the depot in front of the tree.
 *
 * Bonwick & Adams, "Magazines and Vmem" (USENIX ATC 2001), as Linux's iova rcache applies it
 * (Peleg et al., ATC'15): a magazine is a stack of DG_IOVA_MAG_SIZE (127) freed ranges of one
 * size class. Each CPU slot has, per size class and zone, a "loaded" magazine that alloc pops
 * and free pushes, and a "previous" one that is always either full or empty:
 *
 *   alloc: loaded non-empty -> pop; else prev full -> swap, pop; else depot has a full one ->
 *          give the empty prev back to the depot, prev = loaded, loaded = the full one, pop;
 *          else miss: the caller goes to the tree.
 *   free:  loaded not full -> push; else prev empty -> swap, push; else the depot takes the
 *          full prev (if it has room: otherwise that magazine's ranges go back to the tree),
 *          prev = loaded, loaded = an empty magazine, push.
 *
 * So a CPU goes to the depot at most once per 127 operations, and to the tree only when the
 * depot has nothing for it. Magazines are allocated lazily, per slot and class, on first use.
 *
 * Size classes: every power of two from 1 to 2^DG_IOVA_MAG_MAX_ORDER granules (2 MiB with a 4
 * KiB granule: all NVMe and TSO sizes). A range is cacheable when its length is such a power
 * of two and it is naturally aligned, so a cached range serves any request of its class, with
 * either alignment.
 *
 * Limits (zones): a cached range must never be handed to a caller whose limit it exceeds, and
 * scanning a magazine for one that fits (Linux's iova_magazine_pop) is linear. Instead every
 * cached range belongs to one zone by its address and every request maps to one zone by its
 * limit, and the zones are chosen so that any range of the request's zone fits:
 *   ZONE_FULL   ranges that end above 4 GiB - 1 (all ranges if the space ends below 4 GiB);
 *               used by requests whose limit reaches the end of the space;
 *   ZONE_DMA32  ranges that end at or below 4 GiB - 1 (spaces reaching above 4 GiB only);
 *               used by requests whose limit is at least 4 GiB - 1 but below the end.
 * A request with any other limit (below 4 GiB - 1, say a 24-bit device) goes to the tree,
 * which is O(log n) anyway. A 64-bit device never takes a DMA32 range from a cache, which
 * keeps the space 32-bit devices depend on for them.
 *
 * Slots and migration: "per CPU" in user space means the slot of the CPU the thread ran on
 * when it last looked. Each thread remembers its CPU number (sched_getcpu() at its first
 * magazine operation) and trylocks that slot; if the trylock fails (another thread is there:
 * one of them migrated), it re-reads its CPU and waits for that slot's lock. A thread that
 * migrated but meets nobody keeps its old slot, which is as good: nobody else touches it.
 * Correctness never depends on the CPU number - the slot lock protects the slot - only speed.
 *
 * Depot trimming: a depot (per class and zone) holds at most DG_IOVA_DEPOT_MAX full
 * magazines; a free that would overflow it sends a magazine's worth of ranges back to the
 * tree (as Linux 6.1 does). dg_iova_trim() is the gradual policy on top (Bonwick's working
 * set): each call returns one full magazine from every depot whose count of full magazines
 * never dropped to zero since the previous call (so at least one sat unused all the while),
 * and frees one spare empty magazine likewise. The DMA layer calls it from its housekeeping
 * tick (Linux's equivalent runs every 100 ms); without calls the depot bound still holds.
 *
 * The hit paths (iova_mag_alloc/iova_mag_free in iova_priv.h, inlined into dg_iova_alloc and
 * dg_iova_free) are: trylock the slot, pop or push, unlock. Everything else is here.
 *
 * Locking: slot lock, then depot lock (lock order in iova_priv.h). Counters shared with
 * dg_iova_get_stats() are atomics written only by the lock holder (relaxed load + store, no
 * read-modify-write on the fast path) and read relaxed; the number of cached ranges is counted
 * from the magazines under their locks when asked for.
 */
#include "iova/iova_priv.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static struct iova_mag *mag_new(struct dg_iova_space *s)
{
	struct iova_mag *m = iova_malloc(s, sizeof(*m));

	if (m)
		m->n = 0;
	return m;
}

_Thread_local struct iova_tls iova_tls __attribute__((tls_model("initial-exec")));

/* The slot is unknown for this space (first use, or the thread used another space since), or
 * its trylock failed (another thread is there: one of them migrated). Only the latter and a
 * thread's first call read the CPU again. */
struct iova_slot *iova_slot_lock_slow(struct dg_iova_space *s)
{
	struct iova_slot *sl;

	if (!iova_tls.cpu || iova_tls.space_id == s->id) {
		int c = sched_getcpu();

		iova_tls.cpu = (c < 0 ? 0 : (unsigned int)c) + 1;
	}
	sl = &s->slots[iova_tls.cpu & s->slot_mask];
	iova_tls.space_id = s->id;
	iova_tls.slot = sl;
	dg_spin_lock(&sl->lock);
	return sl;
}

int iova_mag_init(struct dg_iova_space *s)
{
	size_t bytes = (size_t)s->nslots * sizeof(struct iova_slot);

	s->slots = aligned_alloc(_Alignof(struct iova_slot), bytes);
	if (!s->slots)
		return -ENOMEM;
	memset(s->slots, 0, bytes);
	for (unsigned int i = 0; i < s->nslots; i++)
		dg_spin_init(&s->slots[i].lock);
	for (unsigned int i = 0; i < IOVA_CCS; i++)
		dg_spin_init(&s->depot[i].lock);
	/* Every cache of a zone the space has gets its loaded magazine now (as Linux's rcache
	 * init does), so the hit paths need no test for a missing one. */
	for (unsigned int i = 0; s->mags && i < s->nslots; i++) {
		for (unsigned int k = 0; k < s->nzones * IOVA_ORDERS; k++) {
			if (!(s->slots[i].cc[k].loaded = mag_new(s)))
				return -ENOMEM; /* the caller's iova_mag_fini() frees the rest */
		}
	}
	return 0;
}

void iova_mag_fini(struct dg_iova_space *s)
{
	if (!s->slots)
		return;
	for (unsigned int i = 0; i < s->nslots; i++) {
		for (unsigned int k = 0; k < IOVA_CCS; k++) {
			free(s->slots[i].cc[k].loaded);
			free(s->slots[i].cc[k].prev);
		}
	}
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		struct iova_depot *d = &s->depot[k];

		for (unsigned int i = 0; i < d->nfull; i++)
			free(d->full[i]);
		for (unsigned int i = 0; i < d->nempty; i++)
			free(d->empty[i]);
		d->nfull = d->nempty = 0;
	}
	free(s->slots);
	s->slots = NULL;
}

/* An empty magazine from the depot's spares or the heap; NULL without memory. */
static struct iova_mag *get_empty(struct dg_iova_space *s, struct iova_depot *d)
{
	struct iova_mag *m = NULL;

	dg_spin_lock(&d->lock);
	if (d->nempty) {
		m = d->empty[--d->nempty];
		if (d->nempty < d->empty_low)
			d->empty_low = d->nempty;
	}
	dg_spin_unlock(&d->lock);
	return m ? m : mag_new(s);
}

static inline void depot_set_nfull(struct iova_depot *d, uint32_t n)
{
	d->nfull = n;
	if (n < d->full_low)
		d->full_low = n;
	atomic_store_explicit(&d->nfull_pub, n, memory_order_relaxed);
}

/* Alloc with loaded empty (slot locked; unlocks it). */
struct iova_node *iova_mag_alloc_slow(struct dg_iova_space *s, struct iova_slot *sl,
				      unsigned int idx, uint64_t live)
{
	struct iova_cpu_cache *cc = &sl->cc[idx];
	struct iova_depot *d = &s->depot[idx];
	struct iova_mag *m, *spare = NULL;
	struct iova_node *n;

	if (cc->prev && cc->prev->n) { /* prev is full */
		m = cc->prev;
		cc->prev = cc->loaded;
		cc->loaded = m;
		goto pop;
	}
	dg_spin_lock(&d->lock);
	if (!d->nfull) {
		dg_spin_unlock(&d->lock);
		sl->misses++;
		dg_spin_unlock(&sl->lock);
		return NULL;
	}
	m = d->full[d->nfull - 1];
	depot_set_nfull(d, d->nfull - 1);
	if (cc->prev) { /* empty: back to the depot's spares */
		if (d->nempty < DG_IOVA_DEPOT_MAX)
			d->empty[d->nempty++] = cc->prev;
		else
			spare = cc->prev;
	}
	dg_spin_unlock(&d->lock);
	cc->prev = cc->loaded;
	cc->loaded = m;
pop:
	sl->hits++;
	n = m->e[--m->n];
	iova_node_set_live(n, live);
	dg_spin_unlock(&sl->lock);
	free(spare);
	return n;
}

/* Free with loaded full (slot locked; unlocks it). The slot keeps a loaded magazine whatever
 * happens: without memory for an empty one, @n is not cached (false: it goes to the tree). */
bool iova_mag_free_slow(struct dg_iova_space *s, struct iova_slot *sl, struct iova_node *n)
{
	struct iova_cpu_cache *cc = &sl->cc[n->cc_idx];
	struct iova_depot *d = &s->depot[n->cc_idx];
	struct iova_node *drain[DG_IOVA_MAG_SIZE];
	uint32_t ndrain = 0;
	struct iova_mag *m, *fresh = NULL;

	if (!cc->prev || !cc->prev->n) {
		/* loaded is full, prev empty (or missing): swap */
		if (!cc->prev)
			cc->prev = get_empty(s, d);
		m = cc->prev;
		if (m) {
			cc->prev = cc->loaded;
			cc->loaded = m;
		}
	} else {
		/* loaded and prev are full: prev goes to the depot, or back to the tree */
		dg_spin_lock(&d->lock);
		if (d->nfull < DG_IOVA_DEPOT_MAX && !d->nempty) {
			/* an empty magazine to load before the depot takes prev */
			dg_spin_unlock(&d->lock);
			fresh = mag_new(s);
			dg_spin_lock(&d->lock);
		}
		if (d->nfull < DG_IOVA_DEPOT_MAX && (d->nempty || fresh)) {
			m = d->nempty ? d->empty[--d->nempty] : NULL;
			if (d->nempty < d->empty_low)
				d->empty_low = d->nempty;
			d->full[d->nfull] = cc->prev;
			depot_set_nfull(d, d->nfull + 1);
			dg_spin_unlock(&d->lock);
			if (!m) {
				m = fresh;
				fresh = NULL;
			}
			cc->prev = cc->loaded;
			cc->loaded = m;
		} else if (d->nfull < DG_IOVA_DEPOT_MAX) {
			dg_spin_unlock(&d->lock); /* no memory: @n goes to the tree */
			m = NULL;
		} else {
			dg_spin_unlock(&d->lock);
			m = cc->prev;
			ndrain = m->n;
			memcpy(drain, m->e, m->n * sizeof(m->e[0]));
			m->n = 0;
			cc->prev = cc->loaded;
			cc->loaded = m;
		}
	}
	if (m)
		m->e[m->n++] = n;
	dg_spin_unlock(&sl->lock);
	free(fresh);
	if (ndrain)
		iova_release_cached(s, drain, ndrain);
	return m != NULL;
}

/* Empty one magazine of slot @sl into the tree. */
static void flush_mag(struct dg_iova_space *s, struct iova_slot *sl, struct iova_mag **mp)
{
	struct iova_node *buf[DG_IOVA_MAG_SIZE];
	uint32_t n = 0;

	dg_spin_lock(&sl->lock);
	if (*mp) {
		n = (*mp)->n;
		memcpy(buf, (*mp)->e, n * sizeof(buf[0]));
		(*mp)->n = 0;
	}
	dg_spin_unlock(&sl->lock);
	if (n)
		iova_release_cached(s, buf, n);
}

void iova_mag_flush(struct dg_iova_space *s)
{
	if (!s->mags)
		return;
	for (unsigned int i = 0; i < s->nslots; i++) {
		struct iova_slot *sl = &s->slots[i];

		for (unsigned int k = 0; k < IOVA_CCS; k++) {
			flush_mag(s, sl, &sl->cc[k].loaded);
			flush_mag(s, sl, &sl->cc[k].prev);
		}
	}
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		struct iova_depot *d = &s->depot[k];

		for (;;) {
			struct iova_mag *m = NULL;

			dg_spin_lock(&d->lock);
			if (d->nfull) {
				m = d->full[d->nfull - 1];
				depot_set_nfull(d, d->nfull - 1);
			}
			dg_spin_unlock(&d->lock);
			if (!m)
				break;
			iova_release_cached(s, m->e, m->n);
			m->n = 0;
			dg_spin_lock(&d->lock);
			if (d->nempty < DG_IOVA_DEPOT_MAX) {
				d->empty[d->nempty++] = m;
				m = NULL;
			}
			dg_spin_unlock(&d->lock);
			free(m);
		}
	}
}

void iova_mag_trim(struct dg_iova_space *s)
{
	if (!s->mags)
		return;
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		struct iova_depot *d = &s->depot[k];
		struct iova_mag *full = NULL, *empty = NULL;

		dg_spin_lock(&d->lock);
		if (d->full_low && d->nfull) {
			full = d->full[d->nfull - 1];
			depot_set_nfull(d, d->nfull - 1);
		}
		d->full_low = d->nfull;
		if (d->empty_low && d->nempty)
			empty = d->empty[--d->nempty];
		d->empty_low = d->nempty;
		dg_spin_unlock(&d->lock);
		if (full) {
			iova_release_cached(s, full->e, full->n);
			atomic_fetch_add_explicit(&s->st_trimmed, 1, memory_order_relaxed);
			free(full);
		}
		free(empty);
	}
}

uint64_t iova_mag_cached(struct dg_iova_space *s, uint64_t *hits, uint64_t *misses)
{
	uint64_t c = 0, h = 0, m = 0;

	if (!s->mags) {
		if (hits)
			*hits = *misses = 0;
		return 0;
	}
	for (unsigned int i = 0; i < s->nslots; i++) {
		struct iova_slot *sl = &s->slots[i];

		dg_spin_lock(&sl->lock);
		h += sl->hits;
		m += sl->misses;
		for (unsigned int k = 0; k < IOVA_CCS; k++)
			c += (sl->cc[k].loaded ? sl->cc[k].loaded->n : 0) +
			     (sl->cc[k].prev ? sl->cc[k].prev->n : 0);
		dg_spin_unlock(&sl->lock);
	}
	for (unsigned int k = 0; k < IOVA_CCS; k++)
		c += atomic_load_explicit(&s->depot[k].nfull_pub, memory_order_relaxed) *
		     DG_IOVA_MAG_SIZE;
	if (hits) {
		*hits = h;
		*misses = m;
	}
	return c;
}

void iova_mag_lock_all(struct dg_iova_space *s)
{
	if (!s->slots)
		return;
	for (unsigned int i = 0; i < s->nslots; i++)
		dg_spin_lock(&s->slots[i].lock);
	for (unsigned int k = 0; k < IOVA_CCS; k++)
		dg_spin_lock(&s->depot[k].lock);
}

void iova_mag_unlock_all(struct dg_iova_space *s)
{
	if (!s->slots)
		return;
	for (unsigned int k = IOVA_CCS; k-- > 0;)
		dg_spin_unlock(&s->depot[k].lock);
	for (unsigned int i = s->nslots; i-- > 0;)
		dg_spin_unlock(&s->slots[i].lock);
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;

	return x < y ? -1 : x > y;
}

#define MCHECK(cond, ...)                                                 \
	do {                                                              \
		if (!(cond)) {                                            \
			if (why) {                                        \
				fprintf(why, "iova cache: " __VA_ARGS__); \
				fputc('\n', why);                         \
			}                                                 \
			err = -EUCLEAN;                                   \
			goto out;                                         \
		}                                                         \
	} while (0)

/* One magazine's entries: CACHED nodes of the right class and zone. */
static int check_mag(const struct iova_mag *m, unsigned int k, FILE *why, struct iova_node **all,
		     uint64_t *nall, uint64_t cap)
{
	int err = 0;

	MCHECK(m->n <= DG_IOVA_MAG_SIZE, "magazine holds %u", m->n);
	for (uint32_t i = 0; i < m->n; i++) {
		const struct iova_node *n = m->e[i];
		uint64_t st = atomic_load_explicit(&n->state, memory_order_relaxed);

		MCHECK(n->kind == IOVA_KIND_ALLOC && (st & IOVA_ST_LOW) == IOVA_ST_CACHED,
		       "node %#llx in a magazine is not cached (state %#llx)",
		       (unsigned long long)n->lo, (unsigned long long)st);
		MCHECK(n->cc_idx == k && n->zone == k / IOVA_ORDERS &&
			       n->mag_order == (int)(k % IOVA_ORDERS),
		       "node %#llx (order %d zone %u) in the magazine of order %u zone %u",
		       (unsigned long long)n->lo, n->mag_order, n->zone, k % IOVA_ORDERS,
		       k / IOVA_ORDERS);
		MCHECK(*nall < cap, "more cached ranges in magazines than in the tree");
		all[(*nall)++] = m->e[i];
	}
out:
	return err;
}

int iova_mag_check(const struct dg_iova_space *s, FILE *why, uint64_t cached_in_tree)
{
	struct iova_node **all = NULL;
	uint64_t nall = 0, cap = cached_in_tree + 1;
	int err = 0;

	if (!s->mags) {
		MCHECK(!cached_in_tree, "%llu cached ranges without magazines",
		       (unsigned long long)cached_in_tree);
		return 0;
	}
	all = malloc(cap * sizeof(*all));
	MCHECK(all, "no memory to check the caches");
	for (unsigned int i = 0; i < s->nslots; i++) {
		const struct iova_slot *sl = &s->slots[i];

		for (unsigned int k = 0; k < IOVA_CCS; k++) {
			const struct iova_cpu_cache *cc = &sl->cc[k];

			MCHECK(cc->loaded || k >= s->nzones * IOVA_ORDERS,
			       "slot %u: no loaded magazine in cache %u", i, k);
			if (cc->loaded && (err = check_mag(cc->loaded, k, why, all, &nall, cap)))
				goto out;
			if (cc->prev) {
				MCHECK(cc->prev->n == 0 || cc->prev->n == DG_IOVA_MAG_SIZE,
				       "slot %u: prev magazine neither empty nor full (%u)", i,
				       cc->prev->n);
				if ((err = check_mag(cc->prev, k, why, all, &nall, cap)))
					goto out;
			}
		}
	}
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		const struct iova_depot *d = &s->depot[k];

		MCHECK(d->nfull <= DG_IOVA_DEPOT_MAX && d->nempty <= DG_IOVA_DEPOT_MAX,
		       "depot overfull");
		MCHECK(atomic_load_explicit(&d->nfull_pub, memory_order_relaxed) == d->nfull,
		       "depot count not published");
		for (uint32_t i = 0; i < d->nfull; i++) {
			MCHECK(d->full[i]->n == DG_IOVA_MAG_SIZE, "depot magazine not full (%u)",
			       d->full[i]->n);
			if ((err = check_mag(d->full[i], k, why, all, &nall, cap)))
				goto out;
		}
		for (uint32_t i = 0; i < d->nempty; i++)
			MCHECK(d->empty[i]->n == 0, "depot spare not empty");
	}
	MCHECK(nall == cached_in_tree, "%llu ranges in magazines, %llu cached in the tree",
	       (unsigned long long)nall, (unsigned long long)cached_in_tree);
	qsort(all, nall, sizeof(*all), cmp_ptr);
	for (uint64_t i = 1; i < nall; i++)
		MCHECK(all[i] != all[i - 1], "node %#llx is in two magazines",
		       (unsigned long long)all[i]->lo);
out:
	free(all);
	return err;
}

void iova_mag_dump(const struct dg_iova_space *s, FILE *out)
{
	if (!s->mags) {
		fprintf(out, "  magazines: off\n");
		return;
	}
	for (unsigned int k = 0; k < IOVA_CCS; k++) {
		const struct iova_depot *d = &s->depot[k];
		uint64_t inslots = 0;

		for (unsigned int i = 0; i < s->nslots; i++) {
			const struct iova_cpu_cache *cc = &s->slots[i].cc[k];

			inslots += (cc->loaded ? cc->loaded->n : 0) + (cc->prev ? cc->prev->n : 0);
		}
		if (!inslots && !d->nfull && !d->nempty)
			continue;
		fprintf(out,
			"  zone %s order %2u: %llu in slots, depot %u full %u empty (low %u/%u)\n",
			k / IOVA_ORDERS == IOVA_ZONE_FULL ? "full " : "dma32", k % IOVA_ORDERS,
			(unsigned long long)inslots, d->nfull, d->nempty, d->full_low,
			d->empty_low);
	}
}
