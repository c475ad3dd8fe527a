/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iommu/test_objects.h - the objects of an engine unit test made and destroyed
 * one at a time: an IOMMU (log off, optional queue length and wait timeout), a VT-d domain
 * (48-bit input and output), a device driven from the test's thread, and the end of a test
 * with one domain and one device or none. Every constructor asserts it succeeded. Include after
 * cmocka.h and dmaguard/iommu.h, dmaguard/dev.h.
 */
#ifndef DG_TEST_OBJECTS_H
#define DG_TEST_OBJECTS_H

/* An IOMMU with the default configuration but no log; 0 keeps a default. */
static inline struct dg_iommu *mk_iommu(uint32_t inval_len, uint64_t timeout_ns)
{
	struct dg_iommu_config cfg;
	struct dg_iommu *mmu;

	dg_iommu_config_init(&cfg);
	cfg.log = NULL;
	if (inval_len)
		cfg.inval_queue_len = inval_len;
	if (timeout_ns)
		cfg.wait_timeout_ns = timeout_ns;
	mmu = dg_iommu_create(&cfg);
	assert_non_null(mmu);
	return mmu;
}

static inline struct dg_domain *mk_vtd(struct dg_iommu *mmu)
{
	struct dg_pt_geometry g = {.format = DG_PT_FMT_VTD_SS, .ias = 48, .oas = 48};
	struct dg_domain *dom = dg_domain_create(mmu, &g, NULL, NULL);

	assert_non_null(dom);
	return dom;
}

/* A device driven from the test's own thread: every DMA call ends offline. */
static inline struct dg_device *mk_dev(struct dg_iommu *mmu, uint32_t rid)
{
	struct dg_device *dev = dg_device_create(mmu, rid);

	assert_non_null(dev);
	dg_dev_set_auto_offline(dev, true);
	return dev;
}

/* A test's end: @dev (if any) blocked (the context change confirmed) and destroyed, @dom,
   @mmu. */
static inline void teardown(struct dg_iommu *mmu, struct dg_domain *dom, struct dg_device *dev)
{
	if (dev) {
		assert_int_equal(dg_device_block(dev), 0);
		dg_device_destroy(dev);
	}
	assert_int_equal(dg_domain_destroy(dom), 0);
	dg_iommu_destroy(mmu);
}

#endif /* DG_TEST_OBJECTS_H */
