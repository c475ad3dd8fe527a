/* SPDX-License-Identifier: MIT */
/*
 * Stress test of strict's streams (src/dma/stream.c) with frees from other threads: CPU
 * threads map bulks from their own streams and unmap in batches a mix of their own buffers
 * and buffers other threads mapped (handed over through a shared pool), so chunks drain out
 * of order and from every thread at once; also runs under ThreadSanitizer.
 *
 *   stress_dma_stream CPU_THREADS ROUNDS
 *
 * A shared set of granules that are mapped or whose unmap's batch has not ended yet: every
 * address a map returns must not be mapped, nor unmapped in a batch whose end has not begun
 * (no IOVA is reissued before the invalidation of its previous unmap completed: that
 * completes inside the batch end, so from the moment the end begins a map may get it back). At the end: every call succeeded, dg_dma_dev_check() holds (kept tables linked,
 * spare chunks clear), chunks were reused.
 */
#include "dma/dma_internal.h"

#include "../../unit/dma/dma_test_util.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "../../test_rand.h"

#define MAXT  4
#define BULK  24
#define SETSZ 16384 /* > MAXT * (pool + own + batch) granules */
#define POOLN 512

static struct {
	pthread_mutex_t lock;
	uint64_t set[SETSZ];  /* open addressing, 0 empty, ~0 removed */
	uint8_t st[SETSZ];    /* LIVE or ENDING */
	uint64_t pool[POOLN]; /* mapped by someone, free for anyone to unmap */
	unsigned int npool;
	unsigned int bad;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct dg_dma_dev *dd;
static void *page;

static unsigned int slot_of(uint64_t k)
{
	return (unsigned int)((k * 0x9e3779b97f4a7c15ull) >> 50) & (SETSZ - 1);
}

/* Set states: mapped or unmapped in a batch not ending yet, or in a batch whose end has begun
 * (its invalidation may have completed already: a map may get it back from then on). */
enum { LIVE = 1, ENDING = 2 };

/* lock held: the slot of @k, or where it goes (SETSZ: full) */
static unsigned int set_find(uint64_t k, bool *found)
{
	unsigned int i = slot_of(k), tomb = SETSZ;

	for (unsigned int n = 0; n < SETSZ; n++, i = (i + 1) & (SETSZ - 1)) {
		if (g.set[i] == k) {
			*found = true;
			return i;
		}
		if (g.set[i] == ~0ull && tomb == SETSZ)
			tomb = i;
		if (!g.set[i])
			break;
	}
	*found = false;
	return tomb != SETSZ ? tomb : i;
}

/* A map returned @k: false if it is live, or unmapped in a batch whose end has not begun. */
static bool set_add(uint64_t k)
{
	bool found;
	unsigned int i = set_find(k, &found);

	if (found && g.st[i] == LIVE)
		return false;
	g.set[i] = k; /* new, or taken over from a batch end under way */
	g.st[i] = LIVE;
	return true;
}

static void set_mark(uint64_t k, uint8_t st)
{
	bool found;
	unsigned int i = set_find(k, &found);

	if (found)
		g.st[i] = st;
	else
		g.bad++; /* unmapping what is not live */
}

/* @k's batch ended: gone, unless a map took it over meanwhile (LIVE again). */
static void set_del(uint64_t k)
{
	bool found;
	unsigned int i = set_find(k, &found);

	if (found && g.st[i] == ENDING)
		g.set[i] = ~0ull;
}

static uint64_t rnd(uint64_t *s)
{
	return xorshift64(s);
}

struct worker {
	unsigned int id, rounds;
	int err;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (w->id + 1), dma[BULK], mine[BULK], un[3 * BULK];
	void *bufs[BULK];
	unsigned int nmine = 0;

	for (unsigned int i = 0; i < BULK; i++)
		bufs[i] = (uint8_t *)page + 64 * (i % 60);
	for (unsigned int r = 0; r < w->rounds && !w->err; r++) {
		const unsigned int n = 1 + (unsigned int)(rnd(&seed) % BULK);
		struct dg_dma_batch b;
		unsigned int k = 0;
		int e;

		if (rnd(&seed) % 3)
			e = dg_dma_map_bulk(dd, bufs, n, 64, DG_DMA_TO_DEVICE, 0, dma);
		else
			for (unsigned int i = e = 0; i < n && !e; i++)
				e = dg_dma_map_single(dd, bufs[i], 64, DG_DMA_TO_DEVICE, 0,
						      &dma[i]);
		if (e) {
			w->err = e;
			break;
		}
		pthread_mutex_lock(&g.lock);
		for (unsigned int i = 0; i < n; i++) {
			if (!set_add(dma[i] >> 12))
				g.bad++; /* reissued while mapped or not yet invalidated */
			if (g.npool < POOLN && rnd(&seed) % 2)
				g.pool[g.npool++] = dma[i]; /* for anyone */
			else if (nmine < BULK)
				mine[nmine++] = dma[i];
			else
				un[k++] = dma[i]; /* no room: unmapped this round */
		}
		/* unmap: some of ours, some of the pool's (others' maps) */
		while (k < BULK && nmine)
			un[k++] = mine[--nmine];
		while (k < 2 * BULK && g.npool && rnd(&seed) % 4)
			un[k++] = g.pool[--g.npool];
		pthread_mutex_unlock(&g.lock);
		dg_dma_batch_begin(dd, &b);
		for (unsigned int i = 0, m; i < k && !e; i += m) {
			m = k - i < 4 ? k - i : 4;
			if (rnd(&seed) % 2)
				e = dg_dma_unmap_bulk(dd, un + i, m, 64, DG_DMA_TO_DEVICE, 0, &b);
			else
				for (unsigned int j = 0; j < m && !e; j++)
					e = dg_dma_unmap_single(dd, un[i + j], 64, DG_DMA_TO_DEVICE,
								0, &b);
			if (!e && rnd(&seed) % 8 == 0)
				e = dg_dma_batch_submit(&b);
		}
		pthread_mutex_lock(&g.lock); /* the end begins: from now on they may come back */
		for (unsigned int i = 0; i < k; i++)
			set_mark(un[i] >> 12, ENDING);
		pthread_mutex_unlock(&g.lock);
		if (!e)
			e = dg_dma_batch_end(&b);
		else
			dg_dma_batch_end(&b);
		if (e) {
			w->err = e;
			break;
		}
		pthread_mutex_lock(&g.lock); /* ended */
		for (unsigned int i = 0; i < k; i++)
			set_del(un[i] >> 12);
		pthread_mutex_unlock(&g.lock);
	}
	pthread_mutex_lock(&g.lock);
	while (nmine && g.npool < POOLN)
		g.pool[g.npool++] = mine[--nmine];
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned int nt = argc > 1 ? (unsigned int)atoi(argv[1]) : 3;
	unsigned int rounds = argc > 2 ? (unsigned int)atoi(argv[2]) : 2000;
	struct worker w[MAXT];
	pthread_t th[MAXT];
	struct dma_fixture f;
	int fails = 0;

	if (nt < 1 || nt > MAXT)
		nt = 3;
	page = aligned_alloc(4096, 4096);
	if (!page || fixture_init(&f, false, 0))
		return 1;
	dd = fixture_idle_dev(&f, 1, DG_DMA_STRICT, false, NULL);
	if (!dd || !dd->sp->cspan) {
		fprintf(stderr, "no strict device with streams\n");
		return 1;
	}
	for (unsigned int i = 0; i < nt; i++) {
		w[i] = (struct worker){.id = i, .rounds = rounds};
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (unsigned int i = 0; i < nt; i++) {
		pthread_join(th[i], NULL);
		if (w[i].err) {
			fprintf(stderr, "thread %u: error %d\n", i, w[i].err);
			fails++;
		}
	}
	/* the rest of the pool */
	for (unsigned int i = 0; i < g.npool; i++)
		if (dg_dma_unmap_single(dd, g.pool[i], 64, DG_DMA_TO_DEVICE, 0, NULL)) {
			fprintf(stderr, "final unmap failed\n");
			fails++;
		}
	if (g.bad) {
		fprintf(stderr, "%u IOVAs reissued before their invalidation\n", g.bad);
		fails++;
	}
	if (dg_dma_dev_check(dd, stderr)) {
		fprintf(stderr, "dg_dma_dev_check failed\n");
		fails++;
	}
	if (atomic_load(&dd->sp->chunk_gets) <= dd->sp->nchunks) {
		fprintf(stderr, "no chunk was reused (%u chunks)\n", dd->sp->nchunks);
		fails++;
	}
	printf("stress_dma_stream: %u threads x %u rounds, %" PRIu64 " chunk gets, %u chunks: %s\n",
	       nt, rounds, atomic_load(&dd->sp->chunk_gets), dd->sp->nchunks,
	       fails ? "FAIL" : "ok");
	fixture_dev_destroy(dd);
	fixture_fini(&f);
	free(page);
	return fails ? 1 : 0;
}
