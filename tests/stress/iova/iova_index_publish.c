/* SPDX-License-Identifier: MIT */
/*
 * A targeted interleaving of the live-range index's publication (iova_index.c), for
 * ThreadSanitizer (it passes anywhere, but only TSan sees the fault it looks for).
 *
 *   stress_iova_index_publish [ROUNDS]
 *
 * A lock-free reader (a free, dg_iova_free -> iova_index_find_slow) may stand on a node for
 * as long as it likes: the node is never freed, only unlinked, recycled and linked again. While
 * it stands there, writers relink that node on top of nodes that were allocated (malloc in
 * node_get) after the reader last synchronized with anybody. When the reader then follows the
 * node's link, it must synchronize with the store that wrote the link, or nothing orders the
 * new node's initialization before the reader's loads of its key and link: a data race in
 * C11, which TSan reports (the reader's load of hkey against the malloc in node_get, the
 * report seen once in stress_iova_steal_nomembarrier) when that store is not a release.
 *
 * Each round makes a space, allocates a node P (from the tree: a fresh node) and starts the
 * reader, which loads the head of P's chain (acquire: it synchronizes with P's link) and
 * signals it stands on P. From then on the reader only spins on a relaxed flag, so it
 * synchronizes with nothing the writer does. The writer (the main thread) makes P's link
 * point to a node allocated after that, one of two ways:
 *   recycle  allocate a fresh node, free P, flush the caches (P goes back to the tree and
 *            the node free list), allocate P's range again: node_get() recycles P and
 *            iova_index_insert() links it on the head of its chain, until that head is one
 *            of the fresh nodes;
 *   drain    allocate fresh nodes until the table doubles and the drain moves P to its new
 *            chain (drain_step -> link_head), on top of a fresh node.
 * It then hands the reader the key of the node P links to (relaxed: a value, no order), and
 * the reader continues its lookup there with iova_index_find_slow(), which must return that
 * node. The writer joins the reader, checks the space (dg_iova_check), frees everything.
 */
#include "iova/iova_priv.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G	4096ull
#define MAXLIVE 4096

static struct dg_iova_space *space;
static struct iova_node *p_node; /* written before the reader starts */
static uint64_t p_key;
static _Atomic uint64_t want_key; /* relaxed: the key the reader must find after P */
static atomic_int stands;	  /* the reader stands on P */
static atomic_int go;		  /* relaxed: the writer is done */
static struct iova_node *found;	  /* read after the join */
static struct iova_node *head_seen;

static void *reader(void *arg)
{
	(void)arg;
	/* The first step of a lock-free lookup (as dg_iova_free makes it). */
	head_seen = iova_index_head(space, p_key);
	atomic_store_explicit(&stands, 1, memory_order_release);
	/* Relaxed: no synchronization with anything the writer does from now on. */
	while (!atomic_load_explicit(&go, memory_order_relaxed))
		sched_yield();
	/* The rest of the lookup, from P on, for the key of the node P now links to. */
	found = iova_index_find_slow(space, head_seen,
				     atomic_load_explicit(&want_key, memory_order_relaxed));
	return NULL;
}

/* P's successor in its chain (tree lock: the index is exact). */
static struct iova_node *p_next(void)
{
	struct iova_node *n;

	pthread_mutex_lock(&space->tree_lock);
	n = atomic_load_explicit(&p_node->hnext, memory_order_relaxed);
	pthread_mutex_unlock(&space->tree_lock);
	return n;
}

static int round_(unsigned int r, bool drain)
{
	struct dg_iova_config cfg = {.granule = G, .start = G, .end = (1ull << 30) - 1};
	static uint64_t live[MAXLIVE];
	unsigned int nlive = 0;
	struct iova_node *nx = NULL;
	pthread_t t;
	uint64_t p;
	int err = 0;

	space = dg_iova_create(&cfg);
	if (!space) {
		fprintf(stderr, "index_publish: create: %s\n", strerror(errno));
		return 1;
	}
	if (dg_iova_alloc(space, G, UINT64_MAX, 0, &p)) {
		fprintf(stderr, "index_publish: first alloc\n");
		return 1;
	}
	pthread_mutex_lock(&space->tree_lock);
	p_node = iova_index_lookup_locked(space, p);
	pthread_mutex_unlock(&space->tree_lock);
	p_key = p;
	atomic_store(&stands, 0);
	atomic_store(&go, 0);
	found = head_seen = NULL;
	if (!p_node || pthread_create(&t, NULL, reader, NULL)) {
		fprintf(stderr, "index_publish: setup\n");
		return 1;
	}
	while (!atomic_load_explicit(&stands, memory_order_acquire))
		sched_yield();

	if (!drain) {
		/* A fresh node (P is live: the node free list is empty), then P recycled: free it,
		 * flush the caches (P goes back to the tree and the node free list), allocate
		 * again (node_get() takes P, the range is P's old one, the highest) - until the
		 * head of P's chain, on which P is linked again, is one of the fresh nodes. */
		for (unsigned int k = 0; k < 1000 && !nx && !err; k++) {
			if (dg_iova_alloc(space, G, UINT64_MAX, 0, &live[nlive++]) ||
			    dg_iova_free(space, p, G)) {
				fprintf(stderr, "index_publish: alloc or free\n");
				err = 1;
				break;
			}
			dg_iova_flush_caches(space);
			if (dg_iova_alloc(space, G, UINT64_MAX, 0, &p) || p != p_key) {
				fprintf(stderr, "index_publish: P's range not reallocated\n");
				err = 1;
				break;
			}
			pthread_mutex_lock(&space->tree_lock);
			if (iova_index_lookup_locked(space, p) != p_node) {
				fprintf(stderr, "index_publish: P not recycled\n");
				err = 1;
			}
			pthread_mutex_unlock(&space->tree_lock);
			if (!err)
				nx = p_next();
		}
	} else {
		/* fresh nodes until the table doubled and P was drained onto a fresh node */
		struct iova_itab *t0 = atomic_load(&space->itab);

		while (nlive < MAXLIVE && !err) {
			if (dg_iova_alloc(space, G, UINT64_MAX, 0, &live[nlive++])) {
				fprintf(stderr, "index_publish: alloc\n");
				err = 1;
			}
			if (atomic_load(&space->itab) != t0 && !atomic_load(&space->iold) &&
			    (nx = p_next()))
				break;
		}
	}
	if (!err && !nx) {
		fprintf(stderr, "index_publish: round %u: P never linked on a fresh node\n", r);
		err = 1;
	}
	if (nx)
		atomic_store_explicit(&want_key, atomic_load(&nx->hkey), memory_order_relaxed);
	atomic_store_explicit(&go, 1, memory_order_relaxed);
	pthread_join(t, NULL);
	if (!err && (head_seen != p_node || found != nx)) {
		fprintf(stderr,
			"index_publish: round %u (%s): the reader found %p after P, not %p\n", r,
			drain ? "drain" : "recycle", (void *)found, (void *)nx);
		err = 1;
	}
	if (!err && dg_iova_check(space, stderr))
		err = 1;
	for (unsigned int i = 0; i < nlive; i++)
		if (dg_iova_free(space, live[i], G))
			err = 1;
	if (dg_iova_free(space, p, G))
		err = 1;
	dg_iova_destroy(space);
	return err;
}

int main(int argc, char **argv)
{
	unsigned int rounds = argc > 1 ? (unsigned int)strtoul(argv[1], NULL, 0) : 20;
	int fails = 0;

	for (unsigned int r = 0; r < rounds; r++)
		fails += round_(r, false) + round_(r, true);
	printf("stress_iova_index_publish: %u rounds (recycle, drain), %d failed\n", rounds, fails);
	return fails ? 1 : 0;
}
