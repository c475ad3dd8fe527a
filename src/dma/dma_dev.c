/* SPDX-License-Identifier: MIT */
/*
 * dma/dma_dev.c - struct dg_dma_dev: a device's DMA configuration and policy.
 *
 * Every policy except identity gets its own domain (one page table) and IOVA space, built in
 * full before the device is moved to it:
 *
 *   identity   context pass-through, no domain
 *   strict     VT-d (or cfg.geo) domain, IOVA space over the whole input range
 *   lazy       the same + per-CPU flush queues
 *   bounce     the same + shadow areas mapped for good
 *   pool       the same (pools are created later by the driver)
 *   window     flat domain over the window, direct region mapped, IOVA space over the rest
 *
 * Switching (idle device only) builds the new state, moves the device's context to it
 * (dg_device_attach/passthrough waits until the device confirms it no longer uses anything
 * cached under the old context), and only then destroys the old state. If the device does not
 * confirm in time the switch still happened (its context is the new one) and the old state is
 * kept as a zombie until a later switch or destroy can free it.
 *
 * "Idle" means: no live streaming mapping, coherent allocation, link, two-step range or pool,
 * nothing in quarantine, and lazy queues drained (drained here). The caller guarantees no DMA
 * API call on the device runs meanwhile (as Linux requires a driver to be unbound).
 */
#include "dma/dma_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_WINDOW_BASE (2ull << 30)
#define DEFAULT_WINDOW_SIZE (1ull << 30)
#define FLAT_MAX_PAGES	    (1ull << 24)

static _Atomic uint64_t next_gen = 1;

void dg_dma_dev_config_init(struct dg_dma_dev_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->policy = DG_DMA_IDENTITY;
	cfg->dma_mask = UINT64_MAX;
	cfg->max_seg_size = 65536;
	cfg->seg_boundary = 0xffffffffull;
	cfg->geo.format = DG_PT_FMT_VTD_SS;
	cfg->geo.ias = 48;
	cfg->lazy.queue_size = 256;
	cfg->lazy.timeout_ns = 10000000ull;
	cfg->window.page_size = 4096;
	cfg->window.base = DEFAULT_WINDOW_BASE;
	cfg->window.size = DEFAULT_WINDOW_SIZE;
	cfg->bounce.area_size = 1ull << 20;
}

static bool is_mask(uint64_t m)
{
	return !(m & (m + 1)); /* 2^n - 1 */
}

/* Fill defaults and validate; 0 or -EINVAL/-EPERM. */
static int config_check(struct dg_dma_dev_config *c)
{
	struct dg_dma_window_config *w = &c->window;

	if ((unsigned int)c->policy >= DG_DMA_NR_POLICIES)
		return -EINVAL;
	if (c->flags &
	    ~(DG_DMA_DEV_UNTRUSTED | DG_DMA_DEV_TRANSLATION_OPT_OUT | DG_DMA_DEV_LINUX_REFERENCE))
		return -EINVAL;
	if ((c->flags & DG_DMA_DEV_UNTRUSTED) && (c->flags & DG_DMA_DEV_TRANSLATION_OPT_OUT))
		return -EPERM;
	if (!c->dma_mask)
		c->dma_mask = UINT64_MAX;
	if (!is_mask(c->dma_mask) || c->dma_mask < (1ull << 24) - 1)
		return -EINVAL;
	if (!c->max_seg_size)
		c->max_seg_size = 65536;
	if (c->max_seg_size < 512 || c->max_seg_size > (1ull << 32))
		return -EINVAL;
	if (!c->seg_boundary)
		c->seg_boundary = 0xffffffffull;
	if (!is_mask(c->seg_boundary) || c->seg_boundary < 4095)
		return -EINVAL;
	if (!c->geo.format) {
		c->geo.format = DG_PT_FMT_VTD_SS;
		if (!c->geo.ias)
			c->geo.ias = 48;
	}
	if (!c->lazy.queue_size)
		c->lazy.queue_size = 256;
	if (!dg_is_pow2(c->lazy.queue_size) || c->lazy.queue_size < 2 || c->lazy.queue_size > 65536)
		return -EINVAL;
	if (!c->lazy.timeout_ns)
		c->lazy.timeout_ns = 10000000ull;
	if (!w->page_size)
		w->page_size = 4096;
	if (w->page_size != 4096 && w->page_size != 65536 && w->page_size != (2ull << 20))
		return -EINVAL;
	if (!w->base && !w->size) {
		w->base = DEFAULT_WINDOW_BASE;
		w->size = DEFAULT_WINDOW_SIZE;
	}
	if (!w->size || !dg_is_aligned(w->base, w->page_size) ||
	    !dg_is_aligned(w->size, w->page_size) || w->size / w->page_size > FLAT_MAX_PAGES ||
	    w->base + (w->size - 1) < w->base)
		return -EINVAL;
	if (w->direct || w->direct_size) {
		if (!w->direct || !w->direct_size ||
		    !dg_is_aligned((uintptr_t)w->direct, w->page_size) ||
		    !dg_is_aligned(w->direct_size, w->page_size) || w->direct_size >= w->size)
			return -EINVAL;
	}
	if (c->policy == DG_DMA_WINDOW && w->base + (w->size - 1) > c->dma_mask)
		return -EINVAL; /* the device cannot reach its own window */
	if (!c->bounce.area_size)
		c->bounce.area_size = 1ull << 20;
	if (!dg_is_pow2(c->bounce.area_size) || c->bounce.area_size < BOUNCE_MAX ||
	    c->bounce.area_size > (1ull << 30))
		return -EINVAL;
	return 0;
}

/* May @policy be used by a device with @flags now? */
static int policy_allowed(const struct dg_dma *dma, unsigned int flags, enum dg_dma_policy p)
{
	if ((unsigned int)p >= DG_DMA_NR_POLICIES)
		return -EINVAL;
	if ((flags & DG_DMA_DEV_UNTRUSTED) && p != DG_DMA_STRICT && p != DG_DMA_BOUNCE)
		return -EPERM;
	if (p == DG_DMA_IDENTITY && dma->force_translation &&
	    !(flags & DG_DMA_DEV_TRANSLATION_OPT_OUT))
		return -EPERM;
	return 0;
}

static void pstate_destroy(struct dg_dma_dev *dd, struct pstate *ps)
{
	dma_lazy_destroy(ps->lazy);
	dma_bounce_destroy(dd, ps->sp, ps->bounce);
	if (ps->win.direct_size)
		atomic_fetch_sub_explicit(&dd->persistent, ps->win.direct_size,
					  memory_order_relaxed);
	dma_space_destroy(ps->sp);
	memset(ps, 0, sizeof(*ps));
}

/*
 * Build the state of @c->policy. The device is not attached yet. Uses dd->mask, dd->reference
 * (set from @c by the caller before).
 */
static int pstate_build(struct dg_dma_dev *dd, const struct dg_dma_dev_config *c, struct pstate *ps)
{
	struct dg_pt_geometry geo = c->geo;
	int r = 0;

	memset(ps, 0, sizeof(*ps));
	ps->policy = c->policy;
	switch (c->policy) {
	case DG_DMA_IDENTITY:
		ps->ops = &dma_identity_ops;
		return 0;
	case DG_DMA_STRICT:
	case DG_DMA_LAZY:
		ps->ops = &dma_strict_ops;
		break;
	case DG_DMA_BOUNCE:
		ps->ops = &dma_bounce_ops;
		break;
	case DG_DMA_POOL:
		ps->ops = &dma_pool_ops;
		break;
	case DG_DMA_WINDOW: {
		const struct dg_dma_window_config *w = &c->window;

		ps->ops = &dma_window_ops;
		memset(&geo, 0, sizeof(geo));
		geo.format = DG_PT_FMT_FLAT;
		geo.granule = w->page_size;
		geo.window_base = w->base;
		geo.window_size = w->size;
		r = dma_space_create(dd, &geo, w->base + w->direct_size, w->base + (w->size - 1),
				     &ps->sp);
		if (r)
			return r;
		ps->win.base = w->base;
		ps->win.size = w->size;
		ps->win.page = w->page_size;
		ps->win.direct = (uintptr_t)w->direct;
		ps->win.direct_size = w->direct_size;
		if (w->direct_size) {
			r = dg_domain_map(ps->sp->dom, w->base, (uintptr_t)w->direct,
					  w->direct_size, DG_PROT_READ | DG_PROT_WRITE, NULL);
			if (r) {
				ps->win.direct_size = 0;
				goto fail;
			}
			atomic_fetch_add_explicit(&dd->persistent, w->direct_size,
						  memory_order_relaxed);
		}
		return 0;
	}
	}
	r = dma_space_create(dd, &geo, 0, UINT64_MAX, &ps->sp);
	if (r)
		return r;
	if (c->policy == DG_DMA_LAZY)
		r = dma_lazy_create(dd, &ps->lazy);
	else if (c->policy == DG_DMA_BOUNCE)
		r = dma_bounce_create(dd, ps->sp, &ps->bounce);
	if (r)
		goto fail;
	return 0;
fail:
	pstate_destroy(dd, ps);
	return r;
}

static void pstate_save(struct dg_dma_dev *dd, struct pstate *ps)
{
	ps->policy = dd->policy;
	ps->ops = dd->ops;
	ps->sp = dd->sp;
	ps->lazy = dd->lazy;
	ps->bounce = dd->bounce;
	ps->win = dd->win;
}

static void pstate_install(struct dg_dma_dev *dd, const struct pstate *ps)
{
	dd->policy = ps->policy;
	dd->ops = ps->ops;
	dd->sp = ps->sp;
	dd->lazy = ps->lazy;
	dd->bounce = ps->bounce;
	dd->win = ps->win;
}

static int context_enter(struct dg_dma_dev *dd, const struct pstate *ps)
{
	return ps->sp ? dg_device_attach(dd->dev, ps->sp->dom) : dg_device_passthrough(dd->dev);
}

/* Free zombies (old states whose device never confirmed leaving them) that can go now. */
static void zombies_reap(struct dg_dma_dev *dd)
{
	struct dma_zombie **pz = &dd->zombies, *z;

	while ((z = *pz)) {
		if (z->ps.sp && dg_device_domain(dd->dev) == z->ps.sp->dom) {
			pz = &z->next;
			continue;
		}
		if (z->ps.sp && dg_device_sync(dd->dev)) {
			pz = &z->next;
			continue;
		}
		*pz = z->next;
		pstate_destroy(dd, &z->ps);
		free(z);
	}
}

int dma_dev_busy(struct dg_dma_dev *dd)
{
	if (dma_dev_live(dd) || atomic_load_explicit(&dd->iova_states, memory_order_relaxed) ||
	    atomic_load_explicit(&dd->nr_pools, memory_order_relaxed) || dma_open_batches(dd))
		return -EBUSY;
	if (atomic_load_explicit(&dd->nr_quarantined, memory_order_relaxed) &&
	    dma_quarantine_retry(dd, true))
		return -ETIMEDOUT;
	if (dd->lazy && dma_lazy_drain(dd, dd->lazy))
		return -ETIMEDOUT;
	return 0;
}

/* Move an idle device to configuration @c (dma->lock held). */
static int dev_switch(struct dg_dma_dev *dd, const struct dg_dma_dev_config *c)
{
	uint64_t oldmask = dd->mask;
	bool oldref = dd->reference;
	struct pstate neu, old;
	int r;

	r = dma_dev_busy(dd);
	if (r)
		return r;
	dd->mask = c->dma_mask;
	dd->reference = c->flags & DG_DMA_DEV_LINUX_REFERENCE;
	r = pstate_build(dd, c, &neu);
	if (r) {
		dd->mask = oldmask;
		dd->reference = oldref;
		return r;
	}
	r = context_enter(dd, &neu);
	if (r && r != -ETIMEDOUT) {
		pstate_destroy(dd, &neu);
		dd->mask = oldmask;
		dd->reference = oldref;
		return r;
	}
	pstate_save(dd, &old);
	pstate_install(dd, &neu);
	dd->cfg = *c;
	dd->max_seg = c->max_seg_size;
	dd->boundary = c->seg_boundary;
	if (r) { /* -ETIMEDOUT: the old state may still be referenced by the device */
		struct dma_zombie *z = calloc(1, sizeof(*z));

		if (z) {
			z->ps = old;
			z->next = dd->zombies;
			dd->zombies = z;
		} /* else leak it: freeing it could let the device reach freed memory */
		return r;
	}
	pstate_destroy(dd, &old);
	zombies_reap(dd);
	return 0;
}

struct dg_dma_dev *dg_dma_dev_create(struct dg_dma *dma, struct dg_device *dev,
				     const struct dg_dma_dev_config *cfg)
{
	struct dg_dma_dev_config c;
	struct dg_dma_dev *dd;
	struct pstate ps;
	int r;

	if (!dma || !dev || dg_device_iommu(dev) != dma->mmu) {
		errno = EINVAL;
		return NULL;
	}
	if (cfg)
		c = *cfg;
	else
		dg_dma_dev_config_init(&c);
	r = config_check(&c);
	if (r) {
		errno = -r;
		return NULL;
	}
	dd = calloc(1, sizeof(*dd));
	if (!dd) {
		errno = ENOMEM;
		return NULL;
	}
	dd->dma = dma;
	dd->dev = dev;
	dd->rid = dg_device_rid(dev);
	dd->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed);
	dd->cfg = c;
	dd->mask = c.dma_mask;
	dd->max_seg = c.max_seg_size;
	dd->boundary = c.seg_boundary;
	dd->reference = c.flags & DG_DMA_DEV_LINUX_REFERENCE;
	pthread_mutex_init(&dd->pool_lock, NULL);
	pthread_mutex_init(&dd->q_lock, NULL);
	pthread_mutex_init(&dd->coh_lock, NULL);

	pthread_mutex_lock(&dma->lock);
	for (struct dg_dma_dev *o = dma->devs; o; o = o->next)
		if (o->dev == dev) {
			r = -EBUSY;
			goto fail;
		}
	r = policy_allowed(dma, c.flags, c.policy);
	if (r)
		goto fail;
	r = pstate_build(dd, &c, &ps);
	if (r)
		goto fail;
	r = context_enter(dd, &ps);
	if (r) {
		if (r == -ETIMEDOUT)
			dg_device_block(dd->dev);
		pstate_destroy(dd, &ps);
		goto fail;
	}
	pstate_install(dd, &ps);
	dd->next = dma->devs;
	dma->devs = dd;
	pthread_mutex_unlock(&dma->lock);
	return dd;
fail:
	pthread_mutex_unlock(&dma->lock);
	pthread_mutex_destroy(&dd->pool_lock);
	pthread_mutex_destroy(&dd->q_lock);
	pthread_mutex_destroy(&dd->coh_lock);
	free(dd);
	errno = -r;
	return NULL;
}

int dg_dma_dev_destroy(struct dg_dma_dev *dd)
{
	struct dg_dma *dma;
	struct dg_dma_dev **pd;
	struct pstate old;
	int r;

	if (!dd)
		return -EINVAL;
	dma = dd->dma;
	pthread_mutex_lock(&dma->lock);
	r = dma_dev_busy(dd);
	if (!r)
		r = dg_device_block(dd->dev);
	if (r) {
		pthread_mutex_unlock(&dma->lock);
		return dma_err(dd, r);
	}
	for (pd = &dma->devs; *pd != dd; pd = &(*pd)->next)
		;
	*pd = dd->next;
	pthread_mutex_unlock(&dma->lock);
	pstate_save(dd, &old);
	pstate_destroy(dd, &old);
	zombies_reap(dd);
	while (dd->zombies) { /* the device is blocked and confirmed: nothing references them */
		struct dma_zombie *z = dd->zombies;

		dd->zombies = z->next;
		pstate_destroy(dd, &z->ps);
		free(z);
	}
	dma_tstats_free(dd);
	pthread_mutex_destroy(&dd->pool_lock);
	pthread_mutex_destroy(&dd->q_lock);
	pthread_mutex_destroy(&dd->coh_lock);
	free(dd);
	return 0;
}

int dg_dma_dev_configure(struct dg_dma_dev *dd, const struct dg_dma_dev_config *cfg)
{
	struct dg_dma_dev_config c;
	int r;

	if (!dd)
		return -EINVAL;
	if (!cfg)
		return dma_err(dd, -EINVAL);
	c = *cfg;
	r = config_check(&c);
	if (r)
		return dma_err(dd, r);
	pthread_mutex_lock(&dd->dma->lock);
	r = policy_allowed(dd->dma, c.flags, c.policy);
	if (!r)
		r = dev_switch(dd, &c);
	pthread_mutex_unlock(&dd->dma->lock);
	return r ? dma_err(dd, r) : 0;
}

int dg_dma_dev_set_policy(struct dg_dma_dev *dd, enum dg_dma_policy policy)
{
	struct dg_dma_dev_config c;
	int r;

	if (!dd)
		return -EINVAL;
	c = dd->cfg;
	c.policy = policy;
	r = config_check(&c);
	if (r)
		return dma_err(dd, r);
	pthread_mutex_lock(&dd->dma->lock);
	r = policy_allowed(dd->dma, c.flags, policy);
	if (!r)
		r = dev_switch(dd, &c);
	pthread_mutex_unlock(&dd->dma->lock);
	return r ? dma_err(dd, r) : 0;
}

/* Forced translation turned on: identity -> strict (dma->lock held, device checked idle). */
int dma_dev_force_strict(struct dg_dma_dev *dd)
{
	struct dg_dma_dev_config c = dd->cfg;

	c.policy = DG_DMA_STRICT;
	return dev_switch(dd, &c);
}

void dg_dma_dev_get_config(const struct dg_dma_dev *dd, struct dg_dma_dev_config *cfg)
{
	if (dd && cfg)
		*cfg = dd->cfg;
}

enum dg_dma_policy dg_dma_dev_policy(const struct dg_dma_dev *dd)
{
	return dd ? dd->policy : DG_DMA_IDENTITY;
}

struct dg_device *dg_dma_dev_device(const struct dg_dma_dev *dd)
{
	return dd ? dd->dev : NULL;
}

struct dg_domain *dg_dma_dev_domain(const struct dg_dma_dev *dd)
{
	return dd && dd->sp ? dd->sp->dom : NULL;
}
