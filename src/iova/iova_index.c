/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_index.c - the live-range index: first pfn -> tree node, for validating frees.
 *
 * With magazines, a free must not take the tree lock (that is the point of magazines), yet a
 * double free or a free of the wrong size must be caught before the range enters a magazine,
 * or two callers would later be handed the same IOVA. Every indexed node (a cacheable ALLOC
 * node, live or cached, IOVA_INDEXED) is in this index for as long as it is in the tree; its
 * state word says LIVE (with the size asked for) or CACHED. A free finds the node here
 * WITHOUT A LOCK and flips LIVE -> CACHED with one compare-exchange on the state word
 * (dg_iova_free): O(1) expected work, no lock (inside its thread cache), never the tree.
 *
 * Structure: one chained hash table (Fibonacci hashing, the bucket is the top bits of the
 * hash). It doubles when it holds more nodes than buckets; the old table is drained
 * incrementally, a few buckets per insert or remove (as Redis does), so no single call
 * rehashes a whole table; lookups consult the old table for buckets not yet drained. If the
 * new table cannot be allocated the table keeps longer chains: inserting never fails. With
 * magazines, inserts and removes (tree operations) may stop right after a table doubled; so a
 * free that had to look in the old table helps: if the tree lock is free it drains some more
 * buckets (iova_index_help_drain), and the drain finishes within a few thousand such frees.
 *
 * Concurrency - writers: every change (insert, remove, drain step) is made under the tree
 * lock, so writers never race each other. Readers take no lock, and what keeps them safe is:
 *  - nothing they can reach is ever freed while the space lives: drained tables go to a
 *    retired list, tree nodes of allocations go to a free list and are reused (iova.c);
 *  - every field a reader reads (bucket heads, hnext, hkey, state) is an atomic;
 *  - every store of a link (a bucket head or a node's hnext: link_head, the splice in
 *    iova_index_remove) is a release, made under the tree lock, so after the initialization
 *    of the node it points to (node_get, under the same lock); every load of a link is an
 *    acquire. Whatever link a reader follows, it synchronizes with the store that wrote it,
 *    and the node reached is initialized. Releasing the bucket head alone is not enough: a
 *    reader may stand on a node for as long as it likes while the node is unlinked,
 *    recycled and linked again (or moved by a drain), its hnext now pointing to a node
 *    allocated after the reader last synchronized with anybody; that hnext is what the
 *    reader loads next. (With a relaxed hnext store this was a data race, reported by
 *    ThreadSanitizer as the reader's load of hkey against the malloc in node_get;
 *    tests/stress/iova/iova_index_publish.c makes that interleaving every time. The release
 *    costs nothing on x86-64, where it is the same plain store.)
 *  - a reader's answer is only a hint: a node found must still pass the compare-exchange of
 *    its state word, which checks LIVE, the size and the node's generation (a node reused
 *    for another range has another generation, iova_priv.h), after the reader re-read the
 *    key following its acquire load of that state; a node not found (a chain that changed
 *    under the reader, a chain longer than IOVA_INDEX_MAX_STEPS) sends the free to the slow
 *    path, which looks again under the tree lock, where the index is exact.
 * A reader may thus follow a chain pointer into another chain (the node moved) and miss, but
 * never reads freed memory, never loops forever (bounded steps) and never validates a wrong
 * node.
 */
#include "iova/iova_priv.h"

#include <errno.h>
#include <stdlib.h>

#define INDEX_INIT_BITS	 6
#define INDEX_DRAIN_STEP 4  /* old buckets moved per insert/remove while draining */
#define INDEX_HELP_STEP	 64 /* ... per iova_index_help_drain() */

static struct iova_itab *tab_new(struct dg_iova_space *s, unsigned int bits)
{
	struct iova_itab *t = iova_calloc(s, 1, sizeof(*t) + (sizeof(t->b[0]) << bits));

	if (t) {
		t->nb = 1ull << bits;
		t->shift = 64 - bits;
		for (uint64_t i = 0; i < t->nb; i++)
			atomic_init(&t->b[i], NULL);
	}
	return t;
}

int iova_index_init(struct dg_iova_space *s)
{
	struct iova_itab *t = tab_new(s, INDEX_INIT_BITS);

	if (!t)
		return -ENOMEM;
	atomic_init(&s->itab, t);
	atomic_init(&s->iold, NULL);
	return 0;
}

void iova_index_fini(struct dg_iova_space *s)
{
	struct iova_itab *t = atomic_load_explicit(&s->itab, memory_order_relaxed);

	free(t);
	free(atomic_load_explicit(&s->iold, memory_order_relaxed));
	while ((t = s->iretired)) {
		s->iretired = t->retired;
		free(t);
	}
	atomic_store_explicit(&s->itab, NULL, memory_order_relaxed);
	atomic_store_explicit(&s->iold, NULL, memory_order_relaxed);
}

struct iova_node *iova_index_find_slow(struct dg_iova_space *s, struct iova_node *n, uint64_t key)
{
	uint64_t h = iova_index_hash(key);
	struct iova_itab *o;
	unsigned int k;

	for (k = 0; n && k < IOVA_INDEX_MAX_STEPS; k++) {
		if (atomic_load_explicit(&n->hkey, memory_order_relaxed) == key)
			return n;
		/* Acquire pairs with the release store that wrote this link (link_head, or the
		 * splice in iova_index_remove): the node reached is initialized. */
		n = atomic_load_explicit(&n->hnext, memory_order_acquire);
	}
	/* Acquire pairs with the release store of iold in grow(). */
	o = atomic_load_explicit(&s->iold, memory_order_acquire);
	if (!o)
		return NULL;
	n = atomic_load_explicit(&o->b[h >> o->shift], memory_order_acquire); /* as above */
	for (k = 0; n && k < IOVA_INDEX_MAX_STEPS; k++) {
		if (atomic_load_explicit(&n->hkey, memory_order_relaxed) == key)
			return n;
		n = atomic_load_explicit(&n->hnext, memory_order_acquire); /* as above */
	}
	return NULL;
}

/* The chain that holds (or would hold) hash @h; tree lock held. */
static _Atomic(struct iova_node *) *chain(const struct dg_iova_space *s, uint64_t h)
{
	struct iova_itab *o = atomic_load_explicit(&s->iold, memory_order_relaxed);
	struct iova_itab *t = atomic_load_explicit(&s->itab, memory_order_relaxed);

	if (dg_unlikely(o) && h >> o->shift >= s->imigrate)
		return &o->b[h >> o->shift];
	return &t->b[h >> t->shift];
}

struct iova_node *iova_index_lookup_locked(const struct dg_iova_space *s, uint64_t key)
{
	struct iova_node *n =
		atomic_load_explicit(chain(s, iova_index_hash(key)), memory_order_relaxed);

	while (n && atomic_load_explicit(&n->hkey, memory_order_relaxed) != key)
		n = atomic_load_explicit(&n->hnext, memory_order_relaxed);
	return n;
}

/* Push @n on the chain @head (tree lock held). Both stores release: a lock-free reader that
 * loads the head (acquire, iova_index_head) sees @n's key, link and state; one that stood on
 * @n since before (@n recycled, or moved by a drain) and loads its hnext (acquire,
 * iova_index_find_slow) sees the old head, now @n's successor, initialized, though that node
 * may have been allocated after the reader last synchronized with anybody (see above). */
static void link_head(_Atomic(struct iova_node *) *head, struct iova_node *n)
{
	atomic_store_explicit(&n->hnext, atomic_load_explicit(head, memory_order_relaxed),
			      memory_order_release);
	atomic_store_explicit(head, n, memory_order_release);
}

static void drain_step(struct dg_iova_space *s, unsigned int step)
{
	struct iova_itab *o = atomic_load_explicit(&s->iold, memory_order_relaxed);
	struct iova_itab *t = atomic_load_explicit(&s->itab, memory_order_relaxed);

	for (unsigned int k = 0; k < step && s->imigrate < o->nb; k++) {
		struct iova_node *n =
			atomic_load_explicit(&o->b[s->imigrate], memory_order_relaxed);

		/* Readers still walking the old chain may follow a moved node into its new
		 * chain and miss: a hint only (see above). */
		atomic_store_explicit(&o->b[s->imigrate], NULL, memory_order_relaxed);
		s->imigrate++;
		while (n) {
			struct iova_node *next =
				atomic_load_explicit(&n->hnext, memory_order_relaxed);
			uint64_t h = iova_index_hash(
				atomic_load_explicit(&n->hkey, memory_order_relaxed));

			link_head(&t->b[h >> t->shift], n);
			n = next;
		}
	}
	if (s->imigrate == o->nb) {
		/* Relaxed: readers that still hold @o find empty chains (a miss, confirmed under
		 * the tree lock); it is freed only with the space. */
		atomic_store_explicit(&s->iold, NULL, memory_order_relaxed);
		o->retired = s->iretired;
		s->iretired = o;
	}
}

/* Start doubling the table (no drain in progress). Without memory: keep the table. */
static void grow(struct dg_iova_space *s)
{
	struct iova_itab *t = atomic_load_explicit(&s->itab, memory_order_relaxed);
	struct iova_itab *nt = tab_new(s, 64 - t->shift + 1);

	if (!nt)
		return;
	s->imigrate = 0;
	/* Release pairs with the acquire loads of iold in iova_index_find_slow(): published
	 * before the new table, so a reader that sees the new table also finds the old one. */
	atomic_store_explicit(&s->iold, t, memory_order_release);
	/* Release pairs with the acquire load of itab in iova_index_head(): the new table's
	 * empty buckets are initialized. */
	atomic_store_explicit(&s->itab, nt, memory_order_release);
}

void iova_index_insert(struct dg_iova_space *s, struct iova_node *n)
{
	struct iova_itab *t = atomic_load_explicit(&s->itab, memory_order_relaxed);

	if (atomic_load_explicit(&s->iold, memory_order_relaxed))
		drain_step(s, INDEX_DRAIN_STEP);
	else if (s->icount >= t->nb && t->shift > 1)
		grow(s);
	uint64_t key = n->lo << s->shift;

	atomic_store_explicit(&n->hkey, key, memory_order_relaxed);
	link_head(chain(s, iova_index_hash(key)), n);
	s->icount++;
}

void iova_index_remove(struct dg_iova_space *s, struct iova_node *n)
{
	_Atomic(struct iova_node *) *pp = chain(s, iova_index_hash(n->lo << s->shift));
	struct iova_node *x;

	while ((x = atomic_load_explicit(pp, memory_order_relaxed)) != n)
		pp = &x->hnext;
	/* Release, as every link store (see above): a reader that loads this link may have
	 * synchronized with none of the stores that published the successor (it may stand on
	 * the predecessor since before that was relinked; C11's release sequences do not carry
	 * another thread's plain store). @n keeps its own link, so a reader standing on it walks
	 * on. */
	atomic_store_explicit(pp, atomic_load_explicit(&n->hnext, memory_order_relaxed),
			      memory_order_release);
	s->icount--;
	if (atomic_load_explicit(&s->iold, memory_order_relaxed))
		drain_step(s, INDEX_DRAIN_STEP);
}

void iova_index_help_drain(struct dg_iova_space *s)
{
	if (pthread_mutex_trylock(&s->tree_lock))
		return;
	if (atomic_load_explicit(&s->iold, memory_order_relaxed))
		drain_step(s, INDEX_HELP_STEP);
	pthread_mutex_unlock(&s->tree_lock);
}

static int check_tab(const struct dg_iova_space *s, const struct iova_itab *t, uint64_t from,
		     FILE *why, uint64_t *seen)
{
	for (uint64_t b = from; b < t->nb; b++) {
		for (const struct iova_node *n =
			     atomic_load_explicit(&t->b[b], memory_order_relaxed);
		     n; n = atomic_load_explicit(&n->hnext, memory_order_relaxed)) {
			uint64_t key = atomic_load_explicit(&n->hkey, memory_order_relaxed);

			if (iova_index_hash(key) >> t->shift != b || key != n->lo << s->shift ||
			    n->kind != IOVA_KIND_ALLOC || !IOVA_INDEXED(s, n) ||
			    ++*seen > s->icount) {
				if (why)
					fprintf(why, "iova index: node %#llx misplaced\n",
						(unsigned long long)n->lo);
				return -EUCLEAN;
			}
		}
	}
	return 0;
}

int iova_index_check(const struct dg_iova_space *s, FILE *why)
{
	const struct iova_itab *o = atomic_load_explicit(&s->iold, memory_order_relaxed);
	uint64_t seen = 0;
	int err;

	if ((err = check_tab(s, atomic_load_explicit(&s->itab, memory_order_relaxed), 0, why,
			     &seen)))
		return err;
	if (o) {
		for (uint64_t b = 0; b < s->imigrate; b++) {
			if (atomic_load_explicit(&o->b[b], memory_order_relaxed)) {
				if (why)
					fprintf(why, "iova index: drained bucket not empty\n");
				return -EUCLEAN;
			}
		}
		if ((err = check_tab(s, o, s->imigrate, why, &seen)))
			return err;
	}
	if (seen != s->icount) {
		if (why)
			fprintf(why, "iova index: holds %llu, counted %llu\n",
				(unsigned long long)seen, (unsigned long long)s->icount);
		return -EUCLEAN;
	}
	return 0;
}
