/* SPDX-License-Identifier: MIT */
/*
 * iommu/iommu.c - the IOMMU instance: configuration, devices and their context entries,
 * fault records and statistics.
 *
 * Context changes follow the hardware protocol (VT-d "context-cache invalidation"): write
 * the new entry, queue a CONTEXT command for the device, wait for it. The device keeps using
 * its cached entry until it applies the command at a quiescent point, so a change is safe
 * against DMA in flight, and when the wait returns the device reaches memory only through
 * the new entry. A domain named by an entry is referenced (dg_domain_destroy says -EBUSY)
 * until a change away from it has been confirmed by a completed wait.
 */
#include "iommu/iommu_internal.h"

#include "base/clock.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

void dg_iommu_config_init(struct dg_iommu_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->iotlb_entries = 1024;
	cfg->iotlb_large_entries = 64;
	cfg->walk_cache_entries = 64;
	cfg->inval_queue_len = 1024;
	cfg->fault_queue_len = 256;
	cfg->max_devices = 256;
	cfg->wait_timeout_ns = 1000000000ull;
	cfg->inval_domain_threshold = 64ull << 20;
	cfg->reference = false;
	cfg->no_iotlb_prefetch = false;
	cfg->iotlb_leaf_direct = false;
	cfg->log = stderr;
}

static int fill_config(struct dg_iommu_config *c, const struct dg_iommu_config *in)
{
	struct dg_iommu_config d;

	dg_iommu_config_init(&d);
	if (!in) {
		*c = d;
		return 0;
	}
	*c = *in;
	if (!c->iotlb_entries)
		c->iotlb_entries = d.iotlb_entries;
	if (!c->iotlb_large_entries)
		c->iotlb_large_entries = d.iotlb_large_entries;
	if (!c->walk_cache_entries)
		c->walk_cache_entries = d.walk_cache_entries;
	if (!c->inval_queue_len)
		c->inval_queue_len = d.inval_queue_len;
	if (!c->fault_queue_len)
		c->fault_queue_len = d.fault_queue_len;
	if (!c->max_devices)
		c->max_devices = d.max_devices;
	if (!c->wait_timeout_ns)
		c->wait_timeout_ns = d.wait_timeout_ns;
	if (!c->inval_domain_threshold)
		c->inval_domain_threshold = d.inval_domain_threshold;
	if (!dg_is_pow2(c->iotlb_entries) || c->iotlb_entries > (1u << 24) ||
	    !dg_is_pow2(c->iotlb_large_entries) || c->iotlb_large_entries > (1u << 24) ||
	    !dg_is_pow2(c->walk_cache_entries) || c->walk_cache_entries > (1u << 20) ||
	    !dg_is_pow2(c->inval_queue_len) || c->inval_queue_len < 16 ||
	    c->inval_queue_len > (1u << 20) || !dg_is_pow2(c->fault_queue_len) ||
	    c->fault_queue_len < 2 || c->fault_queue_len > (1u << 20) || c->max_devices > 65536)
		return -EINVAL;
	return 0;
}

struct dg_iommu *dg_iommu_create(const struct dg_iommu_config *cfg)
{
	struct dg_iommu *mmu;
	int r;

	mmu = aligned_alloc(DG_CACHELINE, dg_align_up(sizeof(*mmu), DG_CACHELINE));
	if (!mmu) {
		errno = ENOMEM;
		return NULL;
	}
	memset(mmu, 0, sizeof(*mmu));
	r = fill_config(&mmu->cfg, cfg);
	if (r)
		goto fail_free;
	r = inv_queue_init(&mmu->inv, mmu->cfg.inval_queue_len, mmu->cfg.reference);
	if (r)
		goto fail_free;
	r = fault_queue_init(&mmu->fq, mmu->cfg.fault_queue_len);
	if (r)
		goto fail_inv;
	r = -ENOMEM;
	mmu->agents =
		aligned_alloc(DG_CACHELINE, (size_t)mmu->cfg.max_devices * sizeof(*mmu->agents));
	if (!mmu->agents)
		goto fail_fq;
	for (uint32_t i = 0; i < mmu->cfg.max_devices; i++) {
		atomic_init(&mmu->agents[i].ack, AGENT_OFFLINE);
		atomic_init(&mmu->agents[i].rid, 0);
		atomic_init(&mmu->agents[i].used, 0);
		atomic_init(&mmu->agents[i].dev, NULL);
	}
	if (pthread_mutex_init(&mmu->lock, NULL))
		goto fail_agents;
	if (pthread_mutex_init(&mmu->diag_lock, NULL)) {
		pthread_mutex_destroy(&mmu->lock);
		goto fail_agents;
	}
	atomic_init(&mmu->completed, 0);
	atomic_init(&mmu->nr_agents, 0);
	for (unsigned int i = 0; i <= DG_DOMAIN_ID_MAX; i++)
		atomic_init(&mmu->domains[i], NULL);
	for (unsigned int i = 0; i < WAIT_STAT_SHARDS; i++) {
		atomic_init(&mmu->wst[i].waits, 0);
		atomic_init(&mmu->wst[i].coalesced, 0);
		atomic_init(&mmu->wst[i].timeouts, 0);
	}
	return mmu;

fail_agents:
	free(mmu->agents);
fail_fq:
	fault_queue_fini(&mmu->fq);
fail_inv:
	inv_queue_fini(&mmu->inv);
fail_free:
	free(mmu);
	errno = -r;
	return NULL;
}

void dg_iommu_destroy(struct dg_iommu *mmu)
{
	if (!mmu)
		return;
	assert(!mmu->nr_devices && !mmu->nr_domains);
	pthread_mutex_destroy(&mmu->diag_lock);
	pthread_mutex_destroy(&mmu->lock);
	free(mmu->agents);
	fault_queue_fini(&mmu->fq);
	inv_queue_fini(&mmu->inv);
	free(mmu);
}

void dg_iommu_config(const struct dg_iommu *mmu, struct dg_iommu_config *cfg)
{
	*cfg = mmu->cfg;
}

/* ---- devices ------------------------------------------------------------------------ */

static struct agent_slot *find_rid(struct dg_iommu *mmu, uint32_t rid)
{
	uint32_t n = atomic_load_explicit(&mmu->nr_agents, memory_order_acquire);

	for (uint32_t i = 0; i < n; i++) {
		struct agent_slot *s = &mmu->agents[i];

		if (atomic_load_explicit(&s->used, memory_order_relaxed) &&
		    atomic_load_explicit(&s->rid, memory_order_relaxed) == rid)
			return s;
	}
	return NULL;
}

bool iommu_rid_exists(struct dg_iommu *mmu, uint32_t rid)
{
	return find_rid(mmu, rid) != NULL;
}

struct dg_device *dg_device_create(struct dg_iommu *mmu, uint32_t rid)
{
	struct dg_device *dev;
	struct agent_slot *slot = NULL;
	int err = 0;

	dev = aligned_alloc(DG_CACHELINE, dg_align_up(sizeof(*dev), DG_CACHELINE));
	if (!dev) {
		errno = ENOMEM;
		return NULL;
	}
	memset(dev, 0, sizeof(*dev));
	dev->mmu = mmu;
	dev->rid = rid;
	atomic_init(&dev->ctx, DG_CTX_BLOCKED);
	atomic_init(&dev->hot.hits, 0);
	atomic_init(&dev->st_misses, 0);
	atomic_init(&dev->st_walks, 0);
	atomic_init(&dev->st_wc_hits, 0);
	atomic_init(&dev->st_faults, 0);
	atomic_init(&dev->st_cmds, 0);
	atomic_init(&dev->st_flushes, 0);
	atomic_init(&dev->st_laps, 0);
	atomic_init(&dev->st_leaf_walks, 0);
	atomic_init(&dev->st_root_walks, 0);
	atomic_init(&dev->st_prefetch, 0);
	if (pthread_mutex_init(&dev->ctx_lock, NULL)) {
		free(dev);
		errno = ENOMEM;
		return NULL;
	}
	if (agent_init(dev, &mmu->cfg)) {
		err = ENOMEM;
		goto fail;
	}

	pthread_mutex_lock(&mmu->lock);
	if (find_rid(mmu, rid)) {
		err = EEXIST;
	} else {
		for (uint32_t i = 0; i < mmu->cfg.max_devices; i++) {
			if (!atomic_load_explicit(&mmu->agents[i].used, memory_order_relaxed)) {
				slot = &mmu->agents[i];
				if (i >=
				    atomic_load_explicit(&mmu->nr_agents, memory_order_relaxed))
					/* Release pairs with the acquire in waiters' scans. */
					atomic_store_explicit(&mmu->nr_agents, i + 1,
							      memory_order_release);
				break;
			}
		}
		if (!slot)
			err = ENOSPC;
	}
	if (slot) {
		dev->slot = slot;
		/*
		 * The new device starts offline at the seq agent_init() read. An RMW, so a
		 * waiter's earlier RMW on this slot stays ordered before the device's first
		 * online transition (agent.c).
		 */
		atomic_exchange_explicit(&slot->ack, dev->seen | AGENT_OFFLINE,
					 memory_order_acq_rel);
		atomic_store_explicit(&slot->rid, rid, memory_order_relaxed);
		atomic_store_explicit(&slot->dev, dev, memory_order_relaxed);
		atomic_store_explicit(&slot->used, 1, memory_order_relaxed);
		mmu->nr_devices++;
	}
	pthread_mutex_unlock(&mmu->lock);
	if (!slot)
		goto fail_agent;
	return dev;

fail_agent:
	agent_fini(dev);
fail:
	pthread_mutex_destroy(&dev->ctx_lock);
	free(dev);
	errno = err;
	return NULL;
}

static void add_dev_stats(struct dg_dev_stats *to, const struct dg_device *dev)
{
	uint64_t leaf = stat_get(&dev->st_leaf_walks), root = stat_get(&dev->st_root_walks);

	/* The cheap miss counts once for what it is (iommu_internal.h): folded here. */
	to->iotlb_hits += stat_get(&dev->hot.hits);
	to->iotlb_misses += stat_get(&dev->st_misses) + leaf + root;
	to->walks += stat_get(&dev->st_walks) + leaf + root;
	to->walk_cache_hits += stat_get(&dev->st_wc_hits) + leaf;
	to->faults += stat_get(&dev->st_faults);
	to->cmds_processed += stat_get(&dev->st_cmds);
	to->flushes += stat_get(&dev->st_flushes);
	to->laps += stat_get(&dev->st_laps);
	to->prefetch_fills += stat_get(&dev->st_prefetch);
}

void dg_device_destroy(struct dg_device *dev)
{
	struct dg_iommu *mmu;

	if (!dev)
		return;
	mmu = dev->mmu;
	pthread_mutex_lock(&mmu->lock);
	if (dev->ctx_dom)
		dev->ctx_dom->refs--;
	if (dev->stale_dom)
		dev->stale_dom->refs--;
	add_dev_stats(&mmu->retired, dev);
	atomic_store_explicit(&dev->slot->used, 0, memory_order_relaxed);
	atomic_store_explicit(&dev->slot->dev, NULL, memory_order_relaxed);
	/* Offline for good: waiters skip the slot (RMW, as every offline transition). */
	atomic_exchange_explicit(&dev->slot->ack, dev->seen | AGENT_OFFLINE, memory_order_acq_rel);
	mmu->nr_devices--;
	pthread_mutex_unlock(&mmu->lock);
	agent_fini(dev);
	pthread_mutex_destroy(&dev->ctx_lock);
	free(dev);
}

/*
 * Write a new context entry and confirm it. ctx_lock serializes changes of one device; the
 * wait runs without mmu->lock, so a stuck device delays only its own context changes.
 */
static int set_context(struct dg_device *dev, enum dg_ctx_mode mode, struct dg_domain *dom)
{
	struct dg_iommu *mmu = dev->mmu;
	struct dg_inval_cmd cmd = {.type = DG_INVAL_CONTEXT, .rid = dev->rid};
	struct dg_domain *old;
	uint64_t seq = 0;
	int r = 0;

	if (dom && dom->mmu != mmu)
		return -EINVAL;
	pthread_mutex_lock(&dev->ctx_lock);
	if (dev->ctx_seq) {
		/* The previous change is unconfirmed: confirm it first, or change nothing. */
		r = dg_inval_wait(mmu, dev->ctx_seq);
		if (r)
			goto out;
		pthread_mutex_lock(&mmu->lock);
		if (dev->stale_dom)
			dev->stale_dom->refs--;
		pthread_mutex_unlock(&mmu->lock);
		dev->stale_dom = NULL;
		dev->ctx_seq = 0;
	}
	if ((atomic_load_explicit(&dev->ctx, memory_order_relaxed) & 3) == (uint64_t)mode &&
	    dev->ctx_dom == dom)
		goto out;
	old = dev->ctx_dom;
	pthread_mutex_lock(&mmu->lock);
	if (dom)
		dom->refs++;
	pthread_mutex_unlock(&mmu->lock);
	dev->ctx_dom = dom;
	/* Release pairs with the device's acquire load in load_context() (agent.c). */
	atomic_store_explicit(&dev->ctx, (uint64_t)(uintptr_t)dom | mode, memory_order_release);
	r = dg_inval_submit(mmu, &cmd, 1, &seq);
	assert(r == 0 && seq); /* the rid exists and one slot always fits */
	if (!r)
		r = dg_inval_wait(mmu, seq);
	if (r) {
		dev->stale_dom = old; /* keeps its reference until confirmed */
		dev->ctx_seq = seq;
		goto out;
	}
	if (old) {
		pthread_mutex_lock(&mmu->lock);
		old->refs--;
		pthread_mutex_unlock(&mmu->lock);
	}
out:
	pthread_mutex_unlock(&dev->ctx_lock);
	return r;
}

int dg_device_attach(struct dg_device *dev, struct dg_domain *dom)
{
	if (!dev || !dom)
		return -EINVAL;
	return set_context(dev, DG_CTX_TRANSLATE, dom);
}

int dg_device_passthrough(struct dg_device *dev)
{
	return dev ? set_context(dev, DG_CTX_PASSTHROUGH, NULL) : -EINVAL;
}

int dg_device_block(struct dg_device *dev)
{
	return dev ? set_context(dev, DG_CTX_BLOCKED, NULL) : -EINVAL;
}

int dg_device_sync(struct dg_device *dev)
{
	int r = 0;

	if (!dev)
		return -EINVAL;
	pthread_mutex_lock(&dev->ctx_lock);
	if (dev->ctx_seq) {
		r = dg_inval_wait(dev->mmu, dev->ctx_seq);
		if (!r) {
			pthread_mutex_lock(&dev->mmu->lock);
			if (dev->stale_dom)
				dev->stale_dom->refs--;
			pthread_mutex_unlock(&dev->mmu->lock);
			dev->stale_dom = NULL;
			dev->ctx_seq = 0;
		}
	}
	pthread_mutex_unlock(&dev->ctx_lock);
	return r;
}

enum dg_ctx_mode dg_device_mode(const struct dg_device *dev)
{
	return (enum dg_ctx_mode)(atomic_load_explicit(&dev->ctx, memory_order_relaxed) & 3);
}

struct dg_domain *dg_device_domain(const struct dg_device *dev)
{
	/* Acquire pairs with the release store in set_context(): the domain is initialized. */
	uint64_t w = atomic_load_explicit(&dev->ctx, memory_order_acquire);

	return (w & 3) == DG_CTX_TRANSLATE ? (struct dg_domain *)(uintptr_t)(w & ~3ull) : NULL;
}

uint32_t dg_device_rid(const struct dg_device *dev)
{
	return dev->rid;
}

struct dg_iommu *dg_device_iommu(const struct dg_device *dev)
{
	return dev->mmu;
}

/* ---- faults ------------------------------------------------------------------------- */

void iommu_record_fault(struct dg_device *dev, uint64_t iova, uint64_t len, unsigned int access,
			enum dg_fault_reason reason)
{
	struct dg_fault f = {
		.iova = iova,
		.len = len,
		.time_ns = dg_now_ns(),
		.rid = dev->rid,
		.domain = dev->mode == DG_CTX_TRANSLATE ? dev->did : 0,
		.access = access,
		.reason = reason,
	};

	stat_inc(&dev->st_faults, 1);
	fault_queue_push(&dev->mmu->fq, &f); /* full: counted in fq.overflow */
}

int dg_iommu_fault_pop(struct dg_iommu *mmu, struct dg_fault *out)
{
	if (!mmu || !out)
		return -EINVAL;
	return fault_queue_pop(&mmu->fq, out);
}

const char *dg_fault_reason_name(enum dg_fault_reason reason)
{
	switch (reason) {
	case DG_FAULT_UNMAPPED:
		return "unmapped";
	case DG_FAULT_PERM:
		return "permission";
	case DG_FAULT_RANGE:
		return "out-of-range";
	case DG_FAULT_BLOCKED:
		return "blocked";
	case DG_FAULT_WRAP:
		return "wrap";
	}
	return NULL;
}

/* ---- statistics --------------------------------------------------------------------- */

void dg_dev_stats(const struct dg_device *dev, struct dg_dev_stats *out)
{
	memset(out, 0, sizeof(*out));
	add_dev_stats(out, dev);
	out->acked = atomic_load_explicit(&dev->slot->ack, memory_order_relaxed) & ~AGENT_OFFLINE;
}

void dg_iommu_stats(struct dg_iommu *mmu, struct dg_iommu_stats *out)
{
	struct dg_dev_stats d;
	uint32_t n;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&mmu->lock);
	d = mmu->retired;
	n = atomic_load_explicit(&mmu->nr_agents, memory_order_relaxed);
	for (uint32_t i = 0; i < n; i++) {
		struct dg_device *dev =
			atomic_load_explicit(&mmu->agents[i].dev, memory_order_relaxed);
		if (dev)
			add_dev_stats(&d, dev);
	}
	pthread_mutex_unlock(&mmu->lock);
	out->iotlb_hits = d.iotlb_hits;
	out->iotlb_misses = d.iotlb_misses;
	out->walks = d.walks;
	out->walk_cache_hits = d.walk_cache_hits;
	out->faults = d.faults;
	out->cmds_processed = d.cmds_processed;
	out->laps = d.laps;
	out->prefetch_fills = d.prefetch_fills;
	/* Queue ops map onto the API types: BLOCK -> PAGE, DOMAIN, GLOBAL, DEVICE, CONTEXT. */
	for (unsigned int op = INV_OP_BLOCK; op <= INV_OP_CONTEXT; op++)
		out->inval_cmds[op + 1] = stat_get(&mmu->inv.ops[op]);
	out->inval_ranges = stat_get(&mmu->inv.ranges);
	out->submits = stat_get(&mmu->inv.submits);
	out->batches = stat_get(&mmu->inv.batches);
	out->batch_cmds_max = stat_get(&mmu->inv.batch_max);
	for (unsigned int i = 0; i < WAIT_STAT_SHARDS; i++) {
		out->waits += stat_get(&mmu->wst[i].waits);
		out->waits_coalesced += stat_get(&mmu->wst[i].coalesced);
		out->wait_timeouts += stat_get(&mmu->wst[i].timeouts);
	}
	out->faults_recorded = stat_get(&mmu->fq.pushed);
	out->fault_overflow = stat_get(&mmu->fq.overflow);
}
