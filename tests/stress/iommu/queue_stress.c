/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/iommu/queue_stress.c - the multi-producer invalidation queue under contention.
 *
 *   queue_stress [BATCHES [PRODUCERS [DEVICES [QUEUE_LEN]]]]
 *
 * Producers submit batches of 1..8 commands into a short ring (64 slots, so it wraps and
 * joins batches all the time) and wait for or poll some of them; device threads run DMA
 * calls in a loop (each one a quiescent point) and sometimes go offline. One batch in eight
 * is submitted by hand through the queue's steps (reserve, write, commit) with the CPU given
 * up between them, so devices often find commands written but not published, or a slot being
 * written, in the slot they watch (agent.c applies written commands early, in order). One
 * in four goes through the DMA layer's two steps (iommu/inval.h: reserve, the CPU given up,
 * write and commit), half of those RANGE commands only.
 * Checked: every
 * submission gets a distinct range of sequence numbers and every slot is published exactly
 * once (the final tail equals the commands submitted, the ring's stamps all match); every
 * wait succeeds; a device that never fell a ring behind applied every command exactly once
 * (counted, and its whole-cache flushes are exactly its GLOBAL, DEVICE and CONTEXT commands);
 * a device never applies (seen) or acknowledges past what was reserved, and seen never goes
 * backwards.
 */
#include "iommu/inval.h"
#include "iommu/iommu_internal.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../test_rand.h"

#define MAXT 8

static struct dg_iommu *mmu;
static struct dg_domain *dom;
static struct dg_device *devs[MAXT];
static unsigned int nprod, ndev;
static unsigned long batches;
static _Atomic int stop;
static _Atomic uint64_t submitted_cmds;
static _Atomic uint64_t flush_cmds[MAXT]; /* GLOBAL and DEVICE commands for each device */

static void die(const char *msg)
{
	fprintf(stderr, "queue_stress: FAIL: %s\n", msg);
	exit(1);
}

static uint64_t xorshift(uint64_t *s)
{
	return xorshift64(s);
}

/* dg_inval_submit() of @n commands (PAGE of 4 KiB, DOMAIN, DEVICE, GLOBAL) done by hand, with
   sched_yield() between the stamp stores and the publish: the window devices must handle. */
static uint64_t submit_by_hand(const struct dg_inval_cmd *cmds, unsigned int n)
{
	bool owner;
	uint64_t start = inv_queue_reserve(&mmu->inv, n, &owner);

	for (unsigned int i = 0; i < n; i++) {
		struct inv_cmd c = {.mark = i ? 0 : INV_MARK_SUBMIT};

		switch (cmds[i].type) {
		case DG_INVAL_PAGE:
			c.op = INV_OP_BLOCK;
			c.order = 12;
			c.id = cmds[i].domain;
			c.iova = cmds[i].iova;
			break;
		case DG_INVAL_DOMAIN:
			c.op = INV_OP_DOMAIN;
			c.id = cmds[i].domain;
			break;
		case DG_INVAL_DEVICE:
			c.op = INV_OP_DEVICE;
			c.id = cmds[i].rid;
			break;
		default:
			c.op = INV_OP_GLOBAL;
			break;
		}
		inv_queue_write(&mmu->inv, start + i, &c);
		sched_yield();
	}
	inv_queue_commit(&mmu->inv, start, n, owner);
	return start + n;
}

/* The DMA layer's two steps (iommu/inval.h): reserve, the CPU given up (where a strict batch
   clears its page-table entries), then write and commit. */
static uint64_t submit_two_steps(const struct dg_inval_cmd *cmds, unsigned int n)
{
	struct inval_ticket t;
	uint64_t seq;

	if (iommu_inval_reserve(mmu, cmds, n, &t))
		die("two-step reserve");
	sched_yield();
	iommu_inval_post(mmu, cmds, n, &t, &seq);
	return seq;
}

static void *producer_main(void *arg)
{
	uint64_t rng = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1, last = 0;

	for (unsigned long b = 0; b < batches; b++) {
		struct dg_inval_cmd cmds[8];
		unsigned int n = 1 + (unsigned int)(xorshift(&rng) % 8), how;
		uint64_t seq;

		for (unsigned int i = 0; i < n; i++) {
			uint64_t r = xorshift(&rng);

			memset(&cmds[i], 0, sizeof(cmds[i]));
			switch (r % 4) {
			case 0:
				cmds[i].type = DG_INVAL_PAGE;
				cmds[i].domain = dg_domain_id(dom);
				cmds[i].iova = (r >> 8) % 1024 * 4096;
				cmds[i].size = 4096;
				break;
			case 1:
				cmds[i].type = DG_INVAL_DOMAIN;
				cmds[i].domain = dg_domain_id(dom);
				break;
			case 2:
				cmds[i].type = DG_INVAL_DEVICE;
				cmds[i].rid = 0x100 + (uint32_t)((r >> 8) % ndev);
				break;
			default:
				cmds[i].type = DG_INVAL_GLOBAL;
				break;
			}
		}
		how = (unsigned int)(xorshift(&rng) % 8);
		if (how == 7) /* RANGE commands only (one slot each): the ticket's RANGE way */
			for (unsigned int i = 0; i < n; i++)
				cmds[i] = (struct dg_inval_cmd){.type = DG_INVAL_RANGE,
								.flags = DG_INVAL_LEAF,
								.domain = dg_domain_id(dom),
								.iova = (uint64_t)(i * 7 % 1024) *
									4096,
								.size = 4096};
		if (how == 0)
			seq = submit_by_hand(cmds, n);
		else if (how >= 6)
			seq = submit_two_steps(cmds, n);
		else if (dg_inval_submit(mmu, cmds, n, &seq))
			die("submit");
		if (seq <= last)
			die("sequence numbers went backwards");
		last = seq;
		atomic_fetch_add_explicit(&submitted_cmds, n, memory_order_relaxed);
		for (unsigned int i = 0; i < n; i++)
			for (unsigned int d = 0; d < ndev; d++)
				if (cmds[i].type == DG_INVAL_GLOBAL ||
				    (cmds[i].type == DG_INVAL_DEVICE && cmds[i].rid == 0x100 + d))
					atomic_fetch_add_explicit(&flush_cmds[d], 1,
								  memory_order_relaxed);
		switch (xorshift(&rng) % 4) {
		case 0:
			if (dg_inval_wait(mmu, seq))
				die("wait");
			break;
		case 1:
			while (!dg_inval_done(mmu, seq))
				sched_yield();
			break;
		default:
			break;
		}
	}
	if (dg_inval_wait(mmu, last))
		die("final wait");
	return NULL;
}

static void *device_main(void *arg)
{
	struct dg_device *dev = arg;
	uint64_t word = 0, n = 0, rng = (uintptr_t)dev, seen = dev->seen;
	uint64_t out;

	while (!atomic_load_explicit(&stop, memory_order_acquire)) {
		if (dg_dev_read(dev, (uint64_t)(uintptr_t)&word, &out, sizeof(out)))
			die("passthrough read");
		/* seen and acked are this thread's; the tail only grows, read after them */
		if (dev->seen < seen || dev->acked > dev->seen ||
		    dev->seen > inv_queue_tail(&mmu->inv))
			die("device state went backwards or ahead of the reserved tail");
		seen = dev->seen;
		if (++n % 1024 == 0 && xorshift(&rng) % 4 == 0) {
			dg_dev_offline(dev);
			sched_yield();
		}
	}
	dg_dev_online(dev); /* catch up with everything, then go idle */
	dg_dev_offline(dev);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t pt[MAXT], dt[MAXT];
	struct dg_iommu_config cfg;
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_iommu_stats st;
	uint64_t tail;
	unsigned int lapped = 0, qlen;

	batches = argc > 1 ? strtoul(argv[1], NULL, 0) : 2000;
	nprod = argc > 2 ? (unsigned int)strtoul(argv[2], NULL, 0) : 2;
	ndev = argc > 3 ? (unsigned int)strtoul(argv[3], NULL, 0) : 2;
	qlen = argc > 4 ? (unsigned int)strtoul(argv[4], NULL, 0) : 64;
	if (!batches || !nprod || nprod > MAXT || !ndev || ndev > MAXT)
		die("usage: queue_stress [BATCHES [PRODUCERS<=8 [DEVICES<=8 [QUEUE_LEN]]]]");
	dg_iommu_config_init(&cfg);
	cfg.inval_queue_len = qlen;
	cfg.wait_timeout_ns = 60ull * 1000 * 1000 * 1000;
	mmu = dg_iommu_create(&cfg);
	dom = mmu ? dg_domain_create(mmu, &g, NULL, NULL) : NULL;
	if (!dom)
		die("setup");
	for (unsigned int i = 0; i < ndev; i++) {
		devs[i] = dg_device_create(mmu, 0x100 + i);
		if (!devs[i] || dg_device_passthrough(devs[i]))
			die("device");
	}
	for (unsigned int i = 0; i < ndev; i++)
		if (pthread_create(&dt[i], NULL, device_main, devs[i]))
			die("thread");
	for (unsigned int i = 0; i < nprod; i++)
		if (pthread_create(&pt[i], NULL, producer_main, (void *)(uintptr_t)(i + 1)))
			die("thread");
	for (unsigned int i = 0; i < nprod; i++)
		pthread_join(pt[i], NULL);
	atomic_store_explicit(&stop, 1, memory_order_release);
	for (unsigned int i = 0; i < ndev; i++)
		pthread_join(dt[i], NULL);

	tail = inv_queue_tail(&mmu->inv);
	/* The passthrough contexts took one CONTEXT command per device. */
	if (tail != atomic_load(&submitted_cmds) + ndev)
		die("commands lost or duplicated: tail != submitted");
	if (atomic_load(&mmu->inv.published) != tail)
		die("not everything published");
	if (inv_queue_check(&mmu->inv, stderr))
		die("ring check");
	for (unsigned int i = 0; i < ndev; i++) {
		struct dg_dev_stats ds;

		dg_dev_stats(devs[i], &ds);
		if (ds.acked != tail)
			die("device did not acknowledge everything");
		if (ds.laps)
			lapped++;
		else if (ds.cmds_processed != tail - i)
			/* device i was created after i context commands of earlier devices */
			die("device applied a command twice or missed one");
		else if (ds.flushes != 1 + atomic_load(&flush_cmds[i]))
			/* its own CONTEXT command, every GLOBAL and its DEVICE commands */
			die("device skipped or repeated a GLOBAL/DEVICE command");
	}
	dg_iommu_stats(mmu, &st);
	if (st.submits != nprod * batches + ndev || st.wait_timeouts || !st.batches ||
	    st.batches > st.submits || st.batch_cmds_max < 1)
		die("statistics");
	for (unsigned int i = 0; i < ndev; i++) {
		if (dg_device_block(devs[i]))
			die("block");
		dg_device_destroy(devs[i]);
	}
	dg_domain_destroy(dom);
	dg_iommu_destroy(mmu);
	printf("queue_stress: %u producers x %lu batches, %llu commands, %llu publications "
	       "(max %llu slots), %u of %u devices lapped\n",
	       nprod, batches, (unsigned long long)tail, (unsigned long long)st.batches,
	       (unsigned long long)st.batch_cmds_max, lapped, ndev);
	return 0;
}
