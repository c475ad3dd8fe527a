/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/iommu/security_stress.c - the security property under threads:
 *
 *   after dg_iommu_flush_gather() (unmap + invalidate + wait) returns, no device access can
 *   reach the unmapped memory.
 *
 *   security_stress [ROUNDS [DEVICES [flush|domain]]]
 *
 * With "domain" the unmapped page is not invalidated page-selectively before the check:
 * instead each round queues 8 DOMAIN, GLOBAL and DEVICE commands as one batch and waits,
 * so what must stop the devices is the generation bump (iommu/agent.c), and 150 rounds take
 * every device's cache tag through its wrap. The gather is released after the check.
 *
 * Device threads write to one IOVA in a loop: even ones with dg_dev_write (each call ends at
 * a quiescent point; device 0 also goes offline now and then), odd ones vhost style with
 * dg_dev_translate, a copy through the held sg list and dg_dev_quiesce. Each round the CPU thread maps the IOVA to a
 * fresh page, waits until every device has written through the mapping (so it is cached in
 * every IOTLB), unmaps it and flushes, snapshots the page, lets every device make several
 * more attempts, and compares: one byte changed after the wait is a failure. Under
 * ThreadSanitizer such a late write is also a reported data race with the snapshot. Every
 * attempt a device saw refused must appear as a fault record (or in the overflow count).
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

#define K4	 4096u
#define IOVA	 0x40000000ull
#define POOL	 8
#define MAXDEVS	 8
#define DEADLINE 120 /* seconds before a stuck test fails instead of hanging */

static struct dg_iommu *mmu;
static struct dg_domain *dom;
static uint8_t *pool;
static unsigned int ndevs;
static _Atomic int stop;
static _Atomic uint64_t round_no; /* the round whose mapping is live (0: none) */

struct devstate {
	pthread_t thread;
	struct dg_device *dev;
	unsigned int idx;
	_Atomic uint64_t attempts;    /* DMA calls made */
	_Atomic uint64_t wrote_round; /* last round it wrote through a live mapping */
	_Atomic uint64_t refused;     /* calls refused with -EFAULT */
	_Atomic uint64_t other;	      /* anything else (must stay 0) */
};
static struct devstate devs[MAXDEVS];

static void die(const char *msg)
{
	fprintf(stderr, "security_stress: FAIL: %s\n", msg);
	exit(1);
}

static time_t start_time;

static void check_deadline(void)
{
	if (time(NULL) - start_time > DEADLINE)
		die("deadline exceeded (stuck?)");
}

static void *device_main(void *arg)
{
	struct devstate *ds = arg;
	uint64_t n = 0;

	while (!atomic_load_explicit(&stop, memory_order_acquire)) {
		uint64_t r = atomic_load_explicit(&round_no, memory_order_acquire);
		uint64_t buf[8];
		int err;

		/* A value never written before: any write that lands changes the page. */
		for (unsigned int i = 0; i < 8; i++)
			buf[i] = (n + 1) << 8 | ds->idx;
		/* Each device writes its own part of the page (devices do not race each other). */
		uint64_t iova = IOVA + ds->idx * (K4 / MAXDEVS) + (n % 8) * 64;

		if (ds->idx % 2 == 0) {
			err = dg_dev_write(ds->dev, iova, buf, sizeof(buf));
		} else {
			/* vhost style: translate, copy through the held sg list, quiesce. */
			struct dg_sg sg[2];
			unsigned int nr = 0;

			uint64_t peek;

			err = dg_dev_translate(ds->dev, iova, sizeof(buf), DG_ACCESS_WRITE, sg, 2,
					       &nr);
			/* Another DMA call while the sg list is held (a ring read): it must not
			   acknowledge the unmap of the page the sg list points into. */
			if (dg_dev_read(ds->dev, IOVA + K4 - 8, &peek, sizeof(peek)) == -EFAULT)
				atomic_fetch_add_explicit(&ds->refused, 1, memory_order_relaxed);
			for (unsigned int i = 0, off = 0; !err && i < nr; off += sg[i].len, i++)
				memcpy(sg[i].addr, (char *)buf + off, sg[i].len);
			dg_dev_quiesce(ds->dev);
		}
		if (err == 0) {
			atomic_store_explicit(&ds->wrote_round, r, memory_order_release);
		} else {
			if (err == -EFAULT)
				atomic_fetch_add_explicit(&ds->refused, 1, memory_order_relaxed);
			else
				atomic_fetch_add_explicit(&ds->other, 1, memory_order_relaxed);
			sched_yield(); /* nothing mapped: let the CPU thread run */
		}
		atomic_fetch_add_explicit(&ds->attempts, 1, memory_order_release);
		/* Device 0 sometimes goes idle: offline devices must not hold up waits. */
		if (ds->idx == 0 && ++n % 64 == 0) {
			dg_dev_offline(ds->dev);
			sched_yield();
		}
		n++;
	}
	dg_dev_offline(ds->dev);
	return NULL;
}

static uint64_t drain_faults(void)
{
	struct dg_fault f;
	uint64_t n = 0;

	while (dg_iommu_fault_pop(mmu, &f) == 0) {
		if (f.reason != DG_FAULT_UNMAPPED || f.iova < IOVA || f.iova >= IOVA + K4 ||
		    (f.access != DG_ACCESS_WRITE && f.iova != IOVA + K4 - 8) || f.rid < 0x10 ||
		    f.rid >= 0x10 + ndevs || f.domain != dg_domain_id(dom))
			die("unexpected fault record");
		n++;
	}
	return n;
}

int main(int argc, char **argv)
{
	unsigned long rounds = argc > 1 ? strtoul(argv[1], NULL, 0) : 200;
	struct dg_iommu_config cfg;
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_iommu_stats st;
	uint64_t popped = 0, refused = 0;
	static uint8_t snap[K4];

	bool by_domain = argc > 3 && !strcmp(argv[3], "domain");

	ndevs = argc > 2 ? (unsigned int)strtoul(argv[2], NULL, 0) : 2;
	if (!rounds || !ndevs || ndevs > MAXDEVS ||
	    (argc > 3 && !by_domain && strcmp(argv[3], "flush")))
		die("usage: security_stress [ROUNDS [DEVICES<=8 [flush|domain]]]");
	start_time = time(NULL);
	dg_iommu_config_init(&cfg);
	cfg.wait_timeout_ns = 30ull * 1000 * 1000 * 1000; /* sanitizers are slow */
	cfg.fault_queue_len = 64;
	mmu = dg_iommu_create(&cfg);
	dom = mmu ? dg_domain_create(mmu, &g, NULL, NULL) : NULL;
	pool = aligned_alloc(K4, POOL * K4);
	if (!mmu || !dom || !pool)
		die("setup");
	memset(pool, 0, POOL * K4);
	for (unsigned int i = 0; i < ndevs; i++) {
		devs[i].idx = i;
		devs[i].dev = dg_device_create(mmu, 0x10 + i);
		if (!devs[i].dev || dg_device_attach(devs[i].dev, dom))
			die("device");
	}
	for (unsigned int i = 0; i < ndevs; i++)
		if (pthread_create(&devs[i].thread, NULL, device_main, &devs[i]))
			die("thread");

	for (uint64_t r = 1; r <= rounds; r++) {
		uint8_t *page = pool + (r % POOL) * K4;
		struct dg_pt_gather gather;
		uint64_t unmapped, seen[MAXDEVS];
		int err;

		/* The page is unreachable here: fill it with its canary. */
		memset(page, 0, K4);
		if (dg_domain_map(dom, IOVA, (uint64_t)(uintptr_t)page, K4,
				  DG_PROT_READ | DG_PROT_WRITE, NULL))
			die("map");
		atomic_store_explicit(&round_no, r, memory_order_release);
		/* Every device writes through the mapping: it is in every IOTLB now. */
		for (unsigned int i = 0; i < ndevs; i++)
			while (atomic_load_explicit(&devs[i].wrote_round, memory_order_acquire) !=
			       r) {
				sched_yield();
				check_deadline();
			}
		dg_pt_gather_init(&gather);
		if (dg_domain_unmap(dom, IOVA, K4, &gather, &unmapped) || unmapped != K4)
			die("unmap");
		if (by_domain) {
			struct dg_inval_cmd c[8];
			uint64_t seq;

			for (unsigned int k = 0; k < 8; k++)
				c[k] = k % 3 == 0 ?
					       (struct dg_inval_cmd){.type = DG_INVAL_DOMAIN,
								     .domain = dg_domain_id(dom)} :
				       k % 3 == 1 ? (struct dg_inval_cmd){.type = DG_INVAL_GLOBAL} :
						    (struct dg_inval_cmd){.type = DG_INVAL_DEVICE,
									  .rid = 0x10 + k % ndevs};
			if (dg_inval_submit(mmu, c, 8, &seq) || dg_inval_wait(mmu, seq))
				die("domain invalidation");
		} else {
			err = dg_iommu_flush_gather(mmu, dom, &gather);
			if (err)
				die("flush_gather");
		}
		/* From here on the page must not change. */
		memcpy(snap, page, K4);
		for (unsigned int i = 0; i < ndevs; i++)
			seen[i] = atomic_load_explicit(&devs[i].attempts, memory_order_acquire);
		for (unsigned int i = 0; i < ndevs; i++)
			while (atomic_load_explicit(&devs[i].attempts, memory_order_acquire) <
			       seen[i] + 3) {
				sched_yield();
				check_deadline();
			}
		if (memcmp(snap, page, K4))
			die("a device write landed after the wait returned");
		if (by_domain && dg_iommu_flush_gather(mmu, dom, &gather))
			die("flush_gather");
		popped += drain_faults();
	}
	atomic_store_explicit(&stop, 1, memory_order_release);
	for (unsigned int i = 0; i < ndevs; i++) {
		pthread_join(devs[i].thread, NULL);
		refused += atomic_load(&devs[i].refused);
		if (atomic_load(&devs[i].other))
			die("unexpected error from dg_dev_write");
	}
	popped += drain_faults();
	dg_iommu_stats(mmu, &st);
	if (st.faults != refused || popped + st.fault_overflow != refused ||
	    st.faults_recorded != popped)
		die("refused accesses and fault records disagree");
	if (refused < rounds)
		die("devices were never refused: the test did not test anything");
	for (unsigned int i = 0; i < ndevs; i++) {
		if (dg_device_block(devs[i].dev))
			die("block");
		dg_device_destroy(devs[i].dev);
	}
	if (dg_domain_destroy(dom))
		die("domain destroy");
	dg_iommu_destroy(mmu);
	free(pool);
	printf("security_stress: %lu rounds, %u devices, %llu refused accesses, all recorded "
	       "(%llu overflowed)\n",
	       rounds, ndevs, (unsigned long long)refused, (unsigned long long)st.fault_overflow);
	return 0;
}
