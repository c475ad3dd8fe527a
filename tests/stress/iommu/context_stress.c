/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/iommu/context_stress.c - context switches under DMA:
 *
 *   context_stress [ROUNDS [DEVICES]]
 *
 * Each round the CPU thread creates a domain that maps one IOVA read-only to a page holding
 * the round number, attaches every device to it, and destroys the previous domain (which must
 * succeed at once: every change away from it was confirmed). Device threads read the IOVA in a
 * loop, sometimes quiescing, sometimes going offline for a while. Checked: a device never sees
 * the round number go back (it never uses a context after the switch away from it was
 * confirmed), never reads a page of a destroyed domain (ASan: use after free; TSan: race with
 * the page's reuse), and only fails with -EPERM while blocked between rounds.
 */
#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define K4	4096u
#define IOVA	0x7000000ull
#define POOL	4
#define MAXDEVS 8

static struct dg_iommu *mmu;
static unsigned int ndevs;
static _Atomic int stop;
static _Atomic uint64_t round_no;

struct devstate {
	pthread_t thread;
	struct dg_device *dev;
	unsigned int idx;
	uint64_t reads, refused;
	_Atomic uint64_t seen; /* last round read */
};
static struct devstate devs[MAXDEVS];

static void die(const char *msg)
{
	fprintf(stderr, "context_stress: FAIL: %s\n", msg);
	exit(1);
}

static void *device_main(void *arg)
{
	struct devstate *ds = arg;
	uint64_t last = 0, n = 0;

	while (!atomic_load_explicit(&stop, memory_order_acquire)) {
		uint64_t v = 0;
		int err = dg_dev_read(ds->dev, IOVA, &v, sizeof(v));

		if (err == 0) {
			if (v < last)
				die("a device used a context after the switch away from it");
			if (v > atomic_load_explicit(&round_no, memory_order_acquire))
				die("read a round that does not exist yet");
			last = v;
			ds->reads++;
			atomic_store_explicit(&ds->seen, v, memory_order_release);
		} else if (err == -EPERM || err == -EFAULT) {
			ds->refused++; /* blocked at start, or between map and attach */
		} else {
			die("unexpected error");
		}
		switch (++n % 97) {
		case 0:
			dg_dev_offline(ds->dev);
			sched_yield();
			dg_dev_quiesce(ds->dev); /* offline: must not apply (or read a context) */
			break;
		case 50:
			dg_dev_quiesce(ds->dev);
			break;
		default:
			break;
		}
	}
	dg_dev_offline(ds->dev);
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned long rounds = argc > 1 ? strtoul(argv[1], NULL, 0) : 300;
	struct dg_iommu_config cfg;
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_domain *prev = NULL;
	uint8_t *pool;
	uint64_t reads = 0;
	time_t start = time(NULL);

	ndevs = argc > 2 ? (unsigned int)strtoul(argv[2], NULL, 0) : 2;
	if (!rounds || !ndevs || ndevs > MAXDEVS)
		die("usage: context_stress [ROUNDS [DEVICES<=8]]");
	dg_iommu_config_init(&cfg);
	cfg.wait_timeout_ns = 60ull * 1000 * 1000 * 1000;
	mmu = dg_iommu_create(&cfg);
	pool = aligned_alloc(K4, POOL * K4);
	if (!mmu || !pool)
		die("setup");
	memset(pool, 0, POOL * K4);
	for (unsigned int i = 0; i < ndevs; i++) {
		devs[i].idx = i;
		devs[i].dev = dg_device_create(mmu, 0x20 + i);
		if (!devs[i].dev)
			die("device");
	}
	for (unsigned int i = 0; i < ndevs; i++)
		if (pthread_create(&devs[i].thread, NULL, device_main, &devs[i]))
			die("thread");
	for (uint64_t r = 1; r <= rounds; r++) {
		uint8_t *page = pool + (r % POOL) * K4;
		struct dg_domain *dom;

		/* No device can reach this page: its last domain was destroyed POOL rounds ago. */
		memcpy(page, &r, sizeof(r));
		atomic_store_explicit(&round_no, r, memory_order_release);
		dom = dg_domain_create(mmu, &g, NULL, NULL);
		if (!dom ||
		    dg_domain_map(dom, IOVA, (uint64_t)(uintptr_t)page, K4, DG_PROT_READ, NULL))
			die("domain");
		for (unsigned int i = 0; i < ndevs; i++)
			if (dg_device_attach(devs[i].dev, dom))
				die("attach");
		/* A detour through blocked (not pass-through: the IOVA is no host address). */
		if (r % 16 == 0)
			for (unsigned int i = 0; i < ndevs; i++)
				if (dg_device_block(devs[i].dev) ||
				    dg_device_attach(devs[i].dev, dom))
					die("context detour");
		if (prev && dg_domain_destroy(prev))
			die("the previous domain is still referenced");
		prev = dom;
		/* Every device reads this round's page at least once. */
		for (unsigned int i = 0; i < ndevs; i++)
			while (atomic_load_explicit(&devs[i].seen, memory_order_acquire) != r) {
				if (time(NULL) - start > 120)
					die("deadline exceeded (stuck?)");
				sched_yield();
			}
	}
	atomic_store_explicit(&stop, 1, memory_order_release);
	for (unsigned int i = 0; i < ndevs; i++) {
		pthread_join(devs[i].thread, NULL);
		reads += devs[i].reads;
		if (dg_device_block(devs[i].dev))
			die("block");
		dg_device_destroy(devs[i].dev);
	}
	if (dg_domain_destroy(prev))
		die("last domain");
	dg_iommu_destroy(mmu);
	free(pool);
	if (!reads)
		die("no device ever read: the test did not test anything");
	printf("context_stress: %lu rounds, %u devices, %llu reads\n", rounds, ndevs,
	       (unsigned long long)reads);
	return 0;
}
