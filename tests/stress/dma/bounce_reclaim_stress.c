/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the bounce policy's reclaim of cached slots (src/dma/bounce.c, "Reclaim"):
 * exact fits of a direction's whole capacity by threads whose stacks hold each other's slots.
 * Also runs under ThreadSanitizer.
 *
 *   stress_dma_bounce_reclaim THREADS ROUNDS
 *
 * The capacity of each direction is measured first (whole-area slots until -ENOSPC). Every
 * round picks a direction and a slot size (64 B .. 4 KiB: the per-thread stacks and the
 * locked path), so the direction holds exactly C slots, and splits C at random among the
 * threads. Each thread maps its share (single maps and bulk maps), then a few times unmaps a
 * random part of it (onto its own stack) and maps as many again, then unmaps everything.
 * The live slots of all threads never exceed C, so EVERY map must succeed: a map may find the
 * areas dry only while slots sit on other threads' stacks (or are being given back), and must
 * get them back rather than fail - the threads are mapping, unmapping and refilling their
 * stacks on the same areas at the same time, so the thief's steal meets owners inside their
 * caches, and two threads meet at the last free slots (the exact-fit race).
 *
 * Bidirectional rounds fill each buffer with a pattern unique to the mapping and check it
 * after the unmap's copy back (two live mappings sharing a slot would swap patterns), and
 * every map claims the address it got in a table of live mappings (hold(): a slot handed out
 * twice is seen at the second map, whatever the direction). At the end of every round (all
 * threads between two barriers) in_use is 0, the structure check holds (every slot in exactly
 * one place: a free list, a quick cache, a stack) and, every few rounds, every area gives its
 * whole-area slot again: nothing lost.
 *
 * After each round a churn (see churn()) makes steals meet owners inside their caches on
 * purpose: one thread maps 4 KiB slots (no stack) while the others map and unmap small slots
 * on their stacks, nearly every 4 KiB block filled by slots kept mapped or cached, so nearly
 * every one of its maps steals the stacks the owners are working on that moment. The exact
 * fits alone steal only at a round's edges and rarely met an owner inside (a thief that did
 * not wait for the owner to leave passed them in release builds).
 */
#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../test_rand.h"
#include "race_world.h"

#define MAX_THREADS 8
#define AREA	    (256u << 10)
#define MAX_AREAS   64
#define BULK	    16

static const size_t sizes[] = {64, 256, 2048, 4096, 128, 1024};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static struct dg_dma_dev *dd;
static struct dg_device *dev;
static unsigned int nthreads, rounds;
static unsigned int nareas[3]; /* whole-area slots per direction */
static pthread_barrier_t bar;
static _Atomic unsigned int failed;
/* Who holds each 64-byte unit of the areas' IOVA range: the tag of the live mapping that
 * starts there, 0 when none does (a map claims it by compare-and-swap, an unmap clears it
 * before the call). A slot handed out twice - to two maps, or to a map while its last owner
 * still holds it - finds the unit claimed. */
static uint64_t iova_lo, iova_hi;
static _Atomic uint32_t *holder;

/* the current round's plan (written by thread 0 between barriers) */
static enum dg_dma_dir r_dir;
static size_t r_len;
static unsigned int r_share[MAX_THREADS];
/* the round's churn (see churn(), written by thread 0 between barriers) */
static unsigned int r_keep[MAX_THREADS]; /* 4 KiB slots each thread keeps mapped */
static unsigned int r_thief;		 /* the thread that maps 4 KiB slots */
static atomic_bool thief_done;
/* the thief's maps a round; fewer under ThreadSanitizer (ten times slower, and it sees an
 * owner and a thief inside at once as a data race on the stack without needing many) */
#if defined(__SANITIZE_THREAD__)
#define CHURN 300
#else
#define CHURN 1000
#endif
#define CHURN_MAX BULK /* an owner's live slots at most */

/* Buffers [0, n) of one size: their addresses, patterns and memory (len apart). */
struct share {
	uint64_t *dma;
	uint32_t *tag;
	uint8_t *mem;
	size_t len;
};

struct worker {
	pthread_t thr;
	unsigned int id;
	uint64_t seed;
	struct share big;      /* the round's share, the churn's kept slots */
	struct share side;     /* the churn's own slots (CHURN_MAX, 4 KiB at most) */
	unsigned long refused; /* churn maps refused (-ENOSPC), see churn() */
};

static struct worker w[MAX_THREADS];
static _Atomic uint32_t next_tag = 1;

static void fail(const char *what, unsigned int id, long v)
{
	fprintf(stderr, "stress_dma_bounce_reclaim: thread %u: %s (%ld)\n", id, what, v);
	atomic_fetch_add(&failed, 1);
}

/* A map returned @dma for the mapping @tag: claim its unit (no other live mapping there). */
static void hold(unsigned int id, uint64_t dma, uint32_t tag)
{
	uint32_t none = 0;

	if (dma < iova_lo || dma >= iova_hi || (dma & 63)) {
		fail("a map returned an address outside the areas", id, (long)(dma - iova_lo));
		return;
	}
	if (!atomic_compare_exchange_strong(&holder[(dma - iova_lo) >> 6], &none, tag))
		fail("a slot handed out twice (two live mappings at one address)", id,
		     (long)(dma - iova_lo));
}

/* About to unmap @dma (the mapping @tag): give its unit up. */
static void unhold(unsigned int id, uint64_t dma, uint32_t tag)
{
	uint32_t mine = tag;

	if (dma < iova_lo || dma >= iova_hi)
		return;
	if (!atomic_compare_exchange_strong(&holder[(dma - iova_lo) >> 6], &mine, 0))
		fail("a live mapping's slot was handed to another", id, (long)(dma - iova_lo));
}

static uint8_t pat(uint32_t tag, size_t i)
{
	return (uint8_t)(tag * 131u + i * 7u + 1u);
}

/* Map buffers [from, to) of @sh (single or bulk at random); returns where it stopped (@to,
 * or the first buffer a map refused: a failure, or when @may_run_dry a -ENOSPC counted). */
static unsigned int map_range(struct worker *k, struct share *sh, unsigned int from,
			      unsigned int to, bool may_run_dry)
{
	unsigned int i = from;

	while (i < to) {
		unsigned int m = 1 + (unsigned int)(xorshift64(&k->seed) % BULK);
		void *bufs[BULK];
		int r;

		if (m > to - i)
			m = to - i;
		for (unsigned int j = 0; j < m; j++) {
			uint8_t *b = sh->mem + (size_t)(i + j) * sh->len;

			sh->tag[i + j] =
				atomic_fetch_add_explicit(&next_tag, 1, memory_order_relaxed);
			if (r_dir == DG_DMA_BIDIRECTIONAL)
				for (size_t x = 0; x < sh->len; x++)
					b[x] = pat(sh->tag[i + j], x);
			bufs[j] = b;
		}
		if (m == 1)
			r = dg_dma_map_single(dd, bufs[0], sh->len, r_dir, 0, &sh->dma[i]);
		else
			r = dg_dma_map_bulk(dd, bufs, m, sh->len, r_dir, 0, &sh->dma[i]);
		if (r == -ENOSPC && may_run_dry) {
			k->refused++;
			return i;
		}
		if (r) {
			fail(m == 1 ? "map_single refused with capacity left" :
				      "map_bulk refused with capacity left",
			     k->id, r);
			return i;
		}
		for (unsigned int j = 0; j < m; j++)
			hold(k->id, sh->dma[i + j], sh->tag[i + j]);
		i += m;
	}
	return to;
}

static void unmap_one(struct worker *k, struct share *sh, unsigned int i)
{
	int r;

	unhold(k->id, sh->dma[i], sh->tag[i]);
	r = dg_dma_unmap_single(dd, sh->dma[i], sh->len, r_dir, 0, NULL);

	if (r) {
		fail("unmap", k->id, r);
		return;
	}
	if (r_dir == DG_DMA_BIDIRECTIONAL) {
		const uint8_t *b = sh->mem + (size_t)i * sh->len;

		for (size_t x = 0; x < sh->len; x++)
			if (b[x] != pat(sh->tag[i], x)) {
				fail("a buffer came back with another mapping's bytes", k->id,
				     (long)x);
				return;
			}
	}
}

static void plan_round(unsigned int round)
{
	uint64_t s = 0x2545f4914f6cdd1dull ^ round;
	unsigned int cap, left;

	r_dir = (enum dg_dma_dir)(round % 3);
	r_len = sizes[(round / 3) % NSIZES];
	cap = (unsigned int)((uint64_t)nareas[r_dir] * AREA / r_len);
	left = cap;
	for (unsigned int t = 0; t + 1 < nthreads; t++) {
		/* uneven: one thread may take most, so stacks hold what others need */
		r_share[t] = (unsigned int)(xorshift64(&s) % (left + 1));
		left -= r_share[t];
	}
	r_share[nthreads - 1] = left;
}

/* The churn after a round: the same direction; one thread (the thief, a different one each
 * round) maps 4 KiB slots (the locked path: no stack), the others slots of the stacks' sizes;
 * all but a block a thread kept mapped in 4 KiB slots (split at random among the threads). */
static void plan_churn(unsigned int round)
{
	uint64_t s = 0x9e3779b97f4a7c15ull ^ round;
	unsigned int blocks, left, spare;

	r_thief = round % nthreads;
	blocks = (unsigned int)((uint64_t)nareas[r_dir] * AREA / 4096);
	/* a block a thread: fewer than the owners' stacks take (one refill of 64 B slots takes
	 * two, and they refill six sizes), so the thief's maps find the areas dry */
	spare = nthreads;
	left = blocks - spare;
	for (unsigned int t = 0; t + 1 < nthreads; t++) {
		r_keep[t] = (unsigned int)(xorshift64(&s) % (left + 1));
		left -= r_keep[t];
	}
	r_keep[nthreads - 1] = left;
	atomic_store(&thief_done, false);
}

/*
 * The churn: keep r_keep[id] 4 KiB slots mapped; then the thief maps and unmaps one 4 KiB slot
 * CHURN times while the others (the owners) map and unmap 1 to CHURN_MAX slots of a random
 * stack size (64 B .. 2 KiB) until it is done. Their stacks of six sizes take up the few free
 * blocks as fast as steals give them back, so nearly every map of the thief finds the areas
 * dry and steals the owners' stacks while the owners pop, push, refill and spill on them
 * (inside their caches, or preempted there: 2 CPUs); an owner that runs dry steals in turn.
 * A thief that did not wait for an owner to leave its cache (iova_steal_wait) gives back a
 * slot the owner is popping (handed out twice: hold() sees it at once), one an owner's spill
 * gives back too, or sets a depth the owner's refill just set to 0 (slots lost: the round's
 * check, check_whole() or the destroy sees it). On this 2-vCPU VM (session 14, loaded by
 * other builds) that caught it in 5 runs of 5 of a release build (3 threads x 48 rounds;
 * 0.2-0.9 s) where the rounds alone caught 0 of 3; ThreadSanitizer in 5 of 5 either way. The
 * live
 * slots need not fit in the free blocks (an owner's slots scatter over more blocks than
 * packed ones fill, and stacks refilled as fast as steals empty them bound a map's reclaims
 * at AREA_ROUNDS), so a map here may find no room: -ENOSPC is counted, not failed (the exact
 * fits of the rounds are where every map must succeed).
 */
static void churn(struct worker *k)
{
	unsigned int keep;

	k->big.len = 4096;
	keep = map_range(k, &k->big, 0, r_keep[k->id], false);
	pthread_barrier_wait(&bar); /* every kept slot mapped: now only the spare blocks are free */
	if (k->id == r_thief) {
		k->side.len = 4096;
		for (unsigned int c = 0; c < CHURN && !atomic_load(&failed); c++)
			if (map_range(k, &k->side, 0, 1, true))
				unmap_one(k, &k->side, 0);
		atomic_store(&thief_done, true);
	} else {
		while (!atomic_load_explicit(&thief_done, memory_order_relaxed) &&
		       !atomic_load(&failed)) {
			unsigned int m = 1 + (unsigned int)(xorshift64(&k->seed) % CHURN_MAX);

			k->side.len = (size_t)64 << (xorshift64(&k->seed) % 6);
			m = map_range(k, &k->side, 0, m, true);
			for (unsigned int i = 0; i < m; i++)
				unmap_one(k, &k->side, i);
		}
	}
	for (unsigned int i = 0; i < keep; i++)
		unmap_one(k, &k->big, i);
}

static void check_round(unsigned int round)
{
	struct dg_dma_stats st;

	if (dg_dma_dev_stats(dd, &st) || st.bounce_in_use)
		fail("in_use not 0 at a round's end", 0, (long)st.bounce_in_use);
	if (dg_dma_dev_check(dd, stderr))
		fail("dg_dma_dev_check", 0, (long)round);
}

/* Every area of every direction gives its whole-area slot: nothing is lost anywhere. */
static void check_whole(void)
{
	static uint8_t big[AREA];

	for (unsigned int d = 0; d < 3; d++) {
		uint64_t a[MAX_AREAS];
		unsigned int n = 0;

		while (n < MAX_AREAS &&
		       dg_dma_map_single(dd, big, AREA, (enum dg_dma_dir)d, 0, &a[n]) == 0)
			n++;
		if (n != nareas[d])
			fail("whole areas lost", 0, (long)n);
		for (unsigned int i = 0; i < n; i++)
			if (dg_dma_unmap_single(dd, a[i], AREA, (enum dg_dma_dir)d, 0, NULL))
				fail("unmap of a whole area", 0, (long)i);
	}
}

static void *run(void *p)
{
	struct worker *k = p;

	for (unsigned int round = 0; round < rounds; round++) {
		unsigned int share;

		if (k->id == 0)
			plan_round(round);
		pthread_barrier_wait(&bar);
		share = r_share[k->id];
		k->big.len = r_len;
		share = map_range(k, &k->big, 0, share, false);
		for (unsigned int again = 0; again < 3 && share; again++) {
			unsigned int from = (unsigned int)(xorshift64(&k->seed) % share);

			for (unsigned int i = from; i < share; i++)
				unmap_one(k, &k->big, i);
			share = map_range(k, &k->big, from, share, false);
		}
		for (unsigned int i = 0; i < share; i++)
			unmap_one(k, &k->big, i);
		pthread_barrier_wait(&bar); /* no call runs until the next barrier */
		if (k->id == 0) {
			check_round(round);
			if (round % 8 == 7)
				check_whole();
		}
		pthread_barrier_wait(&bar);
		if (k->id == 0)
			plan_churn(round);
		pthread_barrier_wait(&bar);
		churn(k);
		pthread_barrier_wait(&bar);
		if (k->id == 0)
			check_round(round);
		pthread_barrier_wait(&bar);
		if (atomic_load(&failed))
			break;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct race_world rw;
	struct dg_dma_dev_config c;
	unsigned int maxcap = 0, maxareas = 0;
	unsigned long refused = 0;

	nthreads = argc > 1 ? (unsigned int)atoi(argv[1]) : 3;
	rounds = argc > 2 ? (unsigned int)atoi(argv[2]) : 48;
	if (nthreads < 2 || nthreads > MAX_THREADS) {
		fprintf(stderr, "usage: stress_dma_bounce_reclaim THREADS(2..8) ROUNDS\n");
		return 2;
	}
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_BOUNCE;
	c.bounce.area_size = AREA;
	if (race_world_open_cfg(&rw, &c, true, true))
		return 1;
	dd = rw.dd;
	dev = rw.dev;
	for (unsigned int d = 0; d < 3; d++) {
		static uint8_t big[AREA];
		uint64_t a[MAX_AREAS];

		while (nareas[d] < MAX_AREAS &&
		       dg_dma_map_single(dd, big, AREA, (enum dg_dma_dir)d, 0, &a[nareas[d]]) == 0)
			nareas[d]++;
		for (unsigned int i = 0; i < nareas[d]; i++) {
			if (!iova_hi || a[i] < iova_lo)
				iova_lo = a[i];
			if (a[i] + AREA > iova_hi)
				iova_hi = a[i] + AREA;
			dg_dma_unmap_single(dd, a[i], AREA, (enum dg_dma_dir)d, 0, NULL);
		}
		if (!nareas[d])
			return 1;
		if (nareas[d] * (AREA / 64) > maxcap)
			maxcap = nareas[d] * (AREA / 64);
		if (nareas[d] > maxareas)
			maxareas = nareas[d];
	}
	holder = calloc((iova_hi - iova_lo) >> 6, sizeof(*holder));
	if (!holder || pthread_barrier_init(&bar, NULL, nthreads))
		return 1;
	for (unsigned int i = 0; i < nthreads; i++) {
		w[i].id = i;
		w[i].seed = 0x9e3779b97f4a7c15ull * (i + 1);
		w[i].big.dma = calloc(maxcap, sizeof(*w[i].big.dma));
		w[i].big.tag = calloc(maxcap, sizeof(*w[i].big.tag));
		w[i].big.mem =
			malloc((size_t)maxareas * AREA); /* a share's buffers, back to back */
		w[i].side.dma = calloc(CHURN_MAX, sizeof(*w[i].side.dma));
		w[i].side.tag = calloc(CHURN_MAX, sizeof(*w[i].side.tag));
		w[i].side.mem = malloc((size_t)CHURN_MAX * 4096);
		if (!w[i].big.dma || !w[i].big.tag || !w[i].big.mem || !w[i].side.dma ||
		    !w[i].side.tag || !w[i].side.mem)
			return 1;
	}
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_create(&w[i].thr, NULL, run, &w[i]);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_join(w[i].thr, NULL);
	/* the workers exited: their stacks went back, every area whole */
	check_round(rounds);
	check_whole();
	if (race_world_close(&rw))
		fail("destroy (a leak or an open batch)", 0, 0);
	for (unsigned int i = 0; i < nthreads; i++) {
		refused += w[i].refused;
		free(w[i].big.dma);
		free(w[i].big.tag);
		free(w[i].big.mem);
		free(w[i].side.dma);
		free(w[i].side.tag);
		free(w[i].side.mem);
	}
	free(holder);
	if (atomic_load(&failed))
		return 1;
	printf("stress_dma_bounce_reclaim: %u threads x %u rounds (%u thief maps each, %lu churn "
	       "maps refused): ok\n",
	       nthreads, rounds, CHURN, refused);
	return 0;
}
