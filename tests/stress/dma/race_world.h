/* SPDX-License-Identifier: MIT */
/*
 * tests/stress/dma/race_world.h - the IOMMU, DMA layer, device and DMA device that the
 * dma stress tests (unmap_race_stress.c, claim_race_stress.c, and through
 * race_world_open_cfg() the bounce ones, bounce_cache_stress.c and bounce_reclaim_stress.c)
 * set up and tear down around their racers: one device, the IOMMU's log off.
 */
#ifndef DG_TESTS_STRESS_DMA_RACE_WORLD_H
#define DG_TESTS_STRESS_DMA_RACE_WORLD_H

#include <dmaguard/dev.h>
#include <dmaguard/dma.h>
#include <dmaguard/iommu.h>

#include <stdbool.h>

struct race_world {
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
};

/* A device of configuration @c; the DMA layer without its housekeeping thread when
 * @no_housekeeping; the device acknowledging while idle when @idle (it never holds up a
 * wait). 0 when every object was made (errno says why one was not). */
static inline int race_world_open_cfg(struct race_world *w, const struct dg_dma_dev_config *c,
				      bool no_housekeeping, bool idle)
{
	struct dg_iommu_config ic;
	struct dg_dma_config dc = {.no_housekeeping = true};

	dg_iommu_config_init(&ic);
	ic.log = NULL;
	w->mmu = dg_iommu_create(&ic);
	w->dma = w->mmu ? dg_dma_create(w->mmu, no_housekeeping ? &dc : NULL) : NULL;
	w->dev = w->mmu ? dg_device_create(w->mmu, 1) : NULL;
	w->dd = w->dma && w->dev ? dg_dma_dev_create(w->dma, w->dev, c) : NULL;
	if (w->dd && idle)
		dg_dev_set_auto_offline(w->dev, true);
	return w->dd ? 0 : -1;
}

/* A device under @pol (its defaults). */
static inline int race_world_open(struct race_world *w, enum dg_dma_policy pol)
{
	struct dg_dma_dev_config c;

	dg_dma_dev_config_init(&c);
	c.policy = pol;
	return race_world_open_cfg(w, &c, false, false);
}

/* Destroy all of it; the number of destroys that failed (a leak or an open batch). */
static inline int race_world_close(struct race_world *w)
{
	int bad = 0;

	if (dg_dma_dev_destroy(w->dd))
		bad++;
	dg_device_destroy(w->dev);
	if (dg_dma_destroy(w->dma))
		bad++;
	dg_iommu_destroy(w->mmu);
	return bad;
}

#endif /* DG_TESTS_STRESS_DMA_RACE_WORLD_H */
