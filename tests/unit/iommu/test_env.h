/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/test_env.h - one IOMMU, one domain and one device (rid 1) attached to it,
 * for the engine's unit tests that drive a device by hand (env_open_direct(): a leaf-direct
 * one, online); env_fini() checks that every fault was expected and that the device's IOTLB
 * is consistent before it tears them down. Include after cmocka.h and iommu/iommu_internal.h.
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

/* Create from @cfg, a domain of geometry @g whose table pages come from @mem (NULL: the
   default allocator), the device attached (@auto_offline: every DMA call of it ends offline,
   so it never holds up a wait). */
static inline void env_open_mem(struct env *e, const struct dg_iommu_config *cfg,
				const struct dg_pt_geometry *g, const struct dg_pt_mem_ops *mem,
				void *cookie, bool auto_offline)
{
	e->mmu = dg_iommu_create(cfg);
	assert_non_null(e->mmu);
	e->dom = dg_domain_create(e->mmu, g, mem, cookie);
	assert_non_null(e->dom);
	e->dev = dg_device_create(e->mmu, 1);
	assert_non_null(e->dev);
	if (auto_offline)
		dg_dev_set_auto_offline(e->dev, true);
	assert_int_equal(dg_device_attach(e->dev, e->dom), 0);
}

static inline void env_open(struct env *e, const struct dg_iommu_config *cfg,
			    const struct dg_pt_geometry *g, bool auto_offline)
{
	env_open_mem(e, cfg, g, NULL, NULL, auto_offline);
}

/*
 * A leaf-direct device (cfg.iotlb_leaf_direct) attached to a VT-d domain (48 bits) whose
 * table pages come from @mem, and online; @qlen: the invalidation queue's slots (0: default).
 */
static inline void env_open_direct(struct env *e, const struct dg_pt_mem_ops *mem, void *cookie,
				   uint32_t qlen)
{
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_iommu_config cfg;

	dg_iommu_config_init(&cfg);
	cfg.log = NULL;
	if (qlen)
		cfg.inval_queue_len = qlen;
	cfg.iotlb_leaf_direct = true;
	env_open_mem(e, &cfg, &g, mem, cookie, false);
	dg_dev_online(e->dev);
	assert_true(e->dev->direct);
}

static inline void env_fini(struct env *e)
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
