/* SPDX-License-Identifier: MIT */
/*
 * dma/dma.c - struct dg_dma: the DMA layer of one IOMMU. Global settings (forced translation),
 * the failure hook, policy names, and housekeeping.
 *
 * Housekeeping is what Linux does from timers: flush lazy queues whose oldest entry reached
 * the timeout (fq_flush_timeout, 10 ms), trim the IOVA caches (every 100 ms), and here also
 * retry invalidations that timed out. A background thread runs it every period (1 ms by
 * default) unless the configuration asks for none; tests drive it with dg_dma_housekeep() and
 * a virtual clock so the lazy window bound is checked deterministically.
 *
 * Locking: dma->lock protects the device list, the forced-translation setting and the
 * housekeeping thread's state; a pass holds it while it visits devices, so a device cannot be
 * destroyed under it (dg_dma_dev_destroy() takes it to unlink).
 */
#include "dma/dma_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HK_DEFAULT_PERIOD_NS 1000000ull	  /* 1 ms */
#define HK_TRIM_PERIOD_NS    100000000ull /* 100 ms, as Linux's depot trim */

static const char *const policy_names[DG_DMA_NR_POLICIES] = {
	"identity", "strict", "lazy", "window", "bounce", "pool",
};

const char *dg_dma_policy_name(enum dg_dma_policy policy)
{
	return (unsigned int)policy < DG_DMA_NR_POLICIES ? policy_names[policy] : NULL;
}

int dg_dma_policy_parse(const char *name, enum dg_dma_policy *policy)
{
	if (!name || !policy)
		return -EINVAL;
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++)
		if (!strcmp(name, policy_names[i])) {
			*policy = (enum dg_dma_policy)i;
			return 0;
		}
	return -EINVAL;
}

uint64_t dma_clock_default(void *cookie)
{
	struct timespec ts;

	(void)cookie;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void housekeep_locked(struct dg_dma *dma)
{
	uint64_t now = dma_now(dma);
	bool trim = now - dma->last_trim_ns >= HK_TRIM_PERIOD_NS;

	if (trim)
		dma->last_trim_ns = now;
	for (struct dg_dma_dev *dd = dma->devs; dd; dd = dd->next) {
		if (dd->lazy)
			dma_lazy_tick(dd, now);
		if (atomic_load_explicit(&dd->nr_quarantined, memory_order_relaxed))
			dma_quarantine_retry(dd, false);
		if (trim && dd->sp)
			dg_iova_trim(dd->sp->iova);
	}
}

int dg_dma_housekeep(struct dg_dma *dma)
{
	if (!dma)
		return -EINVAL;
	pthread_mutex_lock(&dma->lock);
	housekeep_locked(dma);
	pthread_mutex_unlock(&dma->lock);
	return 0;
}

static void *hk_main(void *arg)
{
	struct dg_dma *dma = arg;
	struct timespec ts;

	pthread_mutex_lock(&dma->lock);
	while (!dma->hk_stop) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)dma->cfg.housekeeping_period_ns;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&dma->hk_cond, &dma->lock, &ts);
		if (!dma->hk_stop)
			housekeep_locked(dma);
	}
	pthread_mutex_unlock(&dma->lock);
	return NULL;
}

struct dg_dma *dg_dma_create(struct dg_iommu *mmu, const struct dg_dma_config *cfg)
{
	struct dg_dma *dma;
	pthread_condattr_t ca;
	long n;
	int r;

	if (!mmu) {
		errno = EINVAL;
		return NULL;
	}
	dma = calloc(1, sizeof(*dma));
	if (!dma) {
		errno = ENOMEM;
		return NULL;
	}
	if (cfg)
		dma->cfg = *cfg;
	if (!dma->cfg.housekeeping_period_ns)
		dma->cfg.housekeeping_period_ns = HK_DEFAULT_PERIOD_NS;
	dma->mmu = mmu;
	dma->force_translation = dma->cfg.force_translation;
	n = sysconf(_SC_NPROCESSORS_CONF);
	dma->ncpus = n < 1 ? 1 : n > 1024 ? 1024 : (unsigned int)n;
	atomic_init(&dma->fail, NULL);
	dma->last_trim_ns = dma_now(dma);
	pthread_mutex_init(&dma->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&dma->hk_cond, &ca);
	pthread_condattr_destroy(&ca);
	if (!dma->cfg.no_housekeeping) {
		r = pthread_create(&dma->hk_thread, NULL, hk_main, dma);
		if (r) {
			pthread_cond_destroy(&dma->hk_cond);
			pthread_mutex_destroy(&dma->lock);
			free(dma);
			errno = r;
			return NULL;
		}
		dma->hk_started = true;
	}
	return dma;
}

int dg_dma_destroy(struct dg_dma *dma)
{
	if (!dma)
		return 0;
	pthread_mutex_lock(&dma->lock);
	if (dma->devs) {
		pthread_mutex_unlock(&dma->lock);
		return -EBUSY;
	}
	dma->hk_stop = true;
	pthread_cond_signal(&dma->hk_cond);
	pthread_mutex_unlock(&dma->lock);
	if (dma->hk_started)
		pthread_join(dma->hk_thread, NULL);
	pthread_cond_destroy(&dma->hk_cond);
	pthread_mutex_destroy(&dma->lock);
	free(dma);
	return 0;
}

struct dg_iommu *dg_dma_iommu(const struct dg_dma *dma)
{
	return dma ? dma->mmu : NULL;
}

void dg_dma_set_fail_hook(struct dg_dma *dma, const struct dg_dma_fail_hook *hook)
{
	if (!dma)
		return;
	/* Release pairs with the acquire load in dma_fail(): the hook's fields are visible. */
	atomic_store_explicit(&dma->fail, hook && hook->fail ? hook : NULL, memory_order_release);
}

bool dg_dma_force_translation(const struct dg_dma *dma)
{
	bool on;

	if (!dma)
		return false;
	pthread_mutex_lock((pthread_mutex_t *)&dma->lock);
	on = dma->force_translation;
	pthread_mutex_unlock((pthread_mutex_t *)&dma->lock);
	return on;
}

int dg_dma_set_force_translation(struct dg_dma *dma, bool on)
{
	struct dg_dma_dev *dd;
	int r = 0;

	if (!dma)
		return -EINVAL;
	pthread_mutex_lock(&dma->lock);
	if (on && !dma->force_translation) {
		/* All or nothing: first check that every device to move is idle. */
		for (dd = dma->devs; dd; dd = dd->next)
			if (dd->policy == DG_DMA_IDENTITY &&
			    !(dd->cfg.flags & DG_DMA_DEV_TRANSLATION_OPT_OUT) && dma_dev_busy(dd)) {
				pthread_mutex_unlock(&dma->lock);
				return -EBUSY;
			}
		for (dd = dma->devs; dd && !r; dd = dd->next)
			if (dd->policy == DG_DMA_IDENTITY &&
			    !(dd->cfg.flags & DG_DMA_DEV_TRANSLATION_OPT_OUT))
				r = dma_dev_force_strict(dd);
	}
	if (!r)
		dma->force_translation = on;
	pthread_mutex_unlock(&dma->lock);
	return r;
}
