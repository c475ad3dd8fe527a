/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/test_env.h - one IOMMU, one domain and one device (rid 1) attached to it,
 * for the engine's unit tests that drive a device by hand; env_fini() checks that every fault
 * was expected and that the device's IOTLB is consistent before it tears them down. Include
 * after cmocka.h and iommu/iommu_internal.h.
 */
#ifndef DG_TEST_ENV_H
#define DG_TEST_ENV_H

#include <errno.h>
#include <stdio.h>

struct env {
	struct dg_iommu *mmu;
	struct dg_domain *dom;
	struct dg_device *dev;
};

/* Create from @cfg, a domain of geometry @g, the device attached (@auto_offline: every DMA
   call of it ends offline, so it never holds up a wait). */
static void env_open(struct env *e, const struct dg_iommu_config *cfg,
		     const struct dg_pt_geometry *g, bool auto_offline)
{
	e->mmu = dg_iommu_create(cfg);
	assert_non_null(e->mmu);
	e->dom = dg_domain_create(e->mmu, g, NULL, NULL);
	assert_non_null(e->dom);
	e->dev = dg_device_create(e->mmu, 1);
	assert_non_null(e->dev);
	if (auto_offline)
		dg_dev_set_auto_offline(e->dev, true);
	assert_int_equal(dg_device_attach(e->dev, e->dom), 0);
}

static void env_fini(struct env *e)
{
	struct dg_fault f;

	dg_dev_offline(e->dev);
	assert_int_equal(dg_iommu_fault_pop(e->mmu, &f), -EAGAIN); /* every fault expected */
	assert_int_equal(iotlb_check(&e->dev->iotlb, stderr), 0);
	assert_int_equal(dg_device_block(e->dev), 0);
	dg_device_destroy(e->dev);
	assert_int_equal(dg_domain_destroy(e->dom), 0);
	dg_iommu_destroy(e->mmu);
}

#endif /* DG_TEST_ENV_H */
