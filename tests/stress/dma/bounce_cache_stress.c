/* SPDX-License-Identifier: MIT */
/*
 * Stress test of the bounce policy's per-thread slot stacks (src/dma/bounce.c); also runs
 * under ThreadSanitizer.
 *
 *   stress_dma_bounce_cache THREADS ITERATIONS
 *
 * Every thread maps small bidirectional buffers (64 B .. 2 KiB, so every stack is exercised)
 * filled with a pattern unique to the mapping, and posts half of them to the next thread's
 * inbox; each thread unmaps what it kept and what it received. A bidirectional unmap copies
 * the slot back into the buffer, so if two live mappings ever shared a slot, or a slot were
 * handed out while still live, the buffer would come back with another mapping's pattern.
 * Cross-thread unmaps make every stack fill and spill slots of other threads' refills; the
 * structure check runs at the end, and in_use must be back to zero.
 *
 * A third of the mappings are receives instead (from-device with DG_DMA_ATTR_SKIP_CPU_SYNC,
 * the leaf fast path: the device writes the pattern, the unmapping thread syncs the first 64
 * bytes - the inline copy - then the rest, and unmaps without a copy) and a third are sends
 * (to-device: the device must read the pattern and zeros past it, whichever thread's stack the
 * slot came from and however long its previous buffer was). The device is one agent: its
 * accesses are serialized by a lock.
 *
 * Every other round also maps a group of up to BULK buffers of one length and mode with one
 * dg_dma_map_bulk() (the device checks each as above) and unmaps them with one
 * dg_dma_unmap_bulk(), half the time into a batch (whose end gives the chained slots back):
 * the bulk paths' pops, claims and pushes interleave with the other threads' single calls on
 * the same areas.
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
#define PER_ROUND   48 /* mappings per thread per round */
#define BUF_BYTES   2048
#define INBOX	    (2 * PER_ROUND)
#define BULK	    24 /* buffers of a bulk group at most */

enum { MODE_BIDI, MODE_RX, MODE_TX };

struct item {
	uint64_t dma;
	uint32_t len;
	uint32_t tag;
	uint8_t *buf;
	unsigned int mode;
};

static const enum dg_dma_dir mode_dir[] = {DG_DMA_BIDIRECTIONAL, DG_DMA_FROM_DEVICE,
					   DG_DMA_TO_DEVICE};
static const unsigned int mode_attrs[] = {0, DG_DMA_ATTR_SKIP_CPU_SYNC, 0};

struct worker {
	pthread_t thr;
	unsigned int id;
	pthread_mutex_t lock; /* inbox */
	struct item inbox[INBOX];
	unsigned int nin;
	uint8_t *mem; /* PER_ROUND * 2 buffers of BUF_BYTES: own half, then received */
	uint64_t seed;
};

static struct dg_dma_dev *dd;
static struct dg_device *dev;
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER; /* one device agent */
static struct worker w[MAX_THREADS];
static unsigned int nthreads, iterations;
static _Atomic unsigned int failed;

static uint64_t rnd(uint64_t *s)
{
	return xorshift64(s);
}

static void fail(const char *what, unsigned int id, long v)
{
	if (!atomic_exchange(&failed, 1))
		fprintf(stderr, "stress_dma_bounce_cache: thread %u: %s (%ld)\n", id, what, v);
}

static uint32_t slot_len(uint32_t len)
{
	uint32_t s = 64;

	while (s < len)
		s <<= 1;
	return s;
}

/* What the device does with a new mapping: write a receive, check a send (and its padding). */
static void device_side(struct worker *me, const struct item *x)
{
	uint8_t tmp[BUF_BYTES];
	uint32_t sl = slot_len(x->len);
	int r = 0;

	if (x->mode == MODE_BIDI)
		return;
	pthread_mutex_lock(&dev_lock);
	if (x->mode == MODE_RX) {
		for (uint32_t k = 0; k < x->len; k++)
			tmp[k] = (uint8_t)(x->tag + k);
		r = dg_dev_write(dev, x->dma, tmp, x->len);
	} else {
		r = dg_dev_read(dev, x->dma, tmp, sl);
	}
	pthread_mutex_unlock(&dev_lock);
	if (r) {
		fail("device access", me->id, r);
		return;
	}
	for (uint32_t k = 0; x->mode == MODE_TX && k < sl; k++)
		if (tmp[k] != (k < x->len ? (uint8_t)(x->tag + k) : 0)) {
			fail("the device read another buffer's bytes", me->id, (long)k);
			return;
		}
}

/* A receive's sync before its unmap: the header (inline copy), then the rest. */
static int sync_rx(struct worker *me, const struct item *it)
{
	const uint32_t head = it->len < 64 ? it->len : 64;
	int r = 0;

	if (it->mode == MODE_RX) {
		r = dg_dma_sync_for_cpu(dd, it->dma, head, DG_DMA_FROM_DEVICE);
		if (!r && it->len > head)
			r = dg_dma_sync_for_cpu(dd, it->dma + head, it->len - head,
						DG_DMA_FROM_DEVICE);
		if (r)
			fail("sync", me->id, r);
	}
	return r;
}

/* After the unmap: the buffer holds its own mapping's bytes; freed. */
static void check_buf(struct worker *me, const struct item *it)
{
	for (uint32_t k = 0; k < it->len; k++)
		if (it->buf[k] != (uint8_t)(it->tag + k)) {
			fail("buffer came back with another mapping's data", me->id, (long)k);
			return;
		}
	free(it->buf);
}

static void check_and_unmap(struct worker *me, const struct item *it)
{
	int r;

	if (sync_rx(me, it))
		return;
	r = dg_dma_unmap_single(dd, it->dma, it->len, mode_dir[it->mode], mode_attrs[it->mode],
				NULL);
	if (r) {
		fail("unmap", me->id, r);
		return;
	}
	check_buf(me, it);
}

/* A bulk group: mapped with one call, checked by the device, unmapped with one call. */
static void bulk_round(struct worker *me)
{
	const unsigned int n = 1 + (unsigned int)(rnd(&me->seed) % BULK);
	const uint32_t len = 1 + (uint32_t)(rnd(&me->seed) % BUF_BYTES);
	const unsigned int mode = (unsigned int)(rnd(&me->seed) % 3);
	const bool batched = rnd(&me->seed) & 1;
	struct item x[BULK];
	void *bufs[BULK];
	uint64_t dma[BULK];
	struct dg_dma_batch b;
	unsigned int i;
	int r;

	for (i = 0; i < n; i++) {
		x[i].len = len;
		x[i].mode = mode;
		x[i].tag = (uint32_t)rnd(&me->seed);
		x[i].buf = bufs[i] = malloc(len);
		if (!x[i].buf) {
			fail("malloc", me->id, 0);
			goto out;
		}
		for (uint32_t k = 0; k < len; k++)
			x[i].buf[k] = (uint8_t)(mode == MODE_RX ? ~(x[i].tag + k) : x[i].tag + k);
	}
	r = dg_dma_map_bulk(dd, bufs, n, len, mode_dir[mode], mode_attrs[mode], dma);
	if (r) {
		if (r != -ENOSPC) /* the areas are small on purpose: then nothing is mapped */
			fail("map_bulk", me->id, r);
		goto out;
	}
	for (i = 0; i < n; i++) {
		x[i].dma = dma[i];
		device_side(me, &x[i]);
	}
	for (i = 0; i < n; i++)
		if (sync_rx(me, &x[i]))
			return;
	if (batched)
		dg_dma_batch_begin(dd, &b);
	r = dg_dma_unmap_bulk(dd, dma, n, len, mode_dir[mode], mode_attrs[mode],
			      batched ? &b : NULL);
	if (batched && dg_dma_batch_end(&b) && !r)
		r = -EIO;
	if (r) {
		fail("unmap_bulk", me->id, r);
		return;
	}
	for (i = 0; i < n; i++)
		check_buf(me, &x[i]);
	return;
out:
	while (i--)
		free(x[i].buf);
}

static void *run(void *p)
{
	struct worker *me = p, *next = &w[(me->id + 1) % nthreads];
	struct item mine[PER_ROUND], got[INBOX];

	for (unsigned int it = 0; it < iterations && !atomic_load(&failed); it++) {
		unsigned int nmine = 0, ngot;

		for (unsigned int i = 0; i < PER_ROUND; i++) {
			struct item x;
			int r;

			x.len = 1 + (uint32_t)(rnd(&me->seed) % BUF_BYTES);
			x.tag = (uint32_t)rnd(&me->seed);
			x.mode = (unsigned int)(rnd(&me->seed) % 3);
			x.buf = malloc(x.len);
			if (!x.buf) {
				fail("malloc", me->id, 0);
				break;
			}
			for (uint32_t k = 0; k < x.len; k++) /* a receive's buffer: stale bytes */
				x.buf[k] = (uint8_t)(x.mode == MODE_RX ? ~(x.tag + k) : x.tag + k);
			r = dg_dma_map_single(dd, x.buf, x.len, mode_dir[x.mode],
					      mode_attrs[x.mode], &x.dma);
			if (r) {
				if (r != -ENOSPC) /* the areas are small on purpose */
					fail("map", me->id, r);
				free(x.buf);
				break;
			}
			device_side(me, &x);
			if (i & 1) {
				pthread_mutex_lock(&next->lock);
				if (next->nin < INBOX) {
					next->inbox[next->nin++] = x;
					x.buf = NULL;
				}
				pthread_mutex_unlock(&next->lock);
			}
			if (x.buf)
				mine[nmine++] = x;
		}
		if (it & 1)
			bulk_round(me);
		for (unsigned int i = 0; i < nmine; i++)
			check_and_unmap(me, &mine[i]);
		pthread_mutex_lock(&me->lock);
		ngot = me->nin;
		memcpy(got, me->inbox, ngot * sizeof(got[0]));
		me->nin = 0;
		pthread_mutex_unlock(&me->lock);
		for (unsigned int i = 0; i < ngot; i++)
			check_and_unmap(me, &got[i]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct race_world rw;
	struct dg_dma_dev_config c;
	struct dg_dma_stats st;

	nthreads = argc > 1 ? (unsigned int)atoi(argv[1]) : 2;
	iterations = argc > 2 ? (unsigned int)atoi(argv[2]) : 200;
	if (nthreads < 1 || nthreads > MAX_THREADS) {
		fprintf(stderr, "usage: stress_dma_bounce_cache THREADS(1..8) ITERATIONS\n");
		return 2;
	}
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_BOUNCE;
	c.bounce.area_size = 256 << 10; /* small: refills, spills and dry areas happen */
	/* the device idle between its accesses: it never holds a wait */
	if (race_world_open_cfg(&rw, &c, true, true))
		return 1;
	dd = rw.dd;
	dev = rw.dev;
	for (unsigned int i = 0; i < nthreads; i++) {
		w[i].id = i;
		w[i].seed = 0x9e3779b97f4a7c15ull * (i + 1);
		pthread_mutex_init(&w[i].lock, NULL);
	}
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_create(&w[i].thr, NULL, run, &w[i]);
	for (unsigned int i = 0; i < nthreads; i++)
		pthread_join(w[i].thr, NULL);
	for (unsigned int i = 0; i < nthreads; i++) /* posted after the receiver finished */
		for (unsigned int k = 0; k < w[i].nin; k++)
			check_and_unmap(&w[i], &w[i].inbox[k]);
	if (dg_dma_dev_check(dd, stderr))
		fail("dg_dma_dev_check", 0, 0);
	if (dg_dma_dev_stats(dd, &st) || st.bounce_in_use || st.live)
		fail("slots still in use at the end", 0, (long)st.bounce_in_use);
	if (race_world_close(&rw))
		fail("destroy (a leak or an open batch)", 0, 0);
	if (atomic_load(&failed))
		return 1;
	printf("stress_dma_bounce_cache: %u threads x %u rounds: ok\n", nthreads, iterations);
	return 0;
}
