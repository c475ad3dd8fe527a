/* SPDX-License-Identifier: MIT */
/*
 * The attack suite catches a policy that grants a device more than a mapping's direction
 * allows (bench/attack: attack_perm, the oracle's documented exposure). The library's policy
 * is correct, so the broken one is forged: after the driver's map (strict), the buffer's page
 * is mapped again through the domain readable and writable, as a policy that ignored the
 * direction would have mapped it. Then the perm attack's steps run:
 *
 *  - a device-write-only (from-device) buffer: the device first reads back what it wrote
 *    legitimately - no breach, which is why a read alone cannot tell (before session 12 the
 *    perm attack stopped there, and such a policy passed as protected) - then the kernel
 *    writes the buffer again (data the write-only mapping grants the device no access to)
 *    and the read is an undocumented breach: VULNERABLE;
 *  - a device-read-only (to-device) buffer the device writes: an undocumented breach too.
 *    The buffer's own bytes are not "the rest of a mapped page" (documented sub-page
 *    exposure): before session 12 the oracle filed them there and the run said documented;
 *  - the same steps on the correct mappings: refused, every refusal recorded, protected.
 */
#include "attack.h"
#include "world.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The forged policy: @m's page mapped readable and writable (the IOTLB entry of the correct
 * mapping invalidated first). */
static void forge_rw(struct atk_world *w, const struct atk_map *m)
{
	struct dg_domain *dom = dg_dma_dev_domain(w->dd[0]);
	uint64_t iova = m->dma & ~(uint64_t)(W_PAGE - 1), un;
	uintptr_t host = (uintptr_t)m->buf & ~(uintptr_t)(W_PAGE - 1);
	struct dg_pt_gather g;

	assert_non_null(dom);
	dg_pt_gather_init(&g);
	assert_int_equal(dg_domain_unmap(dom, iova, W_PAGE, &g, &un), 0);
	assert_int_equal(dg_iommu_flush_gather(w->mmu, dom, &g), 0);
	assert_int_equal(dg_domain_map(dom, iova, host, W_PAGE, DG_PROT_READ | DG_PROT_WRITE, NULL),
			 0);
}

/* One case: the world (strict, one device), its result and the buffer under attack. */
struct perm_case {
	struct atk_config cfg;
	struct atk_world w;
	struct atk_result res;
	struct atk_map *m;
	bool broken;
};

/* The world, and a 2 KiB buffer mapped for @dir (then forged readable and writable when
 * @broken): what the perm attack's steps find. */
static void case_start(struct perm_case *c, enum dg_dma_dir dir, bool broken)
{
	memset(c, 0, sizeof(*c));
	c->cfg = (struct atk_config){.virtual_clock = true, .log = stderr};
	c->broken = broken;
	assert_int_equal(world_init(&c->w, ATK_POL_STRICT, &c->cfg, &c->res, 1, 1), 0);
	c->res.policy = ATK_POL_STRICT;
	c->res.attack = ATK_PERM;
	c->m = drv_map(&c->w, 0, 2048, 0, dir, false);
	assert_non_null(c->m);
	if (broken)
		forge_rw(&c->w, c->m);
}

/* Unmapped and finished: no legitimate step failed, every fault as expected, and the verdict
 * VULNERABLE exactly when the mapping was forged. */
static void case_finish(struct perm_case *c)
{
	assert_int_equal(drv_unmap(&c->w, c->m), 0);
	world_finish(&c->w);
	assert_int_equal(c->res.legit_failures, 0);
	assert_int_equal(c->res.faults_missing + c->res.faults_unexpected, 0);
	assert_int_equal(c->res.verdict, c->broken ? ATK_VULNERABLE : ATK_PROTECTED);
	world_fini(&c->w);
}

/* The from-device buffer: a read-back of the device's own data proves nothing, a read of what
 * the kernel wrote there is a breach outside every documented exposure. */
static void from_device(bool broken)
{
	const int want = broken ? 0 : -EACCES;
	struct perm_case c;

	case_start(&c, DG_DMA_FROM_DEVICE, broken);
	assert_int_equal(dev_access(&c.w, 0, false, c.m->dma, 2048, NULL), want);
	assert_int_equal(c.res.breaches, 0);
	drv_kernel_write(&c.w, c.m);
	assert_int_equal(dev_access(&c.w, 0, false, c.m->dma, 2048, NULL), want);
	assert_int_equal(dev_access(&c.w, 0, false, c.m->dma + 64, 64, NULL), want);
	assert_int_equal(c.res.breaches, broken ? 2 : 0);
	assert_int_equal(c.res.undocumented, broken ? 2 : 0);
	case_finish(&c);
}

/* The to-device buffer: a write that lands in it is a breach, not the sub-page exposure. */
static void to_device(bool broken)
{
	const int want = broken ? 0 : -EACCES;
	struct perm_case c;

	case_start(&c, DG_DMA_TO_DEVICE, broken);
	assert_int_equal(dev_access(&c.w, 0, true, c.m->dma, 2048, NULL), want);
	assert_int_equal(dev_access(&c.w, 0, true, c.m->dma + 2048 - 64, 64, NULL), want);
	assert_int_equal(c.res.breaches, broken ? 2 : 0);
	assert_int_equal(c.res.undocumented, broken ? 2 : 0);
	assert_int_equal(c.res.documented[ATK_DOC_SUBPAGE], 0);
	/* the rest of the page stays the documented sub-page exposure */
	if (broken) {
		assert_int_equal(dev_access(&c.w, 0, true, c.m->dma + 2048, 64, NULL), 0);
		assert_int_equal(c.res.documented[ATK_DOC_SUBPAGE], 1);
	}
	case_finish(&c);
}

static void test_from_device_read(void **state)
{
	(void)state;
	from_device(false);
	from_device(true);
}

static void test_to_device_write(void **state)
{
	(void)state;
	to_device(false);
	to_device(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_from_device_read),
		cmocka_unit_test(test_to_device_write),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
