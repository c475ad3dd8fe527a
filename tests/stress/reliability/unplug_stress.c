/* SPDX-License-Identifier: MIT */
/*
 * Surprise removal under load (issue 8, "a device that disappears mid-DMA"), with threads:
 *
 *   driver A <-> device A        driver B <-> device B        main: the hot-plug handler
 *
 * Each driver maps a from-device buffer, posts it to its device thread, waits for the
 * completion, unmaps and checks the data, over and over. After ITERS descriptors device A's
 * thread translates the next one (holding the sg list, online) and exits without completing:
 * the device is gone mid-DMA. Every invalidation wait in the IOMMU now waits for A - device
 * B's unmaps too - until the hot-plug handler, having joined A's thread (so no call on A can
 * run), takes A offline on its behalf after a detection delay. Then A's driver unmaps what
 * it had posted and tears A down, and B goes on: ITERS more descriptors.
 *
 * Asserted: every completed descriptor's data arrived; A's teardown succeeds; B's unmaps
 * after the unplug all succeed; nothing is left quarantined or mapped and B's structures
 * check out. Waits give up after 1 s, far beyond the detection delay, so a B unmap caught in
 * the outage simply waits for the unplug (-ETIMEDOUT there would also be handled: the
 * buffer is kept aside until confirmed). Runs under ThreadSanitizer in make test.
 *
 * Usage: stress_unplug [ITERS]
 */
#include <dmaguard/dma.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN  4096u
#define RING 32u

#define CHECK(c)                                                                                \
	do {                                                                                    \
		if (!(c)) {                                                                     \
			fprintf(stderr, "stress_unplug: %s failed at line %d\n", #c, __LINE__); \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

struct side {
	const char *name;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	uint8_t *buf[RING];
	bool aside[RING];	/* unmap said -ETIMEDOUT: keep until confirmed (driver only) */
	_Atomic uint64_t desc;	/* posted DMA address, 0 = none; release/acquire handoff */
	_Atomic int status;	/* the device's result for the last descriptor */
	_Atomic bool stop;	/* driver -> device: no more descriptors */
	unsigned int vanish_at; /* device: vanish at this descriptor (0 = never) */
	unsigned int served;	/* device thread only */
	unsigned int timeouts;	/* driver only: unmaps that returned -ETIMEDOUT */
	unsigned int after_ok;	/* driver only: successful unmaps after the unplug */
	unsigned int completed; /* driver only */
	uint64_t unmap_max_ns;	/* driver only: longest unmap (the outage shows here) */
	pthread_t dev_thread, drv_thread;
};

static struct dg_iommu *mmu;
static struct dg_dma *dma;
static struct side A = {.name = "A"}, B = {.name = "B"};
static _Atomic bool a_unplugged; /* main -> drivers: A is offline for good */
static unsigned int iters = 300;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pattern(uint8_t *p, uint64_t tag)
{
	for (unsigned int i = 0; i < LEN; i += 8)
		memcpy(p + i, &tag, 8);
}

static void *device_main(void *arg)
{
	struct side *s = arg;
	uint8_t data[LEN];
	bool idle = false;

	for (;;) {
		/* Acquire pairs with the driver's release store of desc: the mapping exists. */
		uint64_t d = atomic_load_explicit(&s->desc, memory_order_acquire);
		struct dg_sg sg[2];
		unsigned int nr;

		if (!d) {
			if (atomic_load_explicit(&s->stop, memory_order_relaxed))
				break;
			if (!idle)
				dg_dev_offline(s->dev); /* between bursts: never hold up a wait */
			idle = true;
			sched_yield();
			continue;
		}
		idle = false;
		if (s->vanish_at && s->served == s->vanish_at) {
			/* mid-DMA: translated, holding, online - and gone */
			CHECK(dg_dev_translate(s->dev, d, LEN, DG_ACCESS_WRITE, sg, 2, &nr) == 0);
			return NULL;
		}
		pattern(data, d ^ s->served);
		atomic_store_explicit(&s->status, dg_dev_write(s->dev, d, data, LEN),
				      memory_order_relaxed);
		s->served++;
		/* Release pairs with the driver's acquire load: the data and status are written. */
		atomic_store_explicit(&s->desc, 0, memory_order_release);
	}
	dg_dev_offline(s->dev);
	return NULL;
}

/* Wait until nothing of @s is quarantined any more, then release the buffers kept aside. */
static void wait_confirmed(struct side *s)
{
	struct dg_dma_stats st;

	for (;;) {
		CHECK(dg_dma_dev_stats(s->dd, &st) == 0);
		if (!st.quarantined)
			break;
		dg_dma_housekeep(dma);
		sched_yield();
	}
	memset(s->aside, 0, sizeof(s->aside));
}

static void *driver_main(void *arg)
{
	struct side *s = arg;
	unsigned int after = 0;
	uint8_t want[LEN];

	for (unsigned int it = 0;; it++) {
		unsigned int slot = it % RING;
		/* Acquire pairs with the handler's release store: A is offline. */
		bool unplugged = atomic_load_explicit(&a_unplugged, memory_order_acquire);
		uint64_t d;
		int r;

		if (s == &B && unplugged && ++after > iters)
			break;
		if (s->aside[slot])
			wait_confirmed(s);
		memset(s->buf[slot], 0, LEN);
		CHECK(dg_dma_map_single(s->dd, s->buf[slot], LEN, DG_DMA_FROM_DEVICE, 0, &d) == 0);
		/* Release pairs with the device's acquire load of desc. */
		atomic_store_explicit(&s->desc, d, memory_order_release);
		/* Acquire pairs with the device's release store of desc = 0. */
		while (atomic_load_explicit(&s->desc, memory_order_acquire)) {
			/* A: the device never completes; wait for the hot-plug handler (acquire
			   pairs with its release store: A is offline). */
			if (s == &A && atomic_load_explicit(&a_unplugged, memory_order_acquire))
				break;
			sched_yield();
		}
		if (atomic_load_explicit(&s->desc, memory_order_relaxed)) {
			/* unplugged with a descriptor outstanding: A is offline, the unmap completes */
			CHECK(dg_dma_unmap_single(s->dd, d, LEN, DG_DMA_FROM_DEVICE, 0, NULL) == 0);
			break;
		}
		CHECK(atomic_load_explicit(&s->status, memory_order_relaxed) == 0);
		uint64_t t0 = now_ns();
		r = dg_dma_unmap_single(s->dd, d, LEN, DG_DMA_FROM_DEVICE, 0, NULL);
		if (now_ns() - t0 > s->unmap_max_ns)
			s->unmap_max_ns = now_ns() - t0;
		CHECK(r == 0 || r == -ETIMEDOUT);
		if (r == -ETIMEDOUT) {
			s->timeouts++;
			s->aside[slot] = true;
		}
		if (unplugged && r == 0)
			s->after_ok++;
		pattern(want, d ^ s->completed);
		CHECK(memcmp(want, s->buf[slot], LEN) == 0);
		s->completed++;
	}
	atomic_store_explicit(&s->stop, true, memory_order_relaxed);
	return NULL;
}

static void side_init(struct side *s, uint32_t rid)
{
	struct dg_dma_dev_config c;

	s->dev = dg_device_create(mmu, rid);
	CHECK(s->dev);
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_STRICT;
	s->dd = dg_dma_dev_create(dma, s->dev, &c);
	CHECK(s->dd);
	for (unsigned int i = 0; i < RING; i++) {
		s->buf[i] = aligned_alloc(4096, LEN);
		CHECK(s->buf[i]);
	}
	atomic_init(&s->desc, 0);
	atomic_init(&s->status, 0);
	atomic_init(&s->stop, false);
}

static void side_fini(struct side *s)
{
	struct dg_dma_stats st;

	wait_confirmed(s);
	CHECK(dg_dma_dev_stats(s->dd, &st) == 0);
	CHECK(st.live == 0 && st.quarantined == 0);
	CHECK(dg_dma_dev_check(s->dd, stderr) == 0);
	CHECK(dg_dma_dev_destroy(s->dd) == 0);
	dg_device_destroy(s->dev);
	for (unsigned int i = 0; i < RING; i++)
		free(s->buf[i]);
}

int main(int argc, char **argv)
{
	struct timespec detect = {.tv_nsec = 30000000}; /* the handler notices after 30 ms */
	struct dg_iommu_config ic;

	if (argc > 1)
		iters = (unsigned int)strtoul(argv[1], NULL, 0);
	CHECK(iters > 0);
	dg_iommu_config_init(&ic);
	ic.wait_timeout_ns = 1000000000ull;
	ic.log = NULL;
	mmu = dg_iommu_create(&ic);
	CHECK(mmu);
	dma = dg_dma_create(mmu, NULL);
	CHECK(dma);
	side_init(&A, 0xa);
	side_init(&B, 0xb);
	A.vanish_at = iters;
	atomic_init(&a_unplugged, false);
	CHECK(pthread_create(&A.dev_thread, NULL, device_main, &A) == 0);
	CHECK(pthread_create(&B.dev_thread, NULL, device_main, &B) == 0);
	CHECK(pthread_create(&A.drv_thread, NULL, driver_main, &A) == 0);
	CHECK(pthread_create(&B.drv_thread, NULL, driver_main, &B) == 0);

	/* The hot-plug handler: A's thread is gone (joined: no call on A runs any more). */
	CHECK(pthread_join(A.dev_thread, NULL) == 0);
	nanosleep(&detect, NULL);
	dg_dev_offline(A.dev);
	/* Release pairs with the drivers' acquire loads: A is offline. */
	atomic_store_explicit(&a_unplugged, true, memory_order_release);

	CHECK(pthread_join(A.drv_thread, NULL) == 0);
	CHECK(A.completed == iters);
	CHECK(A.timeouts == 0);
	side_fini(&A); /* A's teardown after the surprise removal */

	CHECK(pthread_join(B.drv_thread, NULL) == 0);
	CHECK(pthread_join(B.dev_thread, NULL) == 0);
	CHECK(B.after_ok == iters); /* normal service once A is gone */
	side_fini(&B);
	CHECK(dg_dma_destroy(dma) == 0);
	dg_iommu_destroy(mmu);
	printf("stress_unplug: A served %u then vanished; B completed %u (longest unmap %.1f ms, "
	       "%u timed out; the %u after the unplug all succeeded)\n",
	       A.completed, B.completed, B.unmap_max_ns / 1e6, B.timeouts, B.after_ok);
	return 0;
}
