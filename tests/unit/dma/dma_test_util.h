/* SPDX-License-Identifier: MIT */
/*
 * Shared set-up of the DMA layer's tests (unit, model, stress, fuzz): an IOMMU, a DMA layer
 * with a virtual clock and no housekeeping thread, and one device per fixture (the test's own,
 * or fixture_open()'s in f->dd and f->dev), page-aligned buffers.
 */
#ifndef DG_TESTS_DMA_TEST_UTIL_H
#define DG_TESTS_DMA_TEST_UTIL_H

#include <dmaguard/dev.h>
#include <dmaguard/dma.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct dma_fixture {
	struct dg_iommu *mmu;
	struct dg_dma *dma;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
	_Atomic uint64_t now_ns; /* the virtual clock */
};

static inline uint64_t fixture_clock(void *cookie)
{
	struct dma_fixture *f = cookie;

	return atomic_load_explicit(&f->now_ns, memory_order_relaxed);
}

static inline void fixture_advance(struct dma_fixture *f, uint64_t ns)
{
	atomic_fetch_add_explicit(&f->now_ns, ns, memory_order_relaxed);
}

/* The IOMMU of configuration @ic and the DMA layer over it. Returns 0 or -errno. */
static inline int fixture_init_iommu(struct dma_fixture *f, const struct dg_iommu_config *ic)
{
	struct dg_dma_config dc = {0};

	memset(f, 0, sizeof(*f));
	atomic_init(&f->now_ns, 1000000000ull);
	f->mmu = dg_iommu_create(ic);
	if (!f->mmu)
		return -errno;
	dc.no_housekeeping = true;
	dc.clock = fixture_clock;
	dc.clock_cookie = f;
	f->dma = dg_dma_create(f->mmu, &dc);
	return f->dma ? 0 : -errno;
}

/* The IOMMU (@reference: the Linux-like queue; @wait_timeout_ns: 0 = the default, else waits
 * give up after it) and DMA layer. Returns 0 or -errno. */
static inline int fixture_init(struct dma_fixture *f, bool reference, uint64_t wait_timeout_ns)
{
	struct dg_iommu_config ic;

	dg_iommu_config_init(&ic);
	ic.reference = reference;
	ic.log = NULL;
	if (wait_timeout_ns)
		ic.wait_timeout_ns = wait_timeout_ns;
	return fixture_init_iommu(f, &ic);
}

/* A device @rid with configuration @cfg (NULL: defaults with @policy). */
static inline struct dg_dma_dev *fixture_dev(struct dma_fixture *f, uint32_t rid,
					     enum dg_dma_policy policy,
					     const struct dg_dma_dev_config *cfg,
					     struct dg_device **devp)
{
	struct dg_dma_dev_config c;
	struct dg_device *dev = dg_device_create(f->mmu, rid);
	struct dg_dma_dev *dd;

	if (!dev)
		return NULL;
	if (cfg) {
		c = *cfg;
	} else {
		dg_dma_dev_config_init(&c);
		c.policy = policy;
	}
	dd = dg_dma_dev_create(f->dma, dev, &c);
	if (!dd) {
		int e = errno;

		dg_device_destroy(dev);
		errno = e;
		return NULL;
	}
	if (devp)
		*devp = dev;
	return dd;
}

/* @c: the defaults under @policy, its Linux-reference variant if @reference. */
static inline void fixture_config(struct dg_dma_dev_config *c, enum dg_dma_policy policy,
				  bool reference)
{
	dg_dma_dev_config_init(c);
	c->policy = policy;
	if (reference)
		c->flags = DG_DMA_DEV_LINUX_REFERENCE;
}

/* A device @rid under @policy (its Linux-reference variant if @reference) that acknowledges
 * while idle (auto-offline), so a test's waits need no device thread. */
static inline struct dg_dma_dev *fixture_idle_dev(struct dma_fixture *f, uint32_t rid,
						  enum dg_dma_policy policy, bool reference,
						  struct dg_device **devp)
{
	struct dg_dma_dev_config c;
	struct dg_dma_dev *dd;

	fixture_config(&c, policy, reference);
	dd = fixture_dev(f, rid, policy, &c, devp);
	if (dd)
		dg_dev_set_auto_offline(dg_dma_dev_device(dd), true);
	return dd;
}

/* A device that did DMA and stays online without a quiescent point makes every wait time out
 * (dev.h): this one reaches a quiescent point and from then on acknowledges while idle, so
 * housekeeping can confirm what was parked. */
static inline void fixture_dev_answers(struct dg_device *dev)
{
	dg_dev_quiesce(dev);
	dg_dev_set_auto_offline(dev, true);
	dg_dev_offline(dev);
}

static inline void fixture_dev_destroy(struct dg_dma_dev *dd)
{
	struct dg_device *dev = dg_dma_dev_device(dd);

	if (dg_dma_dev_destroy(dd) == 0)
		dg_device_destroy(dev);
}

static inline void fixture_fini(struct dma_fixture *f)
{
	dg_dma_destroy(f->dma);
	dg_iommu_destroy(f->mmu);
}

/* A test's end: @dd's structure check (its result returned: 0 or -EUCLEAN), then @dd and
   the fixture destroyed. */
static inline int fixture_end(struct dma_fixture *f, struct dg_dma_dev *dd)
{
	int err = dg_dma_dev_check(dd, stderr);

	fixture_dev_destroy(dd);
	fixture_fini(f);
	return err;
}

/*
 * A test's whole set-up: fixture_init() (@reference, @wait_timeout_ns) and the fixture's own
 * device, rid 1, in f->dd and f->dev, of configuration @cfg (NULL: strict's defaults);
 * @idle: it acknowledges while idle (as fixture_idle_dev()), else it stays online after its
 * first DMA and every wait times out until fixture_dev_answers(). Returns 0 or -errno.
 */
static inline int fixture_open(struct dma_fixture *f, bool reference, uint64_t wait_timeout_ns,
			       const struct dg_dma_dev_config *cfg, bool idle)
{
	int e = fixture_init(f, reference, wait_timeout_ns);

	if (e)
		return e;
	f->dd = fixture_dev(f, 1, DG_DMA_STRICT, cfg, &f->dev);
	if (!f->dd) {
		e = -errno;
		fixture_fini(f);
		return e;
	}
	if (idle)
		dg_dev_set_auto_offline(f->dev, true);
	return 0;
}

/* The end of a fixture_open() test: fixture_end() of its device. */
static inline int fixture_close(struct dma_fixture *f)
{
	return fixture_end(f, f->dd);
}

/* Drain the fault queue; returns the number of records popped. */
static inline unsigned int fixture_faults(struct dma_fixture *f)
{
	struct dg_fault flt;
	unsigned int n = 0;

	while (dg_iommu_fault_pop(f->mmu, &flt) == 0)
		n++;
	return n;
}

/* @ptrs[i] = @mem + i pages, for i < @n: a bulk map's buffers, one a page. */
static inline void page_ptrs(void **ptrs, void *mem, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ptrs[i] = (uint8_t *)mem + i * 4096;
}

static inline void *page_alloc(size_t bytes)
{
	void *p = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);

	if (p)
		memset(p, 0, (bytes + 4095) & ~(size_t)4095);
	return p;
}

#endif /* DG_TESTS_DMA_TEST_UTIL_H */
