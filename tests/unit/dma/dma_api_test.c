/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the DMA API: every policy's map/unmap as the device sees it, bad input (clear
 * errors, nothing changed, counted), scatter-gather layout, masks and segment limits,
 * coherent memory, the two-step API, batches, pools, bounce sub-page isolation, windows, the
 * lazy window bound (virtual clock), forced translation, untrusted devices, failure hooks and
 * the Linux-like reference. The device is emulated in the test thread (auto-offline, so waits
 * never wait for it); tests/stress/dma runs it in its own thread.
 */
/* Private headers first: cmocka defines a fail() macro their inline functions would meet. */
#include "dma/dma_internal.h"
#include "pt/pt_internal.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dma_test_util.h"

#include <stdio.h>

static const enum dg_dma_policy all_policies[] = {
	DG_DMA_IDENTITY, DG_DMA_STRICT, DG_DMA_LAZY, DG_DMA_WINDOW, DG_DMA_BOUNCE, DG_DMA_POOL,
};

struct t {
	struct dma_fixture f;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
};

static void setup_dev(struct t *t, enum dg_dma_policy p, const struct dg_dma_dev_config *cfg)
{
	assert_int_equal(fixture_init(&t->f, false, 0), 0);
	t->dd = fixture_dev(&t->f, 1, p, cfg, &t->dev);
	assert_non_null(t->dd);
	dg_dev_set_auto_offline(t->dev, true);
}

static void teardown_dev(struct t *t)
{
	assert_int_equal(fixture_end(&t->f, t->dd), 0);
}

static struct dg_dma_stats stats(struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st;
}

/* ---- names and configuration ------------------------------------------------------------- */

static void test_policy_names(void **state)
{
	enum dg_dma_policy p;

	(void)state;
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++) {
		assert_int_equal(dg_dma_policy_parse(dg_dma_policy_name(i), &p), 0);
		assert_int_equal(p, i);
	}
	assert_null(dg_dma_policy_name(DG_DMA_NR_POLICIES));
	assert_int_equal(dg_dma_policy_parse("none", &p), -EINVAL);
}

static void test_config_errors(void **state)
{
	struct dma_fixture f;
	struct dg_dma_dev_config c;
	struct dg_device *dev;
	struct dg_dma_dev *dd, *dd2;

	(void)state;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	dev = dg_device_create(f.mmu, 7);
	assert_non_null(dev);
	dg_dma_dev_config_init(&c);
	c.dma_mask = 0x12345;
	errno = 0;
	assert_null(dg_dma_dev_create(f.dma, dev, &c));
	assert_int_equal(errno, EINVAL);
	dg_dma_dev_config_init(&c);
	c.seg_boundary = 1000;
	assert_null(dg_dma_dev_create(f.dma, dev, &c));
	assert_int_equal(errno, EINVAL);
	dg_dma_dev_config_init(&c);
	c.lazy.queue_size = 3;
	assert_null(dg_dma_dev_create(f.dma, dev, &c));
	assert_int_equal(errno, EINVAL);
	dg_dma_dev_config_init(&c);
	c.window.page_size = 8192;
	assert_null(dg_dma_dev_create(f.dma, dev, &c));
	assert_int_equal(errno, EINVAL);
	dg_dma_dev_config_init(&c);
	c.bounce.area_size = 3 << 18;
	assert_null(dg_dma_dev_create(f.dma, dev, &c));
	assert_int_equal(errno, EINVAL);
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_WINDOW;
	c.dma_mask = 0xffffffu; /* 16 MiB: the default window at 2 GiB is out of reach */
	assert_null(dg_dma_dev_create(f.dma, dev, &c));
	assert_int_equal(errno, EINVAL);
	dg_dma_dev_config_init(&c);
	c.flags = DG_DMA_DEV_UNTRUSTED | DG_DMA_DEV_TRANSLATION_OPT_OUT;
	c.policy = DG_DMA_STRICT;
	assert_null(dg_dma_dev_create(f.dma, dev, &c));
	assert_int_equal(errno, EPERM);
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++) {
		dg_dma_dev_config_init(&c);
		c.flags = DG_DMA_DEV_UNTRUSTED;
		c.policy = all_policies[i];
		dd = dg_dma_dev_create(f.dma, dev, &c);
		if (c.policy == DG_DMA_STRICT || c.policy == DG_DMA_BOUNCE) {
			assert_non_null(dd);
			assert_int_equal(dg_dma_dev_set_policy(dd, DG_DMA_LAZY), -EPERM);
			assert_int_equal(dg_dma_dev_policy(dd), c.policy);
			assert_int_equal(dg_dma_dev_destroy(dd), 0);
		} else {
			assert_null(dd);
			assert_int_equal(errno, EPERM);
		}
	}
	dg_dma_dev_config_init(&c);
	dd = dg_dma_dev_create(f.dma, dev, &c);
	assert_non_null(dd);
	dd2 = dg_dma_dev_create(f.dma, dev, &c);
	assert_null(dd2);
	assert_int_equal(errno, EBUSY);
	assert_int_equal(dg_dma_destroy(f.dma), -EBUSY);
	assert_int_equal(dg_dma_dev_set_policy(dd, (enum dg_dma_policy)9), -EINVAL);
	assert_int_equal(dg_dma_dev_destroy(dd), 0);
	dg_device_destroy(dev);
	fixture_fini(&f);
}

/* ---- map / unmap as the device sees it ------------------------------------------------------- */

/* Policies that translate streaming maps through per-mapping page-table entries. */
static bool per_mapping(enum dg_dma_policy p)
{
	return p == DG_DMA_STRICT || p == DG_DMA_LAZY || p == DG_DMA_WINDOW || p == DG_DMA_POOL;
}

static void test_map_each_policy(void **state)
{
	(void)state;
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++) {
		enum dg_dma_policy p = all_policies[i];
		uint8_t *buf = page_alloc(8192), out[300];
		uint64_t dma, dma2;
		struct t t;
		int r;

		setup_dev(&t, p, NULL);
		for (unsigned int k = 0; k < 8192; k++)
			buf[k] = (uint8_t)(k * 7 + 1);
		/* to-device: the device reads the bytes; it may not write them */
		assert_int_equal(dg_dma_map_single(t.dd, buf + 100, 300, DG_DMA_TO_DEVICE, 0, &dma),
				 0);
		memset(out, 0, sizeof(out));
		assert_int_equal(dg_dev_read(t.dev, dma, out, 300), 0);
		assert_memory_equal(out, buf + 100, 300);
		r = dg_dev_write(t.dev, dma, out, 16);
		if (p == DG_DMA_IDENTITY)
			assert_int_equal(r, 0);
		else
			assert_int_equal(r, -EACCES);
		/* from-device: the device writes; the CPU sees it after unmap */
		assert_int_equal(
			dg_dma_map_single(t.dd, buf + 5000, 200, DG_DMA_FROM_DEVICE, 0, &dma2), 0);
		memset(out, 0xab, sizeof(out));
		assert_int_equal(dg_dev_write(t.dev, dma2, out, 200), 0);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma2, 200, DG_DMA_FROM_DEVICE, 0, NULL),
				 0);
		for (unsigned int k = 0; k < 200; k++)
			assert_int_equal(buf[5000 + k], 0xab);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 300, DG_DMA_TO_DEVICE, 0, NULL), 0);
		/* strict and window: the translation is gone as soon as unmap returned */
		if (p == DG_DMA_STRICT || p == DG_DMA_WINDOW) {
			assert_int_equal(dg_dev_read(t.dev, dma, out, 16), -EFAULT);
			assert_true(fixture_faults(&t.f) >= 1);
		}
		/* bounce: the device never reached the buffer itself */
		if (p == DG_DMA_BOUNCE) {
			memset(buf, 0x5a, 8192);
			assert_int_equal(dg_dev_read(t.dev, dma, out, 300),
					 0); /* the stale shadow */
			for (unsigned int k = 0; k < 300; k++)
				assert_int_equal(out[k], (uint8_t)((k + 100) * 7 + 1));
		}
		struct dg_dma_stats st = stats(t.dd);
		assert_int_equal(st.maps, 2);
		assert_int_equal(st.unmaps, 2);
		assert_int_equal(st.live, 0);
		assert_int_equal(st.map_bytes, 500);
		assert_int_equal(st.policy, p);
		assert_true(st.exposes_all_memory == (p == DG_DMA_IDENTITY));
		if (per_mapping(p))
			assert_true(st.subpage_bytes >= 2 * 4096 - 500);
		if (p == DG_DMA_BOUNCE)
			assert_int_equal(st.subpage_bytes, 0);
		teardown_dev(&t);
		free(buf);
	}
}

/*
 * dg_dma_need_sync(): false exactly where the memory is coherent - a device write into a
 * live FROM_DEVICE mapping is visible to the CPU with no sync call - and true under bounce,
 * where the CPU sees it only after dg_dma_sync_for_cpu(). NULL: false.
 */
static void test_need_sync(void **state)
{
	(void)state;
	assert_false(dg_dma_need_sync(NULL));
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++) {
		enum dg_dma_policy p = all_policies[i];
		uint8_t *buf = page_alloc(4096), in[64];
		uint64_t dma;
		struct t t;

		setup_dev(&t, p, NULL);
		memset(buf, 0, 4096);
		memset(in, 0x3c, sizeof(in));
		assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_FROM_DEVICE, 0, &dma), 0);
		assert_int_equal(dg_dev_write(t.dev, dma, in, 64), 0);
		assert_true(dg_dma_need_sync(t.dd) == (p == DG_DMA_BOUNCE));
		if (!dg_dma_need_sync(t.dd)) {
			assert_memory_equal(buf, in, 64); /* coherent: no sync needed */
		} else {
			assert_int_equal(buf[0], 0); /* in the shadow until the sync */
			assert_int_equal(dg_dma_sync_for_cpu(t.dd, dma, 64, DG_DMA_FROM_DEVICE), 0);
			assert_memory_equal(buf, in, 64);
		}
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_FROM_DEVICE, 0, NULL),
				 0);
		teardown_dev(&t);
		free(buf);
	}
}

/*
 * Per-thread counter blocks: one thread alternates between more devices than its cache has
 * slots (generations collide in a slot, the last-used block changes every call), destroys one
 * and creates another (perhaps at the same address: the cache is keyed by generation), and
 * every device's counts stay exact.
 */
static void test_stats_many_devices(void **state)
{
	enum { NDEV = DMA_TLS_SLOTS + 3, ROUNDS = 5 };
	static uint8_t buf[4096] __attribute__((aligned(4096)));
	struct dg_dma_dev *dd[NDEV];
	struct dma_fixture f;
	uint64_t dma[NDEV];

	(void)state;
	assert_int_equal(fixture_init(&f, false, 0), 0);
	for (unsigned int i = 0; i < NDEV; i++) {
		dd[i] = fixture_dev(&f, 10 + i, i & 1 ? DG_DMA_STRICT : DG_DMA_IDENTITY, NULL,
				    NULL);
		assert_non_null(dd[i]);
	}
	for (unsigned int r = 0; r < ROUNDS; r++) {
		for (unsigned int i = 0; i < NDEV; i++) /* i + 1 maps of 64 + i bytes */
			for (unsigned int k = 0; k <= i; k++) {
				assert_int_equal(dg_dma_map_single(dd[i], buf + 64, 64 + i,
								   DG_DMA_TO_DEVICE, 0, &dma[i]),
						 0);
				assert_int_equal(dg_dma_unmap_single(dd[i], dma[i], 64 + i,
								     DG_DMA_TO_DEVICE, 0, NULL),
						 0);
			}
		for (unsigned int i = NDEV; i-- > 0;) /* and one refused unmap each */
			assert_int_equal(dg_dma_unmap_single(dd[i], 0, 64, DG_DMA_TO_DEVICE, 0,
							     NULL),
					 -ENOENT);
	}
	for (unsigned int i = 0; i < NDEV; i++) {
		struct dg_dma_stats st = stats(dd[i]);

		assert_int_equal(st.maps, ROUNDS * (i + 1));
		assert_int_equal(st.unmaps, ROUNDS * (i + 1));
		assert_int_equal(st.map_bytes, (uint64_t)ROUNDS * (i + 1) * (64 + i));
		assert_int_equal(st.err_not_mapped, ROUNDS);
		assert_int_equal(st.subpage_bytes,
				 i & 1 ? (uint64_t)ROUNDS * (i + 1) * (4096 - 64 - i) : 0);
		assert_int_equal(st.live, 0);
	}
	/* a new device in the place of the last one used starts from zero */
	fixture_dev_destroy(dd[0]);
	dd[0] = fixture_dev(&f, 10, DG_DMA_STRICT, NULL, NULL);
	assert_non_null(dd[0]);
	assert_int_equal(stats(dd[0]).maps, 0);
	assert_int_equal(dg_dma_map_single(dd[0], buf, 64, DG_DMA_FROM_DEVICE, 0, &dma[0]), 0);
	assert_int_equal(dg_dma_map_single(dd[1], buf, 64, DG_DMA_FROM_DEVICE, 0, &dma[1]), 0);
	assert_int_equal(dg_dma_unmap_single(dd[0], dma[0], 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_single(dd[1], dma[1], 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	assert_int_equal(stats(dd[0]).maps, 1);
	assert_int_equal(stats(dd[0]).unmaps, 1);
	assert_int_equal(stats(dd[1]).maps, ROUNDS * 2 + 1);
	for (unsigned int i = 0; i < NDEV; i++) {
		assert_int_equal(dg_dma_dev_check(dd[i], stderr), 0);
		fixture_dev_destroy(dd[i]);
	}
	fixture_fini(&f);
}

static void test_bad_unmaps(void **state)
{
	(void)state;
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++) {
		enum dg_dma_policy p = all_policies[i];
		struct dg_dma_batch b;
		uint8_t *buf, out[64];
		uint64_t dma;
		struct t t;

		if (p == DG_DMA_IDENTITY)
			continue; /* keeps no per-mapping state: see test_identity_checks */
		buf = page_alloc(4096);
		setup_dev(&t, p, NULL);
		memset(buf, 0x11, 4096);
		assert_int_equal(dg_dma_map_single(t.dd, buf + 64, 64, DG_DMA_TO_DEVICE, 0, &dma),
				 0);
		struct dg_dma_stats before = stats(t.dd);
		/* never mapped, inside the mapping, wrong size, wrong direction, wrong kind */
		assert_int_equal(dg_dma_unmap_single(t.dd, dma + 4096 * 16, 64, DG_DMA_TO_DEVICE, 0,
						     NULL),
				 -ENOENT);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma + 8, 56, DG_DMA_TO_DEVICE, 0, NULL),
				 -ENOENT);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 65, DG_DMA_TO_DEVICE, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_FROM_DEVICE, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_page(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 0, DG_DMA_TO_DEVICE, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, (enum dg_dma_dir)7, 0, NULL),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 1u << 9,
						     NULL),
				 -EINVAL);
		dg_dma_batch_begin(NULL, &b); /* a batch of no device */
		b.dev = (struct dg_dma_dev *)&b;
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, &b),
				 -EINVAL);
		struct dg_dma_stats after = stats(t.dd);
		assert_int_equal(after.err_not_mapped - before.err_not_mapped, 2);
		assert_int_equal(after.err_invalid - before.err_invalid, 7);
		assert_int_equal(after.live, 1);
		/* nothing changed: the device still reads it, the right unmap works once */
		assert_int_equal(dg_dev_read(t.dev, dma, out, 64), 0);
		assert_memory_equal(out, buf + 64, 64);
		assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL),
				 -ENOENT);
		teardown_dev(&t);
		free(buf);
	}
}

static void test_bad_maps(void **state)
{
	uint8_t buf[64];
	uint64_t dma;
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_STRICT, NULL);
	assert_int_equal(dg_dma_map_single(NULL, buf, 64, DG_DMA_TO_DEVICE, 0, &dma), -EINVAL);
	assert_int_equal(dg_dma_map_single(t.dd, NULL, 64, DG_DMA_TO_DEVICE, 0, &dma), -EINVAL);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 0, DG_DMA_TO_DEVICE, 0, &dma), -EINVAL);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 64, (enum dg_dma_dir)3, 0, &dma), -EINVAL);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, NULL), -EINVAL);
	assert_int_equal(dg_dma_map_single(t.dd, (void *)(uintptr_t)(UINT64_MAX - 10), 64,
					   DG_DMA_TO_DEVICE, 0, &dma),
			 -ERANGE);
	assert_int_equal(dg_dma_map_page(t.dd, buf + 1, 0, 16, DG_DMA_TO_DEVICE, 0, &dma), -EINVAL);
	struct dg_dma_stats st = stats(t.dd);
	assert_int_equal(st.err_invalid, 5);
	assert_int_equal(st.err_range, 1);
	assert_int_equal(st.maps, 0);
	teardown_dev(&t);
}

static void test_identity_checks(void **state)
{
	struct dg_dma_dev_config c;
	uint8_t *buf = page_alloc(4096);
	uint64_t dma;
	struct t t;

	(void)state;
	dg_dma_dev_config_init(&c);
	c.dma_mask = 0xffffffffu;
	setup_dev(&t, DG_DMA_IDENTITY, &c);
	/* host memory above 4 GiB cannot be reached by a 32-bit device without translation */
	if ((uintptr_t)buf > 0xffffffffu)
		assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, &dma),
				 -ERANGE);
	assert_int_equal(dg_dma_unmap_single(t.dd, 0, 64, DG_DMA_TO_DEVICE, 0, NULL), -ENOENT);
	assert_int_equal(dg_dma_unmap_single(t.dd, 1ull << 40, 64, DG_DMA_TO_DEVICE, 0, NULL),
			 -ERANGE);
	teardown_dev(&t);
	setup_dev(&t, DG_DMA_IDENTITY, NULL);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, &dma), 0);
	assert_int_equal(dma, (uintptr_t)buf);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	teardown_dev(&t);
	free(buf);
}

/* ---- masks, exhaustion, failure hooks ---------------------------------------------------------- */

static void test_mask32_and_exhaustion(void **state)
{
	const enum dg_dma_policy pols[] = {DG_DMA_STRICT, DG_DMA_LAZY, DG_DMA_POOL};

	(void)state;
	for (unsigned int i = 0; i < 3; i++) {
		struct dg_dma_dev_config c;
		uint8_t *buf = page_alloc(65536);
		uint64_t dmas[300], dma;
		unsigned int n = 0;
		struct t t;
		int r;

		dg_dma_dev_config_init(&c);
		c.policy = pols[i];
		c.dma_mask = 0xffffffu; /* 24-bit: 16 MiB of IOVA space */
		setup_dev(&t, c.policy, &c);
		for (;;) {
			r = dg_dma_map_single(t.dd, buf, 65536, DG_DMA_BIDIRECTIONAL, 0, &dma);
			if (r)
				break;
			assert_true(dma + 65535 <= 0xffffffu);
			assert_true(n < 300);
			dmas[n++] = dma;
		}
		assert_int_equal(r, -ENOSPC);
		assert_true(n >= 200); /* 16 MiB / 64 KiB, less IOVA 0 */
		struct dg_dma_stats st = stats(t.dd);
		assert_int_equal(st.err_iova_space, 1);
		assert_int_equal(st.live, n);
		/* the device keeps working after frees */
		assert_int_equal(dg_dma_unmap_single(t.dd, dmas[--n], 65536, DG_DMA_BIDIRECTIONAL,
						     0, NULL),
				 0);
		/* lazy: the IOVA comes back once a flush covering it completes */
		dg_dma_housekeep(t.f.dma);
		fixture_advance(&t.f, 20000000);
		dg_dma_housekeep(t.f.dma);
		dg_dma_housekeep(t.f.dma);
		assert_int_equal(dg_dma_map_single(t.dd, buf, 65536, DG_DMA_BIDIRECTIONAL, 0, &dma),
				 0);
		dmas[n++] = dma;
		while (n)
			assert_int_equal(dg_dma_unmap_single(t.dd, dmas[--n], 65536,
							     DG_DMA_BIDIRECTIONAL, 0, NULL),
					 0);
		teardown_dev(&t);
		free(buf);
	}
}

struct hook_state {
	enum dg_dma_fail_point point;
	int err;
	unsigned int calls;
};

static int hook_fail(void *cookie, enum dg_dma_fail_point point, uint32_t rid)
{
	struct hook_state *h = cookie;

	(void)rid;
	if (point != h->point)
		return 0;
	h->calls++;
	return h->err;
}

static void test_fail_hooks(void **state)
{
	static const struct {
		enum dg_dma_policy policy;
		enum dg_dma_fail_point point;
		int err;
	} cases[] = {
		{DG_DMA_STRICT, DG_DMA_FAIL_IOVA, -ENOSPC},
		{DG_DMA_STRICT, DG_DMA_FAIL_PT_MAP, -ENOMEM},
		{DG_DMA_LAZY, DG_DMA_FAIL_IOVA, -ENOMEM},
		{DG_DMA_WINDOW, DG_DMA_FAIL_IOVA, -ENOSPC},
		{DG_DMA_BOUNCE, DG_DMA_FAIL_SHADOW, -ENOSPC},
	};

	(void)state;
	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct hook_state hs = {cases[i].point, cases[i].err, 0};
		struct dg_dma_fail_hook hook = {hook_fail, &hs};
		uint8_t *buf = page_alloc(4096);
		uint64_t dma;
		void *coh;
		struct t t;

		setup_dev(&t, cases[i].policy, NULL);
		dg_dma_set_fail_hook(t.f.dma, &hook);
		assert_int_equal(dg_dma_map_single(t.dd, buf, 100, DG_DMA_TO_DEVICE, 0, &dma),
				 cases[i].err);
		assert_int_equal(hs.calls, 1);
		struct dg_dma_stats st = stats(t.dd);
		assert_int_equal(st.live, 0);
		if (cases[i].point == DG_DMA_FAIL_SHADOW)
			assert_int_equal(st.err_shadow_space, 1);
		else if (cases[i].err == -ENOSPC)
			assert_int_equal(st.err_iova_space, 1);
		else
			assert_int_equal(st.err_nomem, 1);
		assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
		dg_dma_set_fail_hook(t.f.dma, NULL);
		assert_int_equal(dg_dma_map_single(t.dd, buf, 100, DG_DMA_TO_DEVICE, 0, &dma), 0);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 100, DG_DMA_TO_DEVICE, 0, NULL), 0);
		/* coherent memory failure */
		hs = (struct hook_state){DG_DMA_FAIL_ALLOC, -ENOMEM, 0};
		dg_dma_set_fail_hook(t.f.dma, &hook);
		errno = 0;
		coh = dg_dma_alloc_coherent(t.dd, 4096, &dma);
		assert_null(coh);
		assert_int_equal(errno, ENOMEM);
		dg_dma_set_fail_hook(t.f.dma, NULL);
		teardown_dev(&t);
		free(buf);
	}
}

/* ---- scatter-gather ------------------------------------------------------------------------------ */

/* The device reads every DMA segment; the concatenation equals the list's bytes. */
static void check_sg_bytes(struct t *t, const struct dg_dma_sg *sg, unsigned int nents,
			   unsigned int nr)
{
	uint64_t total = 0, pos = 0;
	uint8_t *want, *got;

	for (unsigned int i = 0; i < nents; i++)
		total += sg[i].len;
	want = malloc(total);
	got = malloc(total);
	for (unsigned int i = 0; i < nents; i++) {
		memcpy(want + pos, sg[i].addr, sg[i].len);
		pos += sg[i].len;
	}
	pos = 0;
	for (unsigned int i = 0; i < nr; i++) {
		assert_true(sg[i].dma_len > 0);
		assert_true(pos + sg[i].dma_len <= total);
		assert_int_equal(dg_dev_read(t->dev, sg[i].dma_addr, got + pos, sg[i].dma_len), 0);
		pos += sg[i].dma_len;
	}
	assert_int_equal(pos, total);
	assert_memory_equal(got, want, total);
	for (unsigned int i = nr; i < nents; i++)
		assert_int_equal(sg[i].dma_len, 0);
	free(want);
	free(got);
}

static void test_sg_mixed(void **state)
{
	(void)state;
	for (unsigned int pi = 0; pi < DG_DMA_NR_POLICIES; pi++) {
		enum dg_dma_policy p = all_policies[pi];
		uint8_t *mem = page_alloc(16 * 4096);
		struct dg_dma_sg sg[6];
		unsigned int nr;
		struct t t;

		setup_dev(&t, p, NULL);
		for (unsigned int k = 0; k < 16 * 4096; k++)
			mem[k] = (uint8_t)(k ^ (k >> 8));
		/* mixed offsets and sizes; entries 1+2 meet on a page boundary (mergeable) */
		sg[0] = (struct dg_dma_sg){.addr = mem + 100, .len = 1000};
		sg[1] = (struct dg_dma_sg){.addr = mem + 3 * 4096 + 96, .len = 4000};
		sg[2] = (struct dg_dma_sg){.addr = mem + 8 * 4096, .len = 8192};
		sg[3] = (struct dg_dma_sg){.addr = mem + 5 * 4096 + 7, .len = 1};
		sg[4] = (struct dg_dma_sg){.addr = mem + 12 * 4096 + 4000, .len = 200};
		sg[5] = (struct dg_dma_sg){.addr = mem + 14 * 4096, .len = 4096};
		assert_int_equal(dg_dma_map_sg(t.dd, sg, 6, DG_DMA_TO_DEVICE, 0, &nr), 0);
		assert_true(nr >= 1 && nr <= 6);
		check_sg_bytes(&t, sg, 6, nr);
		if (per_mapping(p)) {
			/* one IOVA range: segments ascend; 1 and 2 merged (4000 + 8192) */
			for (unsigned int i = 1; i < nr; i++)
				assert_true(sg[i].dma_addr > sg[i - 1].dma_addr);
			assert_int_equal(nr, 5);
			assert_int_equal(sg[1].dma_len, 12192);
		}
		if (p == DG_DMA_BOUNCE)
			assert_int_equal(nr, 1); /* one shadow slot for the whole list */
		struct dg_dma_stats st = stats(t.dd);
		assert_int_equal(st.sg_maps, 1);
		assert_int_equal(st.map_bytes, 1000 + 4000 + 8192 + 1 + 200 + 4096);
		assert_int_equal(dg_dma_unmap_sg(t.dd, sg, 5, DG_DMA_TO_DEVICE, 0, NULL),
				 p == DG_DMA_IDENTITY ? 0 : -EINVAL);
		assert_int_equal(dg_dma_unmap_sg(t.dd, sg, 6, DG_DMA_TO_DEVICE, 0, NULL), 0);
		if (p != DG_DMA_IDENTITY) /* double unmap */
			assert_int_equal(dg_dma_unmap_sg(t.dd, sg, 6, DG_DMA_TO_DEVICE, 0, NULL),
					 -ENOENT);
		teardown_dev(&t);
		free(mem);
	}
}

/*
 * Page lists (whole aligned pages, the last may be shorter: a TSO send) take the one-store-
 * per-page path: the device reads every byte where it should, the segments merge up to the
 * device's limits exactly as for any list, and a list longer than the short path takes
 * (DMA_PAGE_LIST_MAX) behaves the same through the general one.
 */
static void test_sg_pages(void **state)
{
	uint8_t *mem = page_alloc(80 * 4096);
	struct dg_dma_sg sg[70];
	unsigned int nr;

	(void)state;
	for (unsigned int k = 0; k < 80 * 4096; k++)
		mem[k] = (uint8_t)(k * 13 + (k >> 12));
	for (unsigned int round = 0; round < 3; round++) {
		struct dg_dma_dev_config c;
		unsigned int n = round == 2 ? 70 : 17;
		struct t t;

		dg_dma_dev_config_init(&c);
		c.policy = DG_DMA_STRICT;
		if (round == 1) {
			c.max_seg_size = 8192;
			c.seg_boundary = 16383;
		}
		setup_dev(&t, DG_DMA_STRICT, &c);
		for (unsigned int i = 0; i < n; i++) /* shuffled pages, last one 1000 bytes */
			sg[i] = (struct dg_dma_sg){.addr = mem + ((i * 37) % 80) * 4096,
						   .len = i + 1 == n ? 1000 : 4096};
		assert_int_equal(dg_dma_map_sg(t.dd, sg, n, DG_DMA_TO_DEVICE, 0, &nr), 0);
		check_sg_bytes(&t, sg, n, nr);
		if (round == 1) {
			for (unsigned int i = 0; i < nr; i++) {
				uint64_t a = sg[i].dma_addr, e = a + sg[i].dma_len - 1;

				assert_true(sg[i].dma_len <= 8192);
				assert_int_equal(a & ~16383ull, e & ~16383ull);
			}
			assert_int_equal(nr, 9);
		} else {
			assert_int_equal(nr, round == 2 ? 5 : 2); /* 64 KiB segments */
			assert_int_equal(sg[0].dma_len, 65536);
		}
		for (unsigned int i = 1; i < nr; i++)
			assert_int_equal(sg[i].dma_addr, sg[i - 1].dma_addr + sg[i - 1].dma_len);
		assert_int_equal(dg_dma_unmap_sg(t.dd, sg, n, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(stats(t.dd).live, 0);
		teardown_dev(&t);
	}
	free(mem);
}

/*
 * A batch gives its IOVAs back in address order, highest first, whatever order the unmaps
 * came in, so the next maps get them ascending: a ring's buffers keep neighbouring IOVAs and
 * share page-table cache lines (docs/bench.md). Given back in unmap order, the order decays.
 */
static int cmp_desc(const void *a, const void *b)
{
	const struct iova_owned *x = a, *y = b;

	return x->iova < y->iova ? 1 : x->iova > y->iova ? -1 : 0;
}

/* dma_order_frees against qsort: runs up and down, random, every length up to the maximum. */
static void test_order_frees_model(void **state)
{
	static struct iova_owned a[DG_DMA_BATCH_MAX], want[DG_DMA_BATCH_MAX];
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	(void)state;
	for (unsigned int round = 0; round < 2000; round++) {
		uint32_t n = round % (DG_DMA_BATCH_MAX + 1), pattern = round % 5;
		uint32_t runs = 1 + round % 7;

		for (uint32_t i = 0; i < n; i++) {
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			uint64_t v;

			switch (pattern) {
			case 0: /* ascending */
				v = i;
				break;
			case 1: /* descending */
				v = n - i;
				break;
			case 2: /* a few ascending runs (a ring's wrap, rx then tx) */
				v = (uint64_t)(i % runs) * 100000 + i;
				break;
			case 3: /* runs both ways */
				v = (i / 16) % 2 ? (uint64_t)(1000 - i) * 7 : (uint64_t)i * 13 + 5;
				break;
			default: /* random */
				v = rng >> 20;
			}
			a[i] = (struct iova_owned){
				.iova = (v * 64 + i) << 12, .size = 4096, .token = v ^ i};
		}
		memcpy(want, a, n * sizeof(*a));
		qsort(want, n, sizeof(*want), cmp_desc);
		dma_order_frees(a, n);
		for (uint32_t i = 0; i < n; i++) {
			assert_int_equal(a[i].iova, want[i].iova);
			assert_int_equal(a[i].token, want[i].token); /* moved with its range */
		}
	}
}

static void test_iova_order(void **state)
{
	uint8_t *buf = page_alloc(64 * 4096);
	struct dg_dma_batch b;
	uint64_t dma[64], again[64];
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_STRICT, NULL);
	for (unsigned int i = 0; i < 64; i++) {
		assert_int_equal(dg_dma_map_single(t.dd, buf + i * 4096, 64, DG_DMA_FROM_DEVICE, 0,
						   &dma[i]),
				 0);
		assert_int_equal(dg_dev_write(t.dev, dma[i], "x", 1), 0); /* warm the IOTLB */
	}
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int i = 0; i < 64; i++) { /* scrambled */
		unsigned int k = (i * 37) % 64;

		assert_int_equal(dg_dma_unmap_single(t.dd, dma[k], 64, DG_DMA_FROM_DEVICE, 0, &b),
				 0);
	}
	assert_int_equal(dg_dma_batch_end(&b), 0);
	for (unsigned int i = 0; i < 64; i++) { /* the scrambled batch's runs covered them all */
		uint8_t got;

		assert_int_equal(dg_dev_read(t.dev, dma[i], &got, 1), -EFAULT);
	}
	for (unsigned int i = 0; i < 64; i++) {
		assert_int_equal(dg_dma_map_single(t.dd, buf + i * 4096, 64, DG_DMA_FROM_DEVICE, 0,
						   &again[i]),
				 0);
		if (i)
			assert_true(again[i] > again[i - 1]);
	}
	for (unsigned int i = 0; i < 64; i++)
		assert_int_equal(
			dg_dma_unmap_single(t.dd, again[i], 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	teardown_dev(&t);
	free(buf);
}

static void test_sg_limits(void **state)
{
	struct dg_dma_dev_config c;
	uint8_t *mem = page_alloc(64 * 4096);
	struct dg_dma_sg sg[8];
	unsigned int nr;
	struct t t;

	(void)state;
	/* 32-bit device, 8K segments, 16K boundary */
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_STRICT;
	c.dma_mask = 0xffffffffu;
	c.max_seg_size = 8192;
	c.seg_boundary = 16383;
	setup_dev(&t, DG_DMA_STRICT, &c);
	for (unsigned int i = 0; i < 8; i++)
		sg[i] = (struct dg_dma_sg){.addr = mem + i * 3 * 4096 + (i & 1 ? 0 : 512),
					   .len = i & 1 ? 8192 : 3584};
	assert_int_equal(dg_dma_map_sg(t.dd, sg, 8, DG_DMA_BIDIRECTIONAL, 0, &nr), 0);
	check_sg_bytes(&t, sg, 8, nr);
	for (unsigned int i = 0; i < nr; i++) {
		uint64_t a = sg[i].dma_addr, e = a + sg[i].dma_len - 1;

		assert_true(e <= 0xffffffffu);
		assert_true(sg[i].dma_len <= 8192);
		assert_int_equal(a & ~16383ull, e & ~16383ull); /* no boundary crossed */
	}
	assert_int_equal(dg_dma_unmap_sg(t.dd, sg, 8, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
	/* a segment longer than max_seg_size */
	sg[0] = (struct dg_dma_sg){.addr = mem, .len = 8193};
	assert_int_equal(dg_dma_map_sg(t.dd, sg, 1, DG_DMA_BIDIRECTIONAL, 0, &nr), -EINVAL);
	assert_int_equal(dg_dma_map_sg(t.dd, sg, 0, DG_DMA_BIDIRECTIONAL, 0, &nr), -EINVAL);
	sg[0].len = 0;
	assert_int_equal(dg_dma_map_sg(t.dd, sg, 1, DG_DMA_BIDIRECTIONAL, 0, &nr), -EINVAL);
	assert_int_equal(stats(t.dd).live, 0);
	teardown_dev(&t);
	free(mem);
}

/* ---- bounce ----------------------------------------------------------------------------------- */

static void test_bounce_subpage(void **state)
{
	static const enum dg_dma_dir dirs[] = {DG_DMA_TO_DEVICE, DG_DMA_BIDIRECTIONAL};
	uint8_t *page = page_alloc(4096), *seen = malloc(1 << 16);
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_BOUNCE, NULL);
	/* secrets around a 64-byte buffer in the same page */
	memset(page, 0xee, 4096);
	for (unsigned int d = 0; d < 2; d++) {
		uint64_t dma, lo, hi;

		memset(page + 2048, 0x42, 64);
		assert_int_equal(dg_dma_map_single(t.dd, page + 2048, 64, dirs[d], 0, &dma), 0);
		/* everything the device can read within 32 KiB around the slot */
		lo = dma > 16384 ? dma - 16384 : 0;
		hi = dma + 16384;
		for (uint64_t a = lo; a < hi; a += 64) {
			if (dg_dev_read(t.dev, a, seen, 64))
				continue;
			for (unsigned int k = 0; k < 64; k++)
				assert_int_not_equal(seen[k], 0xee);
		}
		assert_int_equal(dg_dev_read(t.dev, dma, seen, 64), 0);
		assert_int_equal(seen[0], 0x42);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, dirs[d], 0, NULL), 0);
	}
	/* padding of a 100-byte buffer in a 128-byte slot reads as zeros */
	{
		uint64_t dma;

		assert_int_equal(dg_dma_map_single(t.dd, page, 100, DG_DMA_TO_DEVICE, 0, &dma), 0);
		assert_int_equal(dg_dev_read(t.dev, dma, seen, 128), 0);
		for (unsigned int k = 100; k < 128; k++)
			assert_int_equal(seen[k], 0);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 100, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_true(stats(t.dd).bounce_zeroed >= 28);
	}
	assert_int_equal(stats(t.dd).subpage_max, 0);
	teardown_dev(&t);
	free(page);
	free(seen);
}

static void test_bounce_sync_and_limits(void **state)
{
	uint8_t *buf = page_alloc(1 << 19), data[512];
	struct dg_dma_sg sg[3];
	unsigned int nr;
	uint64_t dma;
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_BOUNCE, NULL);
	/* rx: map 2 KiB without copies, device writes 64, CPU syncs just those */
	memset(buf, 0x77, 2048);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 2048, DG_DMA_FROM_DEVICE,
					   DG_DMA_ATTR_SKIP_CPU_SYNC, &dma),
			 0);
	memset(data, 0x31, 64);
	assert_int_equal(dg_dev_write(t.dev, dma, data, 64), 0);
	assert_int_equal(buf[0], 0x77);
	assert_int_equal(dg_dma_sync_for_cpu(t.dd, dma, 64, DG_DMA_FROM_DEVICE), 0);
	assert_int_equal(buf[0], 0x31);
	assert_int_equal(buf[64], 0x77);
	assert_int_equal(dg_dma_sync_for_cpu(t.dd, dma + 64, 2048, DG_DMA_FROM_DEVICE), -EINVAL);
	assert_int_equal(dg_dma_sync_for_cpu(t.dd, dma, 64, DG_DMA_TO_DEVICE), -EINVAL);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 2048, DG_DMA_FROM_DEVICE,
					     DG_DMA_ATTR_SKIP_CPU_SYNC, NULL),
			 0);
	assert_int_equal(buf[64], 0x77);
	assert_int_equal(dg_dma_sync_for_cpu(t.dd, dma, 64, DG_DMA_FROM_DEVICE), -ENOENT);
	struct dg_dma_stats st = stats(t.dd);
	assert_int_equal(st.bounce_copy_in, 0);
	assert_int_equal(st.bounce_copy_out, 64);
	/* tx with a later sync_for_device */
	assert_int_equal(dg_dma_map_single(t.dd, buf, 512, DG_DMA_TO_DEVICE,
					   DG_DMA_ATTR_SKIP_CPU_SYNC, &dma),
			 0);
	memset(buf, 0x99, 512);
	assert_int_equal(dg_dma_sync_for_device(t.dd, dma + 256, 256, DG_DMA_TO_DEVICE), 0);
	assert_int_equal(dg_dev_read(t.dev, dma + 256, data, 256), 0);
	assert_int_equal(data[0], 0x99);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 512, DG_DMA_TO_DEVICE, 0, NULL), 0);
	/* larger than 256 KiB */
	assert_int_equal(dg_dma_map_single(t.dd, buf, (256 << 10) + 1, DG_DMA_TO_DEVICE, 0, &dma),
			 -EINVAL);
	/* sg round trip through one slot, written by the device, scattered back */
	sg[0] = (struct dg_dma_sg){.addr = buf + 1, .len = 100};
	sg[1] = (struct dg_dma_sg){.addr = buf + 8192, .len = 5000};
	sg[2] = (struct dg_dma_sg){.addr = buf + 65536 + 3, .len = 7};
	assert_int_equal(dg_dma_map_sg(t.dd, sg, 3, DG_DMA_FROM_DEVICE, 0, &nr), 0);
	assert_int_equal(nr, 1);
	for (unsigned int i = 0; i < 5107; i += 500) {
		uint8_t v = (uint8_t)(i / 500 + 1);

		memset(data, v, 500);
		assert_int_equal(dg_dev_write(t.dev, sg[0].dma_addr + i, data,
					      i + 500 <= 5107 ? 500 : 5107 - i),
				 0);
	}
	assert_int_equal(dg_dma_sync_sg_for_cpu(t.dd, sg, 3, DG_DMA_FROM_DEVICE), 0);
	assert_int_equal(buf[1], 1);
	assert_int_equal(dg_dma_unmap_sg(t.dd, sg, 3, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	assert_int_equal(buf[8192 + 4999], (uint8_t)(5099 / 500 + 1));
	assert_int_equal(buf[65536 + 3 + 6], (uint8_t)(5106 / 500 + 1));
	teardown_dev(&t);
	free(buf);
}

static void test_bounce_exhaustion(void **state)
{
	struct dg_dma_dev_config c;
	uint8_t *buf = page_alloc(1 << 18);
	uint64_t dmas[64], dma;
	unsigned int n = 0, ncpu = 0;
	struct t t;
	int r;

	(void)state;
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_BOUNCE;
	c.bounce.area_size = 256 << 10;
	setup_dev(&t, DG_DMA_BOUNCE, &c);
	while ((r = dg_dma_map_single(t.dd, buf, 256 << 10, DG_DMA_TO_DEVICE, 0, &dma)) == 0) {
		assert_true(n < 64);
		dmas[n++] = dma;
	}
	assert_int_equal(r, -ENOSPC);
	ncpu = n; /* one area per CPU for this direction */
	assert_true(ncpu >= 1);
	assert_int_equal(stats(t.dd).err_shadow_space, 1);
	assert_int_equal(stats(t.dd).bounce_in_use, (uint64_t)n << 18);
	assert_int_equal(dg_dma_unmap_single(t.dd, dmas[--n], 256 << 10, DG_DMA_TO_DEVICE, 0, NULL),
			 0);
	/* the freed slot merges back and serves 64-byte buffers too */
	for (unsigned int k = 0; k < 4096; k++) {
		assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, &dma), 0);
		dmas[n] = dma;
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	}
	while (n)
		assert_int_equal(dg_dma_unmap_single(t.dd, dmas[--n], 256 << 10, DG_DMA_TO_DEVICE,
						     0, NULL),
				 0);
	teardown_dev(&t);
	free(buf);
}

/* ---- window ------------------------------------------------------------------------------------ */

static void test_window(void **state)
{
	uint8_t *direct = aligned_alloc(65536, 1 << 20), *out = malloc(8192);
	uint8_t *other = page_alloc(3 * 4096);
	struct dg_dma_dev_config c;
	uint64_t dma, dma2;
	struct t t;

	(void)state;
	/* the small default window: 4K pages at 2 GiB, everything mapped on demand */
	setup_dev(&t, DG_DMA_WINDOW, NULL);
	assert_int_equal(dg_dma_map_single(t.dd, other + 10, 100, DG_DMA_TO_DEVICE, 0, &dma), 0);
	assert_true(dma >= (2ull << 30) && dma < (3ull << 30));
	assert_int_equal(dma & 4095, 10);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 100, DG_DMA_TO_DEVICE, 0, NULL), 0);
	teardown_dev(&t);

	/* a big window with 64K pages whose first MiB is the direct region */
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_WINDOW;
	c.window.base = 1ull << 40;
	c.window.size = 1ull << 32;
	c.window.page_size = 65536;
	c.window.direct = direct;
	c.window.direct_size = 1 << 20;
	setup_dev(&t, DG_DMA_WINDOW, &c);
	for (unsigned int k = 0; k < (1u << 20); k++)
		direct[k] = (uint8_t)(k * 13);
	for (unsigned int k = 0; k < 3 * 4096; k++)
		other[k] = (uint8_t)(k * 3 + 5);
	/* inside: fixed offset, no page-table work */
	assert_int_equal(
		dg_dma_map_single(t.dd, direct + 300000, 5000, DG_DMA_FROM_DEVICE, 0, &dma), 0);
	assert_int_equal(dma, (1ull << 40) + 300000);
	assert_int_equal(dg_dev_read(t.dev, dma, out, 5000), 0);
	assert_memory_equal(out, direct + 300000, 5000);
	/* outside: mapped on demand in the rest of the window with a 64K page */
	assert_int_equal(
		dg_dma_map_single(t.dd, other + 4096 + 7, 6000, DG_DMA_TO_DEVICE, 0, &dma2), 0);
	assert_true(dma2 >= (1ull << 40) + (1 << 20) && dma2 < (1ull << 40) + (1ull << 32));
	assert_int_equal(dg_dev_read(t.dev, dma2, out, 6000), 0);
	assert_memory_equal(out, other + 4096 + 7, 6000);
	assert_int_equal(dg_dev_write(t.dev, dma2, out, 16), -EACCES);
	struct dg_dma_stats st = stats(t.dd);
	assert_int_equal(st.window_direct_maps, 1);
	assert_int_equal(st.window_dynamic_maps, 1);
	assert_true(st.subpage_max >= 65536 - 6000); /* the large page's cost */
	assert_int_equal(st.persistent_bytes, 1 << 20);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma2, 6000, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dev_read(t.dev, dma2, out, 16), -EFAULT);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 5000, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	/* the direct region stays reachable (that is what it gives up) */
	assert_int_equal(dg_dev_read(t.dev, dma, out, 16), 0);
	teardown_dev(&t);
	free(direct);
	free(other);
	free(out);
}

/* ---- coherent ---------------------------------------------------------------------------------- */

static void test_coherent(void **state)
{
	(void)state;
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++) {
		uint8_t msg[32] = "descriptor ring entry", got[32];
		uint64_t dma, dma2;
		uint8_t *ring, *ring2;
		struct t t;

		setup_dev(&t, all_policies[i], NULL);
		uint64_t p0 = stats(t.dd).persistent_bytes;

		/* the argument errors dma.h lists, nothing allocated */
		errno = 0;
		assert_null(dg_dma_alloc_coherent(NULL, 4096, &dma));
		assert_int_equal(errno, EINVAL);
		errno = 0;
		assert_null(dg_dma_alloc_coherent(t.dd, 4096, NULL));
		assert_int_equal(errno, EINVAL);
		errno = 0;
		assert_null(dg_dma_alloc_coherent(t.dd, 0, &dma));
		assert_int_equal(errno, EINVAL);
		errno = 0;
		assert_null(dg_dma_alloc_coherent(t.dd, (1ull << 40) + 1, &dma));
		assert_int_equal(errno, EINVAL);
		assert_int_equal(dg_dma_free_coherent(NULL, msg, 4096, 0), -EINVAL);
		assert_int_equal(dg_dma_free_coherent(t.dd, NULL, 4096, 0), -EINVAL);
		assert_int_equal(dg_dma_free_coherent(t.dd, msg, 0, 0), -EINVAL);
		assert_int_equal(stats(t.dd).live, 0);

		ring = dg_dma_alloc_coherent(t.dd, 10000, &dma);
		assert_non_null(ring);
		assert_int_equal((uintptr_t)ring & 4095, 0);
		assert_int_equal(ring[9999], 0);
		assert_int_equal(dg_dev_write(t.dev, dma + 64, msg, sizeof(msg)), 0);
		assert_memory_equal(ring + 64, msg, sizeof(msg));
		memcpy(ring + 128, msg, 8);
		assert_int_equal(dg_dev_read(t.dev, dma + 128, got, 8), 0);
		assert_memory_equal(got, msg, 8);
		ring2 = dg_dma_alloc_coherent(t.dd, 100, &dma2);
		assert_non_null(ring2);
		assert_int_equal(stats(t.dd).live, 2);
		assert_int_equal(stats(t.dd).persistent_bytes - p0, 12288 + 4096);
		/* wrong calls change nothing */
		if (all_policies[i] != DG_DMA_IDENTITY)
			assert_int_equal(dg_dma_unmap_single(t.dd, dma, 10000, DG_DMA_BIDIRECTIONAL,
							     0, NULL),
					 all_policies[i] == DG_DMA_BOUNCE ? -ENOENT : -EINVAL);
		assert_int_equal(dg_dma_free_coherent(t.dd, ring, 20000, dma), -EINVAL);
		assert_int_equal(dg_dma_free_coherent(t.dd, ring2, 100, dma), -EINVAL);
		assert_int_equal(dg_dma_free_coherent(t.dd, ring, 10000, dma), 0);
		assert_int_equal(dg_dma_free_coherent(t.dd, ring, 10000, dma), -ENOENT);
		if (all_policies[i] != DG_DMA_IDENTITY && all_policies[i] != DG_DMA_LAZY)
			assert_int_equal(dg_dev_read(t.dev, dma2, got, 8), 0);
		assert_int_equal(dg_dma_free_coherent(t.dd, ring2, 100, dma2), 0);
		if (all_policies[i] != DG_DMA_IDENTITY) /* strict free under every policy */
			assert_int_equal(dg_dev_read(t.dev, dma2, got, 8), -EFAULT);
		assert_int_equal(stats(t.dd).live, 0);
		teardown_dev(&t);
	}
}

/* ---- two-step ----------------------------------------------------------------------------------- */

static void test_two_step(void **state)
{
	static const enum dg_dma_policy pols[] = {DG_DMA_IDENTITY, DG_DMA_STRICT, DG_DMA_LAZY,
						  DG_DMA_WINDOW, DG_DMA_POOL};

	(void)state;
	for (unsigned int pi = 0; pi < 5; pi++) {
		enum dg_dma_policy p = pols[pi];
		uint8_t *bufs = page_alloc(16 * 2048), got[64];
		struct dg_dma_iova_state st;
		struct dg_dma_batch b;
		uint64_t dma[16];
		struct t t;

		setup_dev(&t, p, NULL);
		assert_int_equal(dg_dma_iova_alloc(t.dd, 16 * 4096, &st), 0);
		for (unsigned int i = 0; i < 16; i++) {
			memset(bufs + i * 2048, (int)i + 1, 2048);
			assert_int_equal(dg_dma_iova_link(&st, i * 4096ull, bufs + i * 2048, 2048,
							  DG_DMA_BIDIRECTIONAL, &dma[i]),
					 0);
		}
		assert_int_equal(dg_dma_iova_sync(&st, 0, 16 * 4096), 0);
		for (unsigned int i = 0; i < 16; i++) {
			assert_int_equal(dg_dev_read(t.dev, dma[i], got, 64), 0);
			assert_int_equal(got[0], i + 1);
			if (p != DG_DMA_IDENTITY)
				assert_int_equal(dma[i],
						 st.addr + i * 4096ull +
							 ((uintptr_t)(bufs + i * 2048) & 4095));
		}
		if (p != DG_DMA_IDENTITY) {
			assert_int_equal(dg_dma_iova_link(&st, 0, bufs, 64, DG_DMA_TO_DEVICE,
							  &dma[0]),
					 -EEXIST);
			assert_int_equal(dg_dma_iova_link(&st, 15 * 4096ull, bufs + 100, 8000,
							  DG_DMA_TO_DEVICE, &dma[0]),
					 -ERANGE);
			assert_int_equal(dg_dma_iova_unlink(&st, 0, 2047, DG_DMA_BIDIRECTIONAL,
							    NULL),
					 -EINVAL);
			assert_int_equal(dg_dma_iova_unlink(&st, 0, 2048, DG_DMA_TO_DEVICE, NULL),
					 -EINVAL);
			assert_int_equal(dg_dma_iova_free(&st), -EBUSY);
		}
		assert_int_equal(dg_dma_iova_link(&st, 100, bufs, 64, DG_DMA_TO_DEVICE, &dma[0]),
				 -EINVAL);
		assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_STRICT), -EBUSY);
		/* a NAPI-style batch unlinks the ring: one invalidation, one wait */
		struct dg_dma_stats s0 = stats(t.dd);
		dg_dma_batch_begin(t.dd, &b);
		for (unsigned int i = 0; i < 16; i++)
			assert_int_equal(dg_dma_iova_unlink(&st, i * 4096ull, 2048,
							    DG_DMA_BIDIRECTIONAL, &b),
					 0);
		if (p != DG_DMA_IDENTITY) /* the slot's pages go at the batch's end */
			assert_int_equal(dg_dma_iova_link(&st, 0, bufs, 64, DG_DMA_TO_DEVICE,
							  &dma[0]),
					 -EEXIST);
		assert_int_equal(dg_dma_batch_end(&b), 0);
		struct dg_dma_stats s1 = stats(t.dd);
		if (p != DG_DMA_IDENTITY) {
			assert_int_equal(s1.inval_waits - s0.inval_waits, 1);
			assert_int_equal(s1.inval_submits - s0.inval_submits, 1);
			for (unsigned int i = 0; i < 16; i++)
				assert_int_equal(dg_dev_read(t.dev, dma[i], got, 8), -EFAULT);
			assert_int_equal(dg_dma_iova_unlink(&st, 0, 2048, DG_DMA_BIDIRECTIONAL,
							    NULL),
					 -ENOENT);
		}
		assert_int_equal(s1.links, 16);
		assert_int_equal(s1.unlinks, 16);
		assert_int_equal(dg_dma_iova_free(&st), 0);
		assert_int_equal(dg_dma_iova_free(&st), -EINVAL);
		teardown_dev(&t);
		free(bufs);
	}
	{
		struct dg_dma_iova_state st;
		struct t t;

		setup_dev(&t, DG_DMA_BOUNCE, NULL);
		assert_int_equal(dg_dma_iova_alloc(t.dd, 4096, &st), -EOPNOTSUPP);
		teardown_dev(&t);
	}
}

/* ---- batches ------------------------------------------------------------------------------------ */

static void test_batch(void **state)
{
	enum { NB = DG_DMA_BATCH_MAX + 36 }; /* ent[] fills up once */
	uint8_t *buf = page_alloc(NB * 4096), got[8];
	struct dg_dma_batch b;
	uint64_t dma[NB];
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_STRICT, NULL);
	for (unsigned int i = 0; i < NB; i++) {
		assert_int_equal(dg_dma_map_single(t.dd, buf + i * 4096 + 64, 1500,
						   DG_DMA_FROM_DEVICE, 0, &dma[i]),
				 0);
		assert_int_equal(dg_dev_write(t.dev, dma[i], "x", 1), 0); /* warm the IOTLB */
	}
	struct dg_dma_stats s0 = stats(t.dd);
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int i = 0; i < NB; i++)
		assert_int_equal(dg_dma_unmap_single(t.dd, dma[i], 1500, DG_DMA_FROM_DEVICE, 0, &b),
				 0);
	/* an error inside a batch changes nothing */
	assert_int_equal(dg_dma_unmap_single(t.dd, dma[3], 1500, DG_DMA_FROM_DEVICE, 0, &b),
			 -ENOENT);
	assert_int_equal(b.flushes, 1); /* ent[] filled up once */
	assert_int_equal(dg_dma_batch_end(&b), 0);
	struct dg_dma_stats s1 = stats(t.dd);
	assert_int_equal(s1.inval_waits - s0.inval_waits, 2);
	assert_int_equal(s1.batches - s0.batches, 1);
	for (unsigned int i = 0; i < NB; i++)
		assert_int_equal(dg_dev_read(t.dev, dma[i], got, 1), -EFAULT);
	assert_int_equal(s1.live, 0);
	/* an empty batch is fine */
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(dg_dma_batch_end(NULL), -EINVAL);

	/*
	 * Submitted early: the pages are gone from the table at once, the IOVAs stay the
	 * batch's (maps meanwhile get others), unmaps after the submit join the same end, and
	 * the end waits once for everything.
	 */
	for (unsigned int i = 0; i < 8; i++)
		assert_int_equal(dg_dma_map_single(t.dd, buf + i * 4096 + 64, 1500,
						   DG_DMA_FROM_DEVICE, 0, &dma[i]),
				 0);
	s0 = stats(t.dd);
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int i = 0; i < 4; i++)
		assert_int_equal(dg_dma_unmap_single(t.dd, dma[i], 1500, DG_DMA_FROM_DEVICE, 0, &b),
				 0);
	assert_int_equal(dg_dma_batch_submit(&b), 0);
	assert_int_equal(dg_dma_batch_submit(&b), 0); /* nothing new: nothing submitted */
	for (unsigned int i = 0; i < 4; i++) {
		assert_int_equal(dg_dev_read(t.dev, dma[i], got, 1), -EFAULT);
		assert_int_equal(dg_dma_map_single(t.dd, buf + (50 + i) * 4096, 64,
						   DG_DMA_TO_DEVICE, 0, &dma[50 + i]),
				 0);
		for (unsigned int j = 0; j < 4; j++)
			assert_int_not_equal(dma[50 + i] & ~4095ull, dma[j] & ~4095ull);
	}
	for (unsigned int i = 4; i < 8; i++)
		assert_int_equal(dg_dma_unmap_single(t.dd, dma[i], 1500, DG_DMA_FROM_DEVICE, 0, &b),
				 0);
	s1 = stats(t.dd);
	assert_int_equal(s1.inval_waits - s0.inval_waits, 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	s1 = stats(t.dd);
	assert_int_equal(s1.inval_waits - s0.inval_waits, 1);
	assert_int_equal(s1.live, 4);
	for (unsigned int i = 0; i < 8; i++)
		assert_int_equal(dg_dev_read(t.dev, dma[i], got, 1), -EFAULT);
	for (unsigned int i = 0; i < 4; i++)
		assert_int_equal(
			dg_dma_unmap_single(t.dd, dma[50 + i], 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_batch_submit(NULL), -EINVAL);
	teardown_dev(&t);

	/* bounce frees its slots at the batch end, with no invalidation at all */
	setup_dev(&t, DG_DMA_BOUNCE, NULL);
	for (unsigned int i = 0; i < NB; i++)
		assert_int_equal(dg_dma_map_single(t.dd, buf + i * 64, 64, DG_DMA_FROM_DEVICE, 0,
						   &dma[i]),
				 0);
	dg_dma_batch_begin(t.dd, &b);
	for (unsigned int i = 0; i < NB; i++)
		assert_int_equal(dg_dma_unmap_single(t.dd, dma[i], 64, DG_DMA_FROM_DEVICE, 0, &b),
				 0);
	/* the first DG_DMA_BATCH_MAX went when ent[] filled up */
	assert_int_equal(stats(t.dd).bounce_in_use, (NB - DG_DMA_BATCH_MAX) * 64);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(stats(t.dd).bounce_in_use, 0);
	assert_int_equal(stats(t.dd).inval_waits, 0);
	teardown_dev(&t);
	free(buf);
}

/*
 * The page table's last-leaf-table hint under the DMA layer (pt_fast.h): one-granule maps
 * leave a hint on their last-level table; once the IOVA caches are flushed, a 2 MiB mapping
 * takes the same IOVA span as one large leaf over the emptied table, which unlinks it (freed
 * after the mapping's invalidation); the next one-granule map in that span must not use the
 * freed table. Device accesses check every translation; dg_dma_dev_check (which includes
 * dg_pt_hint_check) holds after every step.
 */
static void test_hint_table_unlink(void **state)
{
	const size_t big_len = 2u << 20;
	uint8_t *small = page_alloc(8 * 4096), *big = aligned_alloc(big_len, big_len), v;
	uint64_t dma[8], dbig, gen;
	struct dg_pt_walk w;
	struct t t;

	(void)state;
	assert_non_null(big);
	memset(big, 0x5a, big_len);
	setup_dev(&t, DG_DMA_STRICT, NULL);
	t.dd->sp->cspan = 0; /* the allocator's path: a stream would hold the small ones' chunk */
	for (unsigned int i = 0; i < 8; i++) {
		assert_int_equal(dg_dma_map_single(t.dd, small + i * 4096, 4096,
						   DG_DMA_BIDIRECTIONAL, 0, &dma[i]),
				 0);
		v = (uint8_t)i;
		assert_int_equal(dg_dev_write(t.dev, dma[i], &v, 1), 0);
		assert_int_equal(small[i * 4096], i);
		assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
	}
	for (unsigned int i = 0; i < 8; i++)
		assert_int_equal(
			dg_dma_unmap_single(t.dd, dma[i], 4096, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
	assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);

	/* The big mapping takes the span of the small ones: a 2M leaf over their table. */
	dg_iova_flush_caches(t.dd->sp->iova);
	gen = atomic_load(&t.dd->sp->pt->unlink_gen);
	assert_int_equal(dg_dma_map_single(t.dd, big, big_len, DG_DMA_BIDIRECTIONAL, 0, &dbig), 0);
	assert_int_equal(dbig & (big_len - 1), 0);
	assert_true(dma[0] >= dbig && dma[0] < dbig + big_len);
	assert_int_equal(dg_pt_walk(t.dd->sp->pt, dma[0], &w), 0);
	assert_int_equal(w.pgsize, big_len);
	assert_true(atomic_load(&t.dd->sp->pt->unlink_gen) > gen);
	assert_int_equal(dg_dev_read(t.dev, dma[0], &v, 1), 0);
	assert_int_equal(v, 0x5a);
	assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
	assert_int_equal(dg_dma_unmap_single(t.dd, dbig, big_len, DG_DMA_BIDIRECTIONAL, 0, NULL),
			 0);
	assert_int_equal(dg_dev_read(t.dev, dma[0], &v, 1), -EFAULT);
	assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);

	/* One-granule maps in that span again: a new table, never the freed one. */
	dg_iova_flush_caches(t.dd->sp->iova);
	for (unsigned int i = 0; i < 8; i++) {
		assert_int_equal(dg_dma_map_single(t.dd, small + i * 4096, 4096,
						   DG_DMA_BIDIRECTIONAL, 0, &dma[i]),
				 0);
		assert_true(dma[i] >= dbig && dma[i] < dbig + big_len);
		assert_int_equal(dg_pt_walk(t.dd->sp->pt, dma[i], &w), 0);
		assert_int_equal(w.pgsize, 4096);
		assert_int_equal(w.phys, (uintptr_t)(small + i * 4096));
		v = (uint8_t)(0x80 + i);
		assert_int_equal(dg_dev_write(t.dev, dma[i], &v, 1), 0);
		assert_int_equal(small[i * 4096], 0x80 + i);
		assert_int_equal(dg_dma_dev_check(t.dd, stderr), 0);
	}
	for (unsigned int i = 0; i < 8; i++) {
		assert_int_equal(
			dg_dma_unmap_single(t.dd, dma[i], 4096, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
		assert_int_equal(dg_dev_read(t.dev, dma[i], &v, 1), -EFAULT);
	}
	teardown_dev(&t);
	free(big);
	free(small);
}

/* ---- pools ------------------------------------------------------------------------------------ */

static void test_pool(void **state)
{
	struct dg_dma_pool *pool;
	uint8_t *bufs[8], *other = page_alloc(4096), got[4];
	uint64_t dmas[8], dma;
	void *extra;
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_STRICT, NULL);
	errno = 0;
	assert_null(dg_dma_pool_create(t.dd, 2048, 8, DG_DMA_FROM_DEVICE, 0));
	assert_int_equal(errno, EPERM);
	teardown_dev(&t);

	setup_dev(&t, DG_DMA_POOL, NULL);
	assert_null(dg_dma_pool_create(t.dd, 0, 8, DG_DMA_FROM_DEVICE, 0));
	assert_null(dg_dma_pool_create(t.dd, 2048, 8, DG_DMA_FROM_DEVICE, 1u << 5));
	pool = dg_dma_pool_create(t.dd, 2000, 8, DG_DMA_BIDIRECTIONAL, 0);
	assert_non_null(pool);
	for (unsigned int i = 0; i < 8; i++) {
		assert_int_equal(dg_dma_pool_get(pool, (void **)&bufs[i], &dmas[i]), 0);
		if (i)
			assert_int_equal(bufs[i] - bufs[i - 1], 2048);
		assert_int_equal(dg_dev_write(t.dev, dmas[i], "pool", 4), 0);
		assert_memory_equal(bufs[i], "pool", 4);
	}
	assert_int_equal(dg_dma_pool_get(pool, &extra, &dma), -ENOSPC);
	/* a streaming map of pool memory is its fixed address and costs nothing */
	assert_int_equal(dg_dma_map_single(t.dd, bufs[3] + 10, 100, DG_DMA_FROM_DEVICE, 0, &dma),
			 0);
	assert_int_equal(dma, dmas[3] + 10);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 100, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	/* other memory falls back to a strict mapping */
	assert_int_equal(dg_dma_map_single(t.dd, other, 100, DG_DMA_TO_DEVICE, 0, &dma), 0);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 100, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dev_read(t.dev, dma, got, 4), -EFAULT);
	struct dg_dma_stats st = stats(t.dd);
	assert_int_equal(st.pool_hits, 1);
	assert_int_equal(st.pool_fallbacks, 1);
	assert_int_equal(st.persistent_bytes, 16384);
	assert_int_equal(dg_dma_pool_destroy(pool), -EBUSY);
	assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_STRICT), -EBUSY);
	assert_int_equal(dg_dma_pool_put(pool, bufs[0] + 1), -EINVAL);
	assert_int_equal(dg_dma_pool_put(pool, other), -EINVAL);
	for (unsigned int i = 0; i < 8; i++)
		assert_int_equal(dg_dma_pool_put(pool, bufs[i]), 0);
	assert_int_equal(dg_dma_pool_put(pool, bufs[5]), -EINVAL); /* double put */
	/* recycled buffers keep their mapping: still reachable (the exposure reported) */
	assert_int_equal(dg_dev_read(t.dev, dmas[5], got, 4), 0);
	assert_int_equal(dg_dma_pool_destroy(pool), 0);
	assert_int_equal(dg_dev_read(t.dev, dmas[5], got, 4), -EFAULT);
	assert_int_equal(stats(t.dd).persistent_bytes, 0);
	pool = dg_dma_pool_create(t.dd, 4096, 1024, DG_DMA_FROM_DEVICE, DG_DMA_POOL_HUGE);
	assert_non_null(pool);
	assert_int_equal(dg_dma_pool_get(pool, (void **)&bufs[0], &dmas[0]), 0);
	assert_int_equal((uintptr_t)bufs[0] & ((2u << 20) - 1), 0);
	assert_int_equal(dmas[0] & ((2u << 20) - 1), 0);
	assert_int_equal(dg_dma_pool_put(pool, bufs[0]), 0);
	assert_int_equal(dg_dma_pool_destroy(pool), 0);
	assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_STRICT), 0);
	teardown_dev(&t);
	free(other);
}

/* Scatterlists under pool: all entries in a pool are their fixed addresses and their unmap
 * leaves them mapped; a list with one entry outside goes to strict whole. */
static void test_pool_sg(void **state)
{
	struct dg_dma_sg sg[2];
	struct dg_dma_pool *pool;
	uint8_t *bufs[2], *other = page_alloc(4096), got[4];
	uint64_t dmas[2];
	unsigned int nr = 0;
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_POOL, NULL);
	pool = dg_dma_pool_create(t.dd, 2048, 2, DG_DMA_BIDIRECTIONAL, 0);
	assert_non_null(pool);
	for (unsigned int i = 0; i < 2; i++)
		assert_int_equal(dg_dma_pool_get(pool, (void **)&bufs[i], &dmas[i]), 0);
	memset(sg, 0, sizeof(sg));
	sg[0] = (struct dg_dma_sg){.addr = bufs[1] + 8, .len = 100};
	sg[1] = (struct dg_dma_sg){.addr = bufs[0], .len = 2048};
	assert_int_equal(dg_dma_map_sg(t.dd, sg, 2, DG_DMA_TO_DEVICE, 0, &nr), 0);
	assert_int_equal(nr, 2);
	assert_int_equal(sg[0].dma_addr, dmas[1] + 8);
	assert_int_equal(sg[0].dma_len, 100);
	assert_int_equal(sg[1].dma_addr, dmas[0]);
	assert_int_equal(sg[1].dma_len, 2048);
	assert_int_equal(stats(t.dd).pool_hits, 1);
	assert_int_equal(dg_dma_unmap_sg(t.dd, sg, 2, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dev_read(t.dev, dmas[1] + 8, got, 4), 0); /* the pool persists */
	/* one entry outside every pool: the list is strict's, and gone after its unmap */
	memset(sg, 0, sizeof(sg));
	sg[0] = (struct dg_dma_sg){.addr = bufs[1], .len = 64};
	sg[1] = (struct dg_dma_sg){.addr = other, .len = 64};
	assert_int_equal(dg_dma_map_sg(t.dd, sg, 2, DG_DMA_TO_DEVICE, 0, &nr), 0);
	assert_int_equal(stats(t.dd).pool_fallbacks, 1);
	assert_int_equal(stats(t.dd).pool_hits, 1);
	assert_int_not_equal(sg[0].dma_addr, dmas[1]);
	uint64_t strict_dma = sg[0].dma_addr;

	assert_int_equal(dg_dev_read(t.dev, strict_dma, got, 4), 0);
	assert_int_equal(dg_dma_unmap_sg(t.dd, sg, 2, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dev_read(t.dev, strict_dma, got, 4), -EFAULT);
	for (unsigned int i = 0; i < 2; i++)
		assert_int_equal(dg_dma_pool_put(pool, bufs[i]), 0);
	assert_int_equal(dg_dma_pool_destroy(pool), 0);
	teardown_dev(&t);
	free(other);
}

/* Long scatterlists under pool (dma_fixed_map_sg keeps the first DMA_FIXED_SG_LOCAL = 32
 * addresses from its one look-up and looks the rest up again): every entry of a 40-entry list
 * gets its own fixed address, from two pools, in scrambled order; one entry outside, before
 * or past the 32nd, sends the list to strict whole with nothing written to it before. */
static void test_pool_sg_long(void **state)
{
	enum { N = 40 };
	struct dg_dma_sg sg[N];
	struct dg_dma_pool *pool[2];
	uint8_t *bufs[N], *other = page_alloc(4096);
	uint64_t dmas[N];
	unsigned int nr = 0, out[] = {5, 39};
	struct hook_state hs;
	struct dg_dma_fail_hook hook = {hook_fail, &hs};
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_POOL, NULL);
	pool[0] = dg_dma_pool_create(t.dd, 4096, N / 2, DG_DMA_BIDIRECTIONAL, 0);
	pool[1] = dg_dma_pool_create(t.dd, 4096, N / 2, DG_DMA_TO_DEVICE, DG_DMA_POOL_HUGE);
	assert_non_null(pool[0]);
	assert_non_null(pool[1]);
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_dma_pool_get(pool[i % 2], (void **)&bufs[i], &dmas[i]), 0);
	for (unsigned int i = 0; i < N; i++) /* entry i: buffer 7i mod 40 (7 is prime to 40) */
		sg[i] = (struct dg_dma_sg){.addr = bufs[i * 7 % N] + i, .len = 4096 - i};
	assert_int_equal(dg_dma_map_sg(t.dd, sg, N, DG_DMA_TO_DEVICE, 0, &nr), 0);
	assert_int_equal(nr, N);
	for (unsigned int i = 0; i < N; i++) {
		assert_int_equal(sg[i].dma_addr, dmas[i * 7 % N] + i);
		assert_int_equal(sg[i].dma_len, 4096 - i);
	}
	assert_int_equal(stats(t.dd).pool_hits, 1);
	assert_int_equal(dg_dma_unmap_sg(t.dd, sg, N, DG_DMA_TO_DEVICE, 0, NULL), 0);
	for (unsigned int k = 0; k < 2; k++) {
		uint64_t strict_dma;
		uint8_t got[4];

		for (unsigned int i = 0; i < N; i++)
			sg[i] = (struct dg_dma_sg){.addr = i == out[k] ? other : bufs[i],
						   .len = 64,
						   .dma_addr = 0xdead0000 + i};
		/* strict's map of this list fails (no IOVA): the fixed look-ups before it wrote
		   nothing to the list */
		hs = (struct hook_state){DG_DMA_FAIL_IOVA, -ENOSPC, 0};
		dg_dma_set_fail_hook(t.f.dma, &hook);
		assert_int_equal(dg_dma_map_sg(t.dd, sg, N, DG_DMA_TO_DEVICE, 0, &nr), -ENOSPC);
		dg_dma_set_fail_hook(t.f.dma, NULL);
		assert_int_equal(hs.calls, 1);
		for (unsigned int i = 0; i < N; i++)
			assert_int_equal(sg[i].dma_addr, 0xdead0000 + i);
		assert_int_equal(dg_dma_map_sg(t.dd, sg, N, DG_DMA_TO_DEVICE, 0, &nr), 0);
		assert_int_equal(stats(t.dd).pool_fallbacks, k + 1);
		assert_int_equal(stats(t.dd).pool_hits, 1);
		strict_dma = sg[out[k]].dma_addr;
		assert_int_not_equal(sg[0].dma_addr, dmas[0]);
		assert_int_equal(dg_dev_read(t.dev, strict_dma, got, 4), 0);
		assert_int_equal(dg_dma_unmap_sg(t.dd, sg, N, DG_DMA_TO_DEVICE, 0, NULL), 0);
		assert_int_equal(dg_dev_read(t.dev, strict_dma, got, 4), -EFAULT);
	}
	for (unsigned int i = 0; i < N; i++)
		assert_int_equal(dg_dma_pool_put(pool[i % 2], bufs[i]), 0);
	assert_int_equal(dg_dma_pool_destroy(pool[0]), 0);
	assert_int_equal(dg_dma_pool_destroy(pool[1]), 0);
	teardown_dev(&t);
	free(other);
}

/* The errors dma.h documents for the pool calls. */
static void test_pool_errors(void **state)
{
	struct dg_dma_pool *pools[33];
	void *buf;
	uint64_t dma;
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_POOL, NULL);
	errno = 0;
	assert_null(dg_dma_pool_create(NULL, 2048, 8, DG_DMA_FROM_DEVICE, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(dg_dma_pool_create(t.dd, 0, 8, DG_DMA_FROM_DEVICE, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(dg_dma_pool_create(t.dd, 2048, 0, DG_DMA_FROM_DEVICE, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(dg_dma_pool_create(t.dd, 2048, (1u << 24) + 1, DG_DMA_FROM_DEVICE, 0));
	assert_int_equal(errno, EINVAL);
	errno = 0;
	assert_null(dg_dma_pool_create(t.dd, 2048, 8, DG_DMA_FROM_DEVICE, 1u << 5));
	assert_int_equal(errno, EINVAL);
	/* DMA_MAX_POOLS per device, then -ENOSPC; a destroyed pool's slot is free again */
	for (unsigned int i = 0; i < DMA_MAX_POOLS; i++) {
		pools[i] = dg_dma_pool_create(t.dd, 64, 1, DG_DMA_TO_DEVICE, 0);
		assert_non_null(pools[i]);
	}
	errno = 0;
	assert_null(dg_dma_pool_create(t.dd, 64, 1, DG_DMA_TO_DEVICE, 0));
	assert_int_equal(errno, ENOSPC);
	assert_int_equal(dg_dma_pool_destroy(pools[7]), 0);
	pools[7] = dg_dma_pool_create(t.dd, 64, 1, DG_DMA_TO_DEVICE, 0);
	assert_non_null(pools[7]);
	assert_int_equal(dg_dma_pool_get(NULL, &buf, &dma), -EINVAL);
	assert_int_equal(dg_dma_pool_get(pools[0], NULL, &dma), -EINVAL);
	assert_int_equal(dg_dma_pool_get(pools[0], &buf, NULL), -EINVAL);
	assert_int_equal(dg_dma_pool_put(NULL, pools), -EINVAL);
	assert_int_equal(dg_dma_pool_destroy(NULL), -EINVAL);
	for (unsigned int i = 0; i < DMA_MAX_POOLS; i++)
		assert_int_equal(dg_dma_pool_destroy(pools[i]), 0);
	teardown_dev(&t);
}

/* ---- policies: switching, forced translation ---------------------------------------------------- */

static void test_switch_and_force(void **state)
{
	uint8_t *buf = page_alloc(4096);
	struct dg_dma_dev *dd2, *dd3;
	struct dg_dma_dev_config c;
	struct dg_device *dev2, *dev3;
	uint64_t dma;
	struct t t;

	(void)state;
	setup_dev(&t, DG_DMA_IDENTITY, NULL);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, &dma), 0);
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++)
		assert_int_equal(dg_dma_dev_set_policy(t.dd, all_policies[i]), -EBUSY);
	/* forced translation cannot move a busy identity device */
	assert_int_equal(dg_dma_set_force_translation(t.f.dma, true), -EBUSY);
	assert_false(dg_dma_force_translation(t.f.dma));
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	for (unsigned int i = 0; i < DG_DMA_NR_POLICIES; i++) {
		uint8_t got[8];

		assert_int_equal(dg_dma_dev_set_policy(t.dd, all_policies[i]), 0);
		assert_int_equal(dg_dma_dev_policy(t.dd), all_policies[i]);
		assert_true((dg_dma_dev_domain(t.dd) == NULL) ==
			    (all_policies[i] == DG_DMA_IDENTITY));
		memset(buf, (int)i, 64);
		assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, &dma), 0);
		assert_int_equal(dg_dev_read(t.dev, dma, got, 8), 0);
		assert_int_equal(got[0], i);
		assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	}
	assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_IDENTITY), 0);
	dd2 = fixture_dev(&t.f, 2, DG_DMA_IDENTITY, NULL, &dev2);
	dg_dma_dev_config_init(&c);
	c.flags = DG_DMA_DEV_TRANSLATION_OPT_OUT;
	dd3 = fixture_dev(&t.f, 3, DG_DMA_IDENTITY, &c, &dev3);
	assert_non_null(dd2);
	assert_non_null(dd3);
	assert_int_equal(dg_dma_set_force_translation(t.f.dma, true), 0);
	assert_true(dg_dma_force_translation(t.f.dma));
	assert_int_equal(dg_dma_dev_policy(t.dd), DG_DMA_STRICT);
	assert_int_equal(dg_dma_dev_policy(dd2), DG_DMA_STRICT);
	assert_int_equal(dg_dma_dev_policy(dd3), DG_DMA_IDENTITY); /* exempted */
	assert_int_equal(dg_dma_dev_set_policy(dd2, DG_DMA_IDENTITY), -EPERM);
	assert_int_equal(dg_dma_dev_set_policy(dd2, DG_DMA_LAZY), 0);
	errno = 0;
	assert_null(fixture_dev(&t.f, 4, DG_DMA_IDENTITY, NULL, NULL));
	assert_int_equal(errno, EPERM);
	assert_int_equal(dg_dma_set_force_translation(t.f.dma, false), 0);
	assert_int_equal(dg_dma_dev_set_policy(dd2, DG_DMA_IDENTITY), 0);
	/* reconfigure: a 32-bit mask */
	dg_dma_dev_get_config(t.dd, &c);
	c.dma_mask = 0xffffffffu;
	assert_int_equal(dg_dma_dev_configure(t.dd, &c), 0);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, &dma), 0);
	assert_true(dma <= 0xffffffffu);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	fixture_dev_destroy(dd2);
	fixture_dev_destroy(dd3);
	teardown_dev(&t);
	free(buf);
}

/* ---- lazy: the window and its bound --------------------------------------------------------- */

static void test_lazy_window(void **state)
{
	const uint64_t timeout = 10000000, period = 1000000;
	uint8_t *buf = page_alloc(64 * 4096), got[8];
	struct dg_dma_dev_config c;
	uint64_t dma, first;
	struct t t;

	(void)state;
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_LAZY;
	c.lazy.queue_size = 16;
	c.lazy.timeout_ns = timeout;
	setup_dev(&t, DG_DMA_LAZY, &c);
	/* a stale translation stays usable after unmap: the window */
	assert_int_equal(dg_dma_map_single(t.dd, buf, 64, DG_DMA_TO_DEVICE, 0, &first), 0);
	assert_int_equal(dg_dev_read(t.dev, first, got, 8), 0); /* into the IOTLB */
	assert_int_equal(dg_dma_unmap_single(t.dd, first, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dev_read(t.dev, first, got, 8), 0);
	assert_int_equal(stats(t.dd).lazy_pending, 1);
	fixture_advance(&t.f, timeout - 1);
	dg_dma_housekeep(t.f.dma);
	assert_int_equal(dg_dev_read(t.dev, first, got, 8), 0); /* not yet */
	fixture_advance(&t.f, 1);
	dg_dma_housekeep(t.f.dma); /* timeout reached: flushed and completed */
	assert_int_equal(dg_dev_read(t.dev, first, got, 8), -EFAULT);
	struct dg_dma_stats st = stats(t.dd);
	assert_int_equal(st.lazy_pending, 0);
	assert_int_equal(st.lazy_timeout_flushes, 1);
	assert_int_equal(st.lazy_window_max_ns, timeout);
	/* a driver-like stream with housekeeping every period: windows stay bounded */
	for (unsigned int i = 0; i < 5000; i++) {
		unsigned int n = 1 + i % 3;

		assert_int_equal(dg_dma_map_single(t.dd, buf + (i % 64) * 4096, n * 100,
						   DG_DMA_BIDIRECTIONAL, 0, &dma),
				 0);
		assert_int_equal(dg_dev_read(t.dev, dma, got, 8), 0);
		assert_int_equal(
			dg_dma_unmap_single(t.dd, dma, n * 100, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
		fixture_advance(&t.f, period / 4); /* housekeeping every period */
		if (i % 4 == 3)
			dg_dma_housekeep(t.f.dma);
	}
	st = stats(t.dd);
	assert_true(st.lazy_flushes > 100);
	assert_true(st.lazy_window_max_unmaps <= 16);
	assert_true(st.lazy_window_max_unmaps >= 8);
	assert_true(st.lazy_window_max_ns <= timeout + period);
	dg_dma_dev_dump(t.dd, stderr);
	/* idle switch drains the queues */
	assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_STRICT), 0);
	assert_int_equal(stats(t.dd).lazy_pending, 0);
	teardown_dev(&t);
	free(buf);
}

/* ---- the Linux-like reference ---------------------------------------------------------------- */

static void test_reference(void **state)
{
	uint8_t *buf = page_alloc(5 * 4096);
	struct dg_dma_batch b;
	uint64_t dma;
	struct t t;

	(void)state;
	assert_int_equal(fixture_init(&t.f, true, 0), 0);
	t.dd = fixture_idle_dev(&t.f, 1, DG_DMA_STRICT, true, &t.dev);
	assert_non_null(t.dd);
	assert_int_equal(dg_dma_map_single(t.dd, buf + 100, 4 * 4096, DG_DMA_TO_DEVICE, 0, &dma),
			 0);
	struct dg_dma_stats s0 = stats(t.dd);
	dg_dma_batch_begin(t.dd, &b);
	/* one synchronous invalidation per page, even in a batch */
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 4 * 4096, DG_DMA_TO_DEVICE, 0, &b), 0);
	struct dg_dma_stats s1 = stats(t.dd);
	assert_int_equal(s1.inval_waits - s0.inval_waits, 5);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	teardown_dev(&t);
	free(buf);
}

/* ---- a device that never reaches a quiescent point ------------------------------------------- */

static void test_timeouts(void **state)
{
	uint8_t *buf = page_alloc(4 * 4096), got[8];
	struct dg_dma_pool *pool = NULL;
	struct dg_dma_batch b;
	uint64_t dma, dma2, cdma;
	void *coh;
	struct t t;

	(void)state;
	assert_int_equal(fixture_init(&t.f, false, 20000000), 0); /* waits give up after 20 ms */
	t.dd = fixture_dev(&t.f, 1, DG_DMA_STRICT, NULL, &t.dev);
	assert_non_null(t.dd);
	assert_int_equal(dg_dma_map_single(t.dd, buf, 100, DG_DMA_TO_DEVICE, 0, &dma), 0);
	assert_int_equal(dg_dma_map_single(t.dd, buf + 4096, 100, DG_DMA_TO_DEVICE, 0, &dma2), 0);
	coh = dg_dma_alloc_coherent(t.dd, 4096, &cdma);
	assert_non_null(coh);
	/* The device does one DMA and stays online without ever acknowledging again. */
	assert_int_equal(dg_dev_read(t.dev, dma, got, 8), 0);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 100, DG_DMA_TO_DEVICE, 0, NULL),
			 -ETIMEDOUT);
	struct dg_dma_stats st = stats(t.dd);
	assert_int_equal(st.err_timeout, 1);
	assert_int_equal(st.quarantined, 1);
	assert_int_equal(st.live, 2); /* the unmap happened, its IOVA is held back */
	assert_int_equal(dg_dma_unmap_single(t.dd, dma, 100, DG_DMA_TO_DEVICE, 0, NULL), -ENOENT);
	dg_dma_batch_begin(t.dd, &b);
	assert_int_equal(dg_dma_unmap_single(t.dd, dma2, 100, DG_DMA_TO_DEVICE, 0, &b), 0);
	assert_int_equal(dg_dma_batch_end(&b), -ETIMEDOUT);
	assert_int_equal(dg_dma_free_coherent(t.dd, coh, 4096, cdma), -ETIMEDOUT);
	assert_int_equal(stats(t.dd).quarantined, 3);
	assert_int_equal(stats(t.dd).live, 0);
	/* not idle while anything waits for confirmation */
	assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_LAZY), -ETIMEDOUT);
	dg_dma_housekeep(t.f.dma);
	assert_int_equal(stats(t.dd).quarantined, 3);
	/* the device reaches a quiescent point: everything is confirmed and released */
	dg_dev_quiesce(t.dev);
	dg_dma_housekeep(t.f.dma);
	assert_int_equal(stats(t.dd).quarantined, 0);
	assert_int_equal(dg_dev_read(t.dev, dma, got, 8), -EFAULT);
	dg_dev_set_auto_offline(t.dev, true);
	dg_dev_offline(t.dev);
	/* pools go through the same path */
	assert_int_equal(dg_dma_dev_set_policy(t.dd, DG_DMA_POOL), 0);
	pool = dg_dma_pool_create(t.dd, 4096, 4, DG_DMA_BIDIRECTIONAL, 0);
	assert_non_null(pool);
	assert_int_equal(dg_dma_pool_destroy(pool), 0);
	teardown_dev(&t);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_names),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_map_each_policy),
		cmocka_unit_test(test_need_sync),
		cmocka_unit_test(test_stats_many_devices),
		cmocka_unit_test(test_bad_unmaps),
		cmocka_unit_test(test_bad_maps),
		cmocka_unit_test(test_identity_checks),
		cmocka_unit_test(test_mask32_and_exhaustion),
		cmocka_unit_test(test_fail_hooks),
		cmocka_unit_test(test_sg_mixed),
		cmocka_unit_test(test_sg_pages),
		cmocka_unit_test(test_order_frees_model),
		cmocka_unit_test(test_iova_order),
		cmocka_unit_test(test_sg_limits),
		cmocka_unit_test(test_bounce_subpage),
		cmocka_unit_test(test_bounce_sync_and_limits),
		cmocka_unit_test(test_bounce_exhaustion),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_coherent),
		cmocka_unit_test(test_two_step),
		cmocka_unit_test(test_batch),
		cmocka_unit_test(test_hint_table_unlink),
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_pool_sg),
		cmocka_unit_test(test_pool_sg_long),
		cmocka_unit_test(test_pool_errors),
		cmocka_unit_test(test_switch_and_force),
		cmocka_unit_test(test_lazy_window),
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_timeouts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
