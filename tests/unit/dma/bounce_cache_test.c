/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the bounce policy's small-slot fast path (src/dma/bounce.c): per-thread free
 * stacks of 64 B .. 2 KiB shadow slots in front of the per-area buddy allocators.
 *
 *  - random maps and unmaps against a model: live slots never overlap, in_use is exact, the
 *    structure check (including the thread caches) holds after every step;
 *  - a slot reused from a stack carries nothing of its previous buffer: the padding the
 *    device can read is zeroed, and unmap copies back only the mapped bytes;
 *  - when the areas run dry the thread gives its cached slots back (a whole area is again
 *    available for the largest slot);
 *  - slots mapped by one thread and unmapped by another (its stack spills them back), double
 *    unmaps refused;
 *  - a thread's exit gives its cached slots back (threads that come and go strand nothing:
 *    every area is whole again for the largest slot), and its cache is taken over by the next;
 *  - the leaf fast paths of map, sync and unmap (inline copies of up to 64 bytes): every length 1..64 up and down and a few past it (a to-device slot
 *    zeroes only what its previous buffer left past the new one), every direction, in a
 *    write-only from-device area (VT-d) and a readable one (ARM LPAE stage 1): the device
 *    sees exactly the buffer and zeros, copies move exactly the bytes asked (guard bytes
 *    around the driver's buffer and a partial sync's neighbours stay as they were), the copy
 *    counters are exact, and every misuse is refused with nothing changed.
 */
#include "dma_test_util.h"

#include <dmaguard/dev.h>
#include <dmaguard/iommu.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include "../../test_rand.h"

struct env {
	struct dma_fixture f;
	struct dg_device *dev;
	struct dg_dma_dev *dd;
};

static void env_init_fmt(struct env *e, uint64_t area_size, enum dg_pt_format fmt)
{
	struct dg_dma_dev_config c;

	assert_int_equal(fixture_init(&e->f, false, 0), 0);
	dg_dma_dev_config_init(&c);
	c.policy = DG_DMA_BOUNCE;
	c.geo.format = fmt;
	if (area_size)
		c.bounce.area_size = area_size;
	e->dd = fixture_dev(&e->f, 1, DG_DMA_BOUNCE, &c, &e->dev);
	assert_non_null(e->dd);
	dg_dev_set_auto_offline(e->dev, true);
}

static void env_init(struct env *e, uint64_t area_size)
{
	env_init_fmt(e, area_size, DG_PT_FMT_VTD_SS);
}

static void env_fini(struct env *e)
{
	assert_int_equal(fixture_end(&e->f, e->dd), 0);
}

static struct dg_dma_stats stats(struct dg_dma_dev *dd)
{
	struct dg_dma_stats st;

	assert_int_equal(dg_dma_dev_stats(dd, &st), 0);
	return st;
}

static uint64_t slot_bytes(size_t len)
{
	uint64_t s = 64;

	while (s < len)
		s <<= 1;
	return s;
}

static uint64_t rnd(uint64_t *s)
{
	return xorshift64(s);
}

#define LIVE_MAX 256

struct live {
	uint64_t dma;
	size_t len;
	enum dg_dma_dir dir;
	uint8_t *buf;
};

static void test_model(void **state)
{
	static struct live live[LIVE_MAX];
	struct env e;
	static uint8_t *freebuf[LIVE_MAX];
	unsigned int n = 0, nfree = LIVE_MAX;
	uint64_t seed = 0x9e3779b97f4a7c15ull, in_use = 0;
	uint8_t *mem = page_alloc((size_t)LIVE_MAX * 16384);

	(void)state;
	assert_non_null(mem);
	for (unsigned int k = 0; k < LIVE_MAX; k++)
		freebuf[k] = mem + (size_t)k * 16384; /* a buffer per live mapping */
	env_init(&e, 0);
	for (unsigned int step = 0; step < 4000; step++) {
		bool map = n == 0 || (n < LIVE_MAX && rnd(&seed) % 100 < 55);

		if (map) {
			struct live *l = &live[n];
			/* mostly fast-path sizes, some larger (locked path) */
			size_t len = rnd(&seed) % 10 ? 1 + rnd(&seed) % 2048 :
						       2049 + rnd(&seed) % 14000;
			uint64_t sb = slot_bytes(len);

			l->dir = (enum dg_dma_dir)(rnd(&seed) % 3);
			l->len = len;
			l->buf = freebuf[--nfree];
			assert_int_equal(dg_dma_map_single(e.dd, l->buf, len, l->dir, 0, &l->dma),
					 0);
			for (unsigned int j = 0; j < n; j++) {
				uint64_t ob = slot_bytes(live[j].len);

				/* two live slots never share a byte */
				assert_true(l->dma + sb <= live[j].dma ||
					    live[j].dma + ob <= l->dma);
			}
			assert_int_equal(l->dma % sb, 0); /* naturally aligned */
			in_use += sb;
			n++;
		} else {
			unsigned int i = (unsigned int)(rnd(&seed) % n);
			struct live *l = &live[i];

			assert_int_equal(dg_dma_unmap_single(e.dd, l->dma, l->len, l->dir, 0, NULL),
					 0);
			/* a second unmap of the same slot is refused */
			assert_int_equal(dg_dma_unmap_single(e.dd, l->dma, l->len, l->dir, 0, NULL),
					 -ENOENT);
			in_use -= slot_bytes(l->len);
			freebuf[nfree++] = l->buf;
			live[i] = live[--n];
		}
		if (step % 16 == 0) {
			assert_int_equal(stats(e.dd).bounce_in_use, in_use);
			assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
		}
	}
	while (n) {
		n--;
		assert_int_equal(dg_dma_unmap_single(e.dd, live[n].dma, live[n].len, live[n].dir, 0,
						     NULL),
				 0);
	}
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(stats(e.dd).live, 0);
	env_fini(&e);
	free(mem);
}

static void test_reuse_clean(void **state)
{
	struct env e;
	uint8_t *buf = page_alloc(4096), got[128];
	uint64_t dma, dma2;

	(void)state;
	assert_non_null(buf);
	env_init(&e, 0);

	/* to-device: a reused slot shows the new buffer and zeros, never the old one */
	memset(buf, 0xaa, 128);
	assert_int_equal(dg_dma_map_single(e.dd, buf, 128, DG_DMA_TO_DEVICE, 0, &dma), 0);
	assert_int_equal(dg_dev_read(e.dev, dma, got, 128), 0);
	for (unsigned int i = 0; i < 128; i++)
		assert_int_equal(got[i], 0xaa);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma, 128, DG_DMA_TO_DEVICE, 0, NULL), 0);
	memset(buf, 0x55, 128);
	assert_int_equal(dg_dma_map_single(e.dd, buf, 100, DG_DMA_TO_DEVICE, 0, &dma2), 0);
	assert_int_equal(dma2, dma); /* the stack is LIFO: the same slot */
	assert_int_equal(dg_dev_read(e.dev, dma2, got, 128), 0);
	for (unsigned int i = 0; i < 128; i++)
		assert_int_equal(got[i], i < 100 ? 0x55 : 0);
	/* the device cannot write a to-device slot */
	assert_int_not_equal(dg_dev_write(e.dev, dma2, got, 1), 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma2, 100, DG_DMA_TO_DEVICE, 0, NULL), 0);

	/* from-device: unmap copies back the mapped bytes and nothing past them */
	memset(buf, 0x11, 256);
	assert_int_equal(dg_dma_map_single(e.dd, buf, 100, DG_DMA_FROM_DEVICE, 0, &dma), 0);
	memset(got, 0x77, sizeof(got));
	assert_int_equal(dg_dev_write(e.dev, dma, got, 128), 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma, 100, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	for (unsigned int i = 0; i < 256; i++)
		assert_int_equal(buf[i], i < 100 ? 0x77 : 0x11);
	/* sync copies only what it is asked */
	memset(buf, 0x11, 256);
	assert_int_equal(dg_dma_map_single(e.dd, buf, 64, DG_DMA_FROM_DEVICE, 0, &dma), 0);
	assert_int_equal(dg_dev_write(e.dev, dma, got, 64), 0);
	assert_int_equal(dg_dma_sync_for_cpu(e.dd, dma + 8, 8, DG_DMA_FROM_DEVICE), 0);
	for (unsigned int i = 0; i < 64; i++)
		assert_int_equal(buf[i], i >= 8 && i < 16 ? 0x77 : 0x11);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma, 64, DG_DMA_FROM_DEVICE,
					     DG_DMA_ATTR_SKIP_CPU_SYNC, NULL),
			 0);
	assert_int_equal(buf[0], 0x11);
	env_fini(&e);
	free(buf);
}

#define AREA (256u << 10)

static void test_exhaustion_gives_cache_back(void **state)
{
	struct env e;
	unsigned int n = 0, areas, nbig = 0;
	uint64_t *dma = calloc(4096, sizeof(*dma)), big[64];
	uint8_t *buf = page_alloc(AREA);

	(void)state;
	assert_non_null(dma);
	assert_non_null(buf);
	env_init(&e, AREA);
	/* fill every from-device area with 2 KiB slots */
	for (;;) {
		int r = dg_dma_map_single(e.dd, buf, 2048, DG_DMA_FROM_DEVICE, 0, &dma[n]);

		if (r) {
			assert_int_equal(r, -ENOSPC);
			break;
		}
		n++;
		assert_true(n < 4096);
	}
	assert_true(n >= AREA / 2048); /* at least this CPU's area */
	assert_int_equal(stats(e.dd).bounce_in_use, (uint64_t)n * 2048);
	/* give them all back: the last ones stay in this thread's stack */
	areas = n; /* remember the count */
	while (n) {
		n--;
		assert_int_equal(dg_dma_unmap_single(e.dd, dma[n], 2048, DG_DMA_FROM_DEVICE,
						     DG_DMA_ATTR_SKIP_CPU_SYNC, NULL),
				 0);
	}
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	/*
	 * Every area whole again for the largest slot, this CPU's too (where the slots this
	 * thread still caches come from): only if the cached slots were given back.
	 */
	areas = (unsigned int)((uint64_t)areas * 2048 / AREA);
	assert_true(areas >= 1 && areas <= 64);
	while (dg_dma_map_single(e.dd, buf, AREA, DG_DMA_FROM_DEVICE, 0, &big[nbig]) == 0) {
		nbig++;
		assert_true(nbig <= areas);
	}
	assert_int_equal(nbig, areas);
	assert_int_equal(stats(e.dd).bounce_in_use, (uint64_t)areas * AREA);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	while (nbig) {
		nbig--;
		assert_int_equal(
			dg_dma_unmap_single(e.dd, big[nbig], AREA, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	}
	/* and small slots come back as before */
	assert_int_equal(dg_dma_map_single(e.dd, buf, 64, DG_DMA_FROM_DEVICE, 0, &dma[0]), 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma[0], 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	env_fini(&e);
	free(dma);
	free(buf);
}

/*
 * Every to-device byte dirtied by 2 KiB buffers, given back (merged in the buddy lists), then
 * taken again as 64-byte slots for 10-byte buffers until the areas are dry: the device reads
 * each buffer and zeros past it - a slot that comes off the buddy allocator is zeroed whole,
 * whatever length its unit's record last held.
 */
static void test_dirty_from_buddy(void **state)
{
	size_t cap = 1024, n = 0;
	uint64_t *dma = malloc(cap * sizeof(*dma));
	uint8_t *buf = page_alloc(2048), got[64];
	struct env e;

	(void)state;
	assert_non_null(dma);
	assert_non_null(buf);
	env_init(&e, AREA);
	memset(buf, 0xee, 2048);
	for (int r;
	     (r = dg_dma_map_single(e.dd, buf, 2048, DG_DMA_TO_DEVICE, 0, &dma[n])) != -ENOSPC;) {
		assert_int_equal(r, 0);
		if (++n == cap) {
			cap *= 2;
			dma = realloc(dma, cap * sizeof(*dma));
			assert_non_null(dma);
		}
	}
	assert_true(n >= AREA / 2048);
	while (n) {
		n--;
		assert_int_equal(dg_dma_unmap_single(e.dd, dma[n], 2048, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	}
	for (unsigned int i = 0; i < 10; i++)
		buf[i] = (uint8_t)(i + 1);
	for (int r;
	     (r = dg_dma_map_single(e.dd, buf, 10, DG_DMA_TO_DEVICE, 0, &dma[n])) != -ENOSPC;) {
		assert_int_equal(r, 0);
		assert_int_equal(dg_dev_read(e.dev, dma[n], got, 64), 0);
		for (unsigned int i = 0; i < 64; i++)
			assert_int_equal(got[i], i < 10 ? i + 1 : 0);
		if (++n == cap) {
			cap *= 2;
			dma = realloc(dma, cap * sizeof(*dma));
			assert_non_null(dma);
		}
	}
	assert_true(n >= AREA / 64); /* every byte of this CPU's area at least */
	while (n) {
		n--;
		assert_int_equal(dg_dma_unmap_single(e.dd, dma[n], 10, DG_DMA_TO_DEVICE, 0, NULL),
				 0);
	}
	env_fini(&e);
	free(dma);
	free(buf);
}

#define XN 300

struct xarg {
	struct env *e;
	uint8_t *buf;
	uint64_t dma[XN];
};

static void *mapper(void *p)
{
	struct xarg *x = p;

	for (unsigned int i = 0; i < XN; i++) {
		memset(x->buf + i * 64, (int)(i & 0xff), 64);
		if (dg_dma_map_single(x->e->dd, x->buf + i * 64, 64, DG_DMA_BIDIRECTIONAL, 0,
				      &x->dma[i]))
			return (void *)1;
	}
	return NULL;
}

static void test_cross_thread(void **state)
{
	struct env e;
	struct xarg x;
	pthread_t t;
	void *ret;

	(void)state;
	x.e = &e;
	x.buf = page_alloc(XN * 64);
	assert_non_null(x.buf);
	env_init(&e, 0);
	for (unsigned int round = 0; round < 3; round++) {
		assert_int_equal(pthread_create(&t, NULL, mapper, &x), 0);
		assert_int_equal(pthread_join(t, &ret), 0);
		assert_null(ret);
		assert_int_equal(stats(e.dd).bounce_in_use, XN * 64);
		memset(x.buf, 0xee, XN * 64);
		/* this thread unmaps: its stack fills and spills to the slots' areas */
		for (unsigned int i = 0; i < XN; i++) {
			assert_int_equal(dg_dma_unmap_single(e.dd, x.dma[i], 64,
							     DG_DMA_BIDIRECTIONAL, 0, NULL),
					 0);
			for (unsigned int k = 0; k < 64; k++)
				assert_int_equal(x.buf[i * 64 + k], i & 0xff);
		}
		assert_int_equal(dg_dma_unmap_single(e.dd, x.dma[0], 64, DG_DMA_BIDIRECTIONAL, 0,
						     NULL),
				 -ENOENT);
		assert_int_equal(stats(e.dd).bounce_in_use, 0);
		assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	}
	env_fini(&e);
	free(x.buf);
}

/* How many whole-area (largest) slots the from-device areas give, all unmapped again. */
static unsigned int whole_areas(struct env *e, uint8_t *buf)
{
	uint64_t big[64];
	unsigned int n = 0;

	while (n < 64 && dg_dma_map_single(e->dd, buf, AREA, DG_DMA_FROM_DEVICE, 0, &big[n]) == 0)
		n++;
	for (unsigned int i = 0; i < n; i++)
		assert_int_equal(
			dg_dma_unmap_single(e->dd, big[i], AREA, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	return n;
}

#define EXIT_MAPS 64

static void *small_user(void *p)
{
	struct xarg *x = p;

	/* fills this thread's 2 KiB stack from the areas, then gives the slots to the stack */
	for (unsigned int i = 0; i < EXIT_MAPS; i++)
		if (dg_dma_map_single(x->e->dd, x->buf, 2048, DG_DMA_FROM_DEVICE, 0, &x->dma[i]))
			return (void *)1;
	for (unsigned int i = 0; i < EXIT_MAPS; i++)
		if (dg_dma_unmap_single(x->e->dd, x->dma[i], 2048, DG_DMA_FROM_DEVICE,
					DG_DMA_ATTR_SKIP_CPU_SYNC, NULL))
			return (void *)1;
	return NULL;
}

static void test_thread_exit(void **state)
{
	struct env e;
	struct xarg x;
	unsigned int areas;
	pthread_t t;
	void *ret;

	(void)state;
	x.e = &e;
	x.buf = page_alloc(AREA);
	assert_non_null(x.buf);
	env_init(&e, AREA);
	areas = whole_areas(&e, x.buf);
	assert_true(areas >= 1);
	/* Each thread caches slots of some area and exits: without the exit's hand-back one
	 * cached slot keeps its area from giving a whole-area slot. */
	for (unsigned int round = 0; round < 8; round++) {
		assert_int_equal(pthread_create(&t, NULL, small_user, &x), 0);
		assert_int_equal(pthread_join(t, &ret), 0);
		assert_null(ret);
		assert_int_equal(whole_areas(&e, x.buf), areas);
		assert_int_equal(stats(e.dd).bounce_in_use, 0);
		assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	}
	env_fini(&e);
	free(x.buf);
}

#define GUARD 64 /* guard bytes on each side of a buffer */

/* Byte @i of pattern @p (never the guard byte 0xa5 nor 0). */
static uint8_t pat(unsigned int p, size_t i)
{
	return (uint8_t)(1 + (p * 31 + i * 7) % 160);
}

static void check_guards(const uint8_t *area, size_t len)
{
	for (size_t i = 0; i < GUARD; i++) {
		assert_int_equal(area[i], 0xa5);
		assert_int_equal(area[GUARD + len + i], 0xa5);
	}
}

/* One map / device access / sync / unmap round of @len bytes in direction @dir. */
static void fast_round(struct env *e, uint8_t *area, size_t len, enum dg_dma_dir dir, bool readable,
		       unsigned int p)
{
	uint8_t *buf = area + GUARD, dev[4096 + 64], got[4096 + 64];
	const uint64_t sb = slot_bytes(len);
	const bool to = dir != DG_DMA_FROM_DEVICE, from = dir != DG_DMA_TO_DEVICE;
	struct dg_dma_stats s0 = stats(e->dd), s1;
	size_t off = len / 3, n = len - off > 64 ? 64 : len - off;
	uint64_t dma;

	memset(area, 0xa5, len + 2 * GUARD);
	for (size_t i = 0; i < len; i++)
		buf[i] = pat(p, i);
	assert_int_equal(dg_dma_map_single(e->dd, buf, len, dir, 0, &dma), 0);
	assert_int_equal(dma % 64, 0);
	s1 = stats(e->dd);
	assert_int_equal(s1.bounce_copy_in - s0.bounce_copy_in, to ? len : 0);
	if (readable) { /* the device sees the buffer (to-device) and zeros past it; under a
			 * from-device buffer, at most what it wrote there itself before */
		/* a to-device slot keeps zeros past its last buffer: only the bytes from the new
		 * length to the old one need zeroing (the reads below check that it is enough) */
		if (to && !from)
			assert_true(s1.bounce_zeroed - s0.bounce_zeroed <= sb - len);
		else
			assert_int_equal(s1.bounce_zeroed - s0.bounce_zeroed, sb - len);
		assert_int_equal(dg_dev_read(e->dev, dma, got, sb), 0);
		for (size_t i = to ? 0 : len; i < sb; i++)
			assert_int_equal(got[i], to && i < len ? pat(p, i) : 0);
	}
	check_guards(area, len);
	if (from) { /* the device writes the whole slot; a partial sync takes [off, off + n) */
		for (size_t i = 0; i < sb; i++)
			dev[i] = pat(p + 1, i);
		assert_int_equal(dg_dev_write(e->dev, dma, dev, sb), 0);
		s0 = stats(e->dd);
		assert_int_equal(dg_dma_sync_for_cpu(e->dd, dma + off, n, dir), 0);
		assert_int_equal(stats(e->dd).bounce_copy_out - s0.bounce_copy_out, n);
		for (size_t i = 0; i < len; i++)
			assert_int_equal(buf[i],
					 i >= off && i < off + n ? pat(p + 1, i) : pat(p, i));
		check_guards(area, len);
	} else { /* to-device: sync_for_cpu copies nothing, sync_for_device [off, off + n) */
		s0 = stats(e->dd);
		assert_int_equal(dg_dma_sync_for_cpu(e->dd, dma + off, n, dir), 0);
		for (size_t i = off; i < off + n; i++)
			buf[i] = pat(p + 2, i);
		assert_int_equal(dg_dma_sync_for_device(e->dd, dma + off, n, dir), 0);
		s1 = stats(e->dd);
		assert_int_equal(s1.bounce_copy_out - s0.bounce_copy_out, 0);
		assert_int_equal(s1.bounce_copy_in - s0.bounce_copy_in, n);
		assert_int_equal(dg_dev_read(e->dev, dma, got, len), 0);
		for (size_t i = 0; i < len; i++)
			assert_int_equal(got[i],
					 i >= off && i < off + n ? pat(p + 2, i) : pat(p, i));
	}
	/* misuse of the live mapping: refused, counted, nothing changed (a length that wraps
	 * included) */
	s0 = stats(e->dd);
	assert_int_equal(dg_dma_sync_for_cpu(e->dd, dma + off, len - off + 1, dir), -EINVAL);
	assert_int_equal(dg_dma_sync_for_cpu(e->dd, dma + 1, SIZE_MAX, dir), -EINVAL);
	assert_int_equal(dg_dma_sync_for_device(e->dd, dma + 1, SIZE_MAX - 1, dir), -EINVAL);
	assert_int_equal(dg_dma_sync_for_cpu(e->dd, dma, len,
					     dir == DG_DMA_TO_DEVICE ? DG_DMA_FROM_DEVICE :
								       DG_DMA_TO_DEVICE),
			 -EINVAL);
	assert_int_equal(dg_dma_unmap_single(e->dd, dma, len + 1, dir, 0, NULL), -EINVAL);
	assert_int_equal(dg_dma_unmap_single(e->dd, dma, len,
					     dir == DG_DMA_TO_DEVICE ? DG_DMA_FROM_DEVICE :
								       DG_DMA_TO_DEVICE,
					     0, NULL),
			 -EINVAL);
	if (sb > 64) /* inside the slot: not a mapping's address */
		assert_int_equal(dg_dma_unmap_single(e->dd, dma + 64, len - 64 ? len - 64 : 1, dir,
						     0, NULL),
				 -ENOENT);
	s1 = stats(e->dd);
	assert_int_equal(s1.err_invalid - s0.err_invalid, 6);
	assert_int_equal(s1.err_not_mapped - s0.err_not_mapped, sb > 64);
	check_guards(area, len);
	s0 = stats(e->dd);
	assert_int_equal(dg_dma_unmap_single(e->dd, dma, len, dir, 0, NULL), 0);
	s1 = stats(e->dd);
	assert_int_equal(s1.bounce_copy_out - s0.bounce_copy_out, from ? len : 0);
	for (size_t i = 0; i < len; i++) /* from-device: all of what the device wrote */
		assert_int_equal(buf[i], from			 ? pat(p + 1, i) :
					 i >= off && i < off + n ? pat(p + 2, i) :
								   pat(p, i));
	check_guards(area, len);
	/* gone: a second unmap and a sync find nothing (counted) */
	s0 = stats(e->dd);
	assert_int_equal(dg_dma_unmap_single(e->dd, dma, len, dir, 0, NULL), -ENOENT);
	assert_int_equal(dg_dma_sync_for_cpu(e->dd, dma, 1, dir), -ENOENT);
	assert_int_equal(stats(e->dd).err_not_mapped - s0.err_not_mapped, 2);
}

static void fast_paths(enum dg_pt_format fmt, bool from_readable)
{
	static const size_t big[] = {65, 100, 127, 128, 1500, 2048, 4096, 2048, 1500, 1100, 1025};
	static const enum dg_dma_dir dirs[] = {DG_DMA_TO_DEVICE, DG_DMA_FROM_DEVICE,
					       DG_DMA_BIDIRECTIONAL};
	uint8_t *area = page_alloc(4096 + 2 * GUARD);
	unsigned int p = 0;
	struct env e;

	assert_non_null(area);
	env_init_fmt(&e, 0, fmt);
	for (unsigned int d = 0; d < 3; d++) {
		const bool readable = dirs[d] != DG_DMA_FROM_DEVICE || from_readable;

		for (size_t len = 1; len <= 64; len++) /* the same slot, longer and longer */
			fast_round(&e, area, len, dirs[d], readable, p++);
		for (size_t len = 64; len >= 1; len--) /* shorter: old bytes past the new end */
			fast_round(&e, area, len, dirs[d], readable, p++);
		for (size_t k = 0; k < sizeof(big) / sizeof(big[0]); k++)
			fast_round(&e, area, big[k], dirs[d], readable, p++);
		assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	}
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	env_fini(&e);
	free(area);
}

static void test_fast_paths_vtd(void **state)
{
	(void)state;
	fast_paths(DG_PT_FMT_VTD_SS, false); /* from-device areas write-only */
}

static void test_fast_paths_lpae_s1(void **state)
{
	(void)state;
	fast_paths(DG_PT_FMT_ARM_LPAE_S1, true); /* no write-only: readable, padding zeroed */
}

/* ---- bulk calls ------------------------------------------------------------------------------- */

#define BULK_N	 DG_DMA_BULK_MAX
#define BULK_BUF 9216 /* bytes per buffer (the largest length below, plus room) */

/* The counters a bulk call must move exactly as its single calls do. */
static void assert_same_counts(const struct dg_dma_stats *a, const struct dg_dma_stats *b)
{
	assert_int_equal(a->maps, b->maps);
	assert_int_equal(a->unmaps, b->unmaps);
	assert_int_equal(a->map_bytes, b->map_bytes);
	assert_int_equal(a->live, b->live);
	assert_int_equal(a->bounce_copy_in, b->bounce_copy_in);
	assert_int_equal(a->bounce_copy_out, b->bounce_copy_out);
	assert_int_equal(a->bounce_zeroed, b->bounce_zeroed);
	assert_int_equal(a->bounce_in_use, b->bounce_in_use);
	assert_int_equal(a->err_invalid, b->err_invalid);
	assert_int_equal(a->err_not_mapped, b->err_not_mapped);
	assert_int_equal(a->err_shadow_space, b->err_shadow_space);
	assert_int_equal(a->batches, b->batches);
}

/*
 * dg_dma_map_bulk / dg_dma_unmap_bulk of n buffers against n single calls on a twin device
 * (same configuration, same history): random lengths (fast-path slots and larger ones),
 * directions, SKIP_CPU_SYNC or not, batch or not, n from 1 to DG_DMA_BULK_MAX. What the device
 * reads in every slot it can read (the buffer copied in, and zeros past it), what the unmaps
 * copy back, and every counter must be the same.
 */
static void bulk_vs_single(enum dg_pt_format fmt, bool from_readable)
{
	static const size_t lens[] = {1, 37, 64, 100, 128, 2048, 1500, 1100, 64, 4096, 9000, 700};
	static const unsigned int ns[] = {1, 2, 7, 48, 64, BULK_N};
	static uint64_t da[BULK_N], db[BULK_N];
	static uint8_t ga[16384], gb[16384];
	uint8_t *ma = page_alloc((size_t)BULK_N * BULK_BUF),
		*mb = page_alloc((size_t)BULK_N * BULK_BUF);
	void *ba[BULK_N], *bb[BULK_N];
	uint64_t seed = 0x2545f4914f6cdd1dull;
	struct env a, b;

	assert_non_null(ma);
	assert_non_null(mb);
	env_init_fmt(&a, 0, fmt);
	env_init_fmt(&b, 0, fmt);
	for (unsigned int i = 0; i < BULK_N; i++) {
		ba[i] = ma + (size_t)i * BULK_BUF;
		bb[i] = mb + (size_t)i * BULK_BUF;
	}
	for (unsigned int round = 0; round < 160; round++) {
		const size_t len = lens[rnd(&seed) % (sizeof(lens) / sizeof(lens[0]))];
		const uint64_t sb = slot_bytes(len);
		const unsigned int n0 = ns[rnd(&seed) % (sizeof(ns) / sizeof(ns[0]))];
		/* at most one area's worth: the areas never run dry here */
		const unsigned int n = n0 * sb > AREA ? (unsigned int)(AREA / sb) : n0;
		const enum dg_dma_dir dir = (enum dg_dma_dir)(rnd(&seed) % 3);
		const unsigned int attrs = rnd(&seed) % 2 ? DG_DMA_ATTR_SKIP_CPU_SYNC : 0;
		const bool batched = rnd(&seed) % 2;
		const bool from = dir != DG_DMA_TO_DEVICE,
			   copy_in = dir != DG_DMA_FROM_DEVICE && !attrs;
		const bool readable = dir != DG_DMA_FROM_DEVICE || from_readable;
		struct dg_dma_batch xa, xb;

		for (unsigned int i = 0; i < n; i++)
			for (size_t k = 0; k < len; k++)
				((uint8_t *)ba[i])[k] = ((uint8_t *)bb[i])[k] = pat(round + i, k);
		assert_int_equal(dg_dma_map_bulk(a.dd, ba, n, len, dir, attrs, da), 0);
		for (unsigned int i = 0; i < n; i++)
			assert_int_equal(dg_dma_map_single(b.dd, bb[i], len, dir, attrs, &db[i]),
					 0);
		{
			struct dg_dma_stats sa = stats(a.dd), sbb = stats(b.dd);

			assert_same_counts(&sa, &sbb);
		}
		for (unsigned int i = 0; i < n; i++) {
			assert_int_equal(da[i] % 64, 0);
			for (unsigned int j = 0; j < i && n <= 64; j++) /* never one slot twice */
				assert_true(da[i] + sb <= da[j] || da[j] + sb <= da[i]);
			if (readable) {
				assert_int_equal(dg_dev_read(a.dev, da[i], ga, sb), 0);
				assert_int_equal(dg_dev_read(b.dev, db[i], gb, sb), 0);
				/* not below len without a copy-in: what the slot held before (the
				 * twins' refills may take their slots from different CPUs' areas) */
				for (size_t k = copy_in ? 0 : len; k < sb; k++) {
					assert_int_equal(ga[k], k < len ? pat(round + i, k) : 0);
					assert_int_equal(gb[k], ga[k]);
				}
			}
			if (from) { /* the device writes the buffer's bytes */
				for (size_t k = 0; k < len; k++)
					ga[k] = pat(round + i + 7, k);
				assert_int_equal(dg_dev_write(a.dev, da[i], ga, len), 0);
				assert_int_equal(dg_dev_write(b.dev, db[i], ga, len), 0);
			}
		}
		if (batched) {
			dg_dma_batch_begin(a.dd, &xa);
			dg_dma_batch_begin(b.dd, &xb);
		}
		assert_int_equal(
			dg_dma_unmap_bulk(a.dd, da, n, len, dir, attrs, batched ? &xa : NULL), 0);
		for (unsigned int i = 0; i < n; i++)
			assert_int_equal(dg_dma_unmap_single(b.dd, db[i], len, dir, attrs,
							     batched ? &xb : NULL),
					 0);
		if (batched) {
			/* not given back before the batch's end, but unmapped */
			assert_int_equal(stats(a.dd).bounce_in_use, stats(b.dd).bounce_in_use);
			assert_int_equal(dg_dma_unmap_bulk(a.dd, da, n, len, dir, attrs, &xa),
					 -ENOENT);
			assert_int_equal(dg_dma_dev_check(a.dd, stderr), 0);
			assert_int_equal(dg_dma_batch_end(&xa), 0);
			assert_int_equal(dg_dma_unmap_single(b.dd, db[0], len, dir, attrs, &xb),
					 -ENOENT);
			assert_int_equal(dg_dma_batch_end(&xb), 0);
		} else {
			assert_int_equal(dg_dma_unmap_bulk(a.dd, da, n, len, dir, attrs, NULL),
					 -ENOENT);
			assert_int_equal(dg_dma_unmap_single(b.dd, db[0], len, dir, attrs, NULL),
					 -ENOENT);
		}
		for (unsigned int i = 0; i < n; i++) {
			assert_memory_equal(ba[i], bb[i], len);
			for (size_t k = 0; k < len; k++)
				assert_int_equal(((uint8_t *)ba[i])[k],
						 from && !attrs ? pat(round + i + 7, k) :
								  pat(round + i, k));
		}
		{
			struct dg_dma_stats sa = stats(a.dd), sbb = stats(b.dd);

			assert_same_counts(&sa, &sbb);
			assert_int_equal(sa.bounce_in_use, 0);
			assert_int_equal(sa.live, 0);
		}
		if (round % 8 == 0) {
			assert_int_equal(dg_dma_dev_check(a.dd, stderr), 0);
			assert_int_equal(dg_dma_dev_check(b.dd, stderr), 0);
		}
	}
	env_fini(&a);
	env_fini(&b);
	free(ma);
	free(mb);
}

static void test_bulk_vs_single_vtd(void **state)
{
	(void)state;
	bulk_vs_single(DG_PT_FMT_VTD_SS, false);
}

static void test_bulk_vs_single_lpae_s1(void **state)
{
	(void)state;
	bulk_vs_single(DG_PT_FMT_ARM_LPAE_S1, true);
}

/* Fails the @cookie-th shadow slot allocation (counting from 1). */
static int fail_shadow_nth(void *cookie, enum dg_dma_fail_point point, uint32_t rid)
{
	unsigned int *left = cookie;

	(void)rid;
	if (point != DG_DMA_FAIL_SHADOW || !*left)
		return 0;
	return --*left ? 0 : -ENOSPC;
}

#define AN 8

/* Every mapping of @dma[0..AN) is live and usable: a sync copies what the device wrote. */
static void all_usable(struct env *e, const uint64_t *dma, uint8_t *mem)
{
	for (unsigned int i = 0; i < AN; i++) {
		memset(mem + i * 64, 0xee, 64);
		assert_int_equal(dg_dma_sync_for_cpu(e->dd, dma[i], 64, DG_DMA_FROM_DEVICE), 0);
		for (unsigned int k = 0; k < 64; k++)
			assert_int_equal(mem[i * 64 + k], pat(i, k));
	}
}

/*
 * All or nothing: a bad entry anywhere in a bulk unmap (inside a slot, another direction or
 * length, an address twice, outside the areas, a wrapping one - which wins over the others)
 * refuses the call with its error counted, nothing unmapped, nothing copied back, nothing in
 * the batch, and every mapping still usable; a bulk map with a NULL buffer or a slot
 * allocation failing in the middle maps nothing.
 */
static void test_bulk_all_or_nothing(void **state)
{
	struct {
		unsigned int at;
		uint64_t v; /* 1: dma[at] + 1; 2: the to-device mapping; 3: the 128-byte one;
			       4: dma[1]; 5: outside; 6: wraps */
		unsigned int at2, v2;
		int want;
	} cases[] = {
		{4, 1, 0, 0, -ENOENT}, {4, 2, 0, 0, -EINVAL}, {4, 3, 0, 0, -EINVAL},
		{4, 4, 0, 0, -ENOENT}, {4, 5, 0, 0, -ENOENT}, {4, 6, 0, 0, -ERANGE},
		{7, 4, 0, 0, -ENOENT}, {0, 2, 0, 0, -EINVAL}, {4, 4, 6, 6, -ERANGE},
		{2, 2, 5, 5, -EINVAL},
	};
	uint8_t *mem = page_alloc(4096), dev[64];
	uint64_t dma[AN], list[AN], tdma, bdma, in_use;
	void *bufs[AN];
	struct dg_dma_stats s0, s1;
	struct env e;

	(void)state;
	assert_non_null(mem);
	env_init(&e, 0);
	for (unsigned int i = 0; i < AN; i++)
		bufs[i] = mem + i * 64;
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, AN, 64, DG_DMA_FROM_DEVICE, 0, dma), 0);
	assert_int_equal(dg_dma_map_single(e.dd, mem + 1024, 64, DG_DMA_TO_DEVICE, 0, &tdma), 0);
	assert_int_equal(dg_dma_map_single(e.dd, mem + 2048, 128, DG_DMA_FROM_DEVICE, 0, &bdma), 0);
	for (unsigned int i = 0; i < AN; i++) {
		for (unsigned int k = 0; k < 64; k++)
			dev[k] = pat(i, k);
		assert_int_equal(dg_dev_write(e.dev, dma[i], dev, 64), 0);
	}
	in_use = stats(e.dd).bounce_in_use;
	for (unsigned int c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		for (unsigned int mode = 0; mode < 2; mode++) {
			struct dg_dma_batch b;

			memcpy(list, dma, sizeof(list));
			for (unsigned int k = 0; k < 2; k++) {
				unsigned int at = k ? cases[c].at2 : cases[c].at;
				uint64_t v = k ? cases[c].v2 : cases[c].v;

				if (!v)
					continue;
				list[at] = v == 1 ? dma[at] + 1 :
					   v == 2 ? tdma :
					   v == 3 ? bdma :
					   v == 4 ? dma[1] :
					   v == 5 ? 0x1000 :
						    UINT64_MAX - 8;
			}
			memset(mem, 0xee, AN * 64);
			s0 = stats(e.dd);
			if (mode)
				dg_dma_batch_begin(e.dd, &b);
			/* attrs 0: a call that went through would copy back */
			assert_int_equal(dg_dma_unmap_bulk(e.dd, list, AN, 64, DG_DMA_FROM_DEVICE,
							   0, mode ? &b : NULL),
					 cases[c].want);
			if (mode)
				assert_int_equal(dg_dma_batch_end(&b), 0);
			s1 = stats(e.dd);
			assert_int_equal(s1.unmaps, s0.unmaps);
			assert_int_equal(s1.live, s0.live);
			assert_int_equal(s1.bounce_in_use, in_use);
			assert_int_equal(s1.bounce_copy_out, s0.bounce_copy_out);
			assert_int_equal(s1.err_invalid - s0.err_invalid, cases[c].want == -EINVAL);
			assert_int_equal(s1.err_not_mapped - s0.err_not_mapped,
					 cases[c].want == -ENOENT);
			assert_int_equal(s1.err_range - s0.err_range, cases[c].want == -ERANGE);
			for (unsigned int i = 0; i < AN * 64; i++)
				assert_int_equal(mem[i], 0xee);
			assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
			all_usable(&e, dma, mem);
		}
	/* maps: a NULL buffer, then a slot allocation failing at the 1st, 5th and 8th */
	s0 = stats(e.dd);
	bufs[3] = NULL;
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, AN, 64, DG_DMA_FROM_DEVICE, 0, list), -EINVAL);
	bufs[3] = mem + 3 * 64;
	for (unsigned int k = 1; k <= AN; k += 3) {
		unsigned int left = k;
		struct dg_dma_fail_hook h = {fail_shadow_nth, &left};

		dg_dma_set_fail_hook(e.f.dma, &h);
		assert_int_equal(dg_dma_map_bulk(e.dd, bufs, AN, 64, DG_DMA_FROM_DEVICE, 0, list),
				 -ENOSPC);
		dg_dma_set_fail_hook(e.f.dma, NULL);
		assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	}
	s1 = stats(e.dd);
	assert_int_equal(s1.maps, s0.maps);
	assert_int_equal(s1.live, s0.live);
	assert_int_equal(s1.bounce_in_use, in_use);
	assert_int_equal(s1.err_invalid - s0.err_invalid, 1);
	assert_int_equal(s1.err_shadow_space - s0.err_shadow_space, 3);
	all_usable(&e, dma, mem);
	/* then all of it goes */
	assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, AN, 64, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, tdma, 64, DG_DMA_TO_DEVICE, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, bdma, 128, DG_DMA_FROM_DEVICE, 0, NULL), 0);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	env_fini(&e);
	free(mem);
}

/*
 * Double unmaps: an address twice in one call, a bulk unmap again, a single unmap or a sync
 * of a slot a bulk call unmapped (before and after its batch's end); two chains of 256 slots
 * in one batch (the second overflows this thread's stack at the end: spills); the areas
 * running dry in the middle of a bulk map leave nothing mapped.
 */
static void test_bulk_double_unmap(void **state)
{
	static uint64_t dma[BULK_N], more[BULK_N];
	static void *bufs[BULK_N];
	uint8_t *mem = page_alloc((size_t)BULK_N * 2048);
	struct dg_dma_batch b;
	uint64_t list[3], (*dry)[BULK_N];
	struct env e;
	unsigned int nmaps = 0;

	(void)state;
	assert_non_null(mem);
	env_init(&e, AREA);
	for (unsigned int i = 0; i < BULK_N; i++)
		bufs[i] = mem + (size_t)i * 2048;
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, 16, 100, DG_DMA_BIDIRECTIONAL, 0, dma), 0);
	list[0] = dma[0];
	list[1] = dma[1];
	list[2] = dma[0];
	assert_int_equal(dg_dma_unmap_bulk(e.dd, list, 3, 100, DG_DMA_BIDIRECTIONAL, 0, NULL),
			 -ENOENT);
	assert_int_equal(stats(e.dd).live, 16);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, 16, 100, DG_DMA_BIDIRECTIONAL, 0, NULL), 0);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, 16, 100, DG_DMA_BIDIRECTIONAL, 0, NULL),
			 -ENOENT);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma[3], 100, DG_DMA_BIDIRECTIONAL, 0, NULL),
			 -ENOENT);
	assert_int_equal(dg_dma_sync_for_cpu(e.dd, dma[3], 1, DG_DMA_BIDIRECTIONAL), -ENOENT);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);

	/* in a batch: unmapped at once, the slots back at its end */
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, 16, 100, DG_DMA_BIDIRECTIONAL, 0, dma), 0);
	dg_dma_batch_begin(e.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, 16, 100, DG_DMA_BIDIRECTIONAL, 0, &b), 0);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, dma + 8, 8, 100, DG_DMA_BIDIRECTIONAL, 0, &b),
			 -ENOENT);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma[5], 100, DG_DMA_BIDIRECTIONAL, 0, &b),
			 -ENOENT);
	assert_int_equal(dg_dma_sync_for_cpu(e.dd, dma[5], 1, DG_DMA_BIDIRECTIONAL), -ENOENT);
	assert_int_equal(stats(e.dd).live, 0);
	assert_int_equal(stats(e.dd).bounce_in_use, 16 * 128); /* held until the end */
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma[5], 100, DG_DMA_BIDIRECTIONAL, 0, NULL),
			 -ENOENT);

	/* two chains of 256 64-byte slots and singles in one batch */
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, BULK_N, 64, DG_DMA_FROM_DEVICE,
					 DG_DMA_ATTR_SKIP_CPU_SYNC, dma),
			 0);
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, BULK_N, 64, DG_DMA_FROM_DEVICE,
					 DG_DMA_ATTR_SKIP_CPU_SYNC, more),
			 0);
	dg_dma_batch_begin(e.dd, &b);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, BULK_N - 1, 64, DG_DMA_FROM_DEVICE,
					   DG_DMA_ATTR_SKIP_CPU_SYNC, &b),
			 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, dma[BULK_N - 1], 64, DG_DMA_FROM_DEVICE,
					     DG_DMA_ATTR_SKIP_CPU_SYNC, &b),
			 0);
	assert_int_equal(dg_dma_unmap_bulk(e.dd, more, BULK_N, 64, DG_DMA_FROM_DEVICE,
					   DG_DMA_ATTR_SKIP_CPU_SYNC, &b),
			 0);
	assert_int_equal(stats(e.dd).bounce_in_use, 2 * BULK_N * 64);
	assert_int_equal(dg_dma_batch_end(&b), 0);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);

	/* dry: bulk maps of 256 2 KiB slots (two areas' worth) until the areas refuse one,
	 * which maps nothing; then the others go */
	dry = calloc(1100, sizeof(*dry));
	assert_non_null(dry);
	for (;;) {
		struct dg_dma_stats s0 = stats(e.dd);
		int r;

		assert_true(nmaps < 1100);
		r = dg_dma_map_bulk(e.dd, bufs, BULK_N, 2048, DG_DMA_TO_DEVICE, 0, dry[nmaps]);
		if (r) {
			assert_int_equal(r, -ENOSPC);
			assert_int_equal(stats(e.dd).bounce_in_use, s0.bounce_in_use);
			assert_int_equal(stats(e.dd).live, s0.live);
			assert_int_equal(stats(e.dd).err_shadow_space, s0.err_shadow_space + 1);
			break;
		}
		nmaps++;
	}
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	while (nmaps--)
		assert_int_equal(dg_dma_unmap_bulk(e.dd, dry[nmaps], BULK_N, 2048, DG_DMA_TO_DEVICE,
						   0, NULL),
				 0);
	free(dry);
	assert_int_equal(stats(e.dd).bounce_in_use, 0);
	env_fini(&e);
	free(mem);
}

/*
 * A bulk unmap with the length of the slots' order but not the one they were mapped with:
 * refused (-EINVAL) whether the wrong entry is the first, in the middle (a single map of 90
 * bytes among bulk maps of 100, all 128-byte slots of one area) or all of them, with or
 * without a batch, and nothing unmapped (the claims made before it given back); then the
 * right lengths unmap all, the sync of a 64-byte frame of each copying exactly its bytes.
 */
static void test_bulk_wrong_len(void **state)
{
	uint8_t *mem = page_alloc(16 * 256);
	struct dg_dma_batch b;
	uint64_t dma[16], list[9], one;
	void *bufs[16];
	struct env e;

	(void)state;
	assert_non_null(mem);
	env_init(&e, AREA);
	for (unsigned int i = 0; i < 16; i++)
		bufs[i] = mem + (size_t)i * 256;
	assert_int_equal(dg_dma_map_bulk(e.dd, bufs, 8, 100, DG_DMA_FROM_DEVICE, 0, dma), 0);
	assert_int_equal(dg_dma_map_single(e.dd, bufs[8], 90, DG_DMA_FROM_DEVICE, 0, &one), 0);
	for (unsigned int i = 0; i < 9; i++)
		list[i] = i < 4 ? dma[i] : i == 4 ? one : dma[i - 1];
	for (unsigned int k = 0; k < 2; k++) {
		struct dg_dma_batch *bp = k ? &b : NULL;

		if (bp)
			dg_dma_batch_begin(e.dd, bp);
		assert_int_equal(dg_dma_unmap_bulk(e.dd, list, 9, 100, DG_DMA_FROM_DEVICE, 0, bp),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_bulk(e.dd, list + 4, 5, 100, DG_DMA_FROM_DEVICE, 0,
						   bp),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, 8, 120, DG_DMA_FROM_DEVICE, 0, bp),
				 -EINVAL);
		assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, 8, 90, DG_DMA_FROM_DEVICE, 0, bp),
				 -EINVAL);
		if (bp)
			assert_int_equal(dg_dma_batch_end(bp), 0);
		assert_int_equal(stats(e.dd).live, 9);
		assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	}
	/* still live: a 64-byte frame synced back exactly, then unmapped with their lengths */
	memset(mem, 0xee, 16 * 256);
	for (unsigned int i = 0; i < 9; i++) {
		uint8_t frame[64], *buf = bufs[i < 4 ? i : i == 4 ? 8 : i - 1]; /* list[i]'s */

		for (unsigned int j = 0; j < 64; j++)
			frame[j] = (uint8_t)(i * 64 + j + 1);
		assert_int_equal(dg_dev_write(e.dev, list[i], frame, 64), 0);
		assert_int_equal(dg_dma_sync_for_cpu(e.dd, list[i], 64, DG_DMA_FROM_DEVICE), 0);
		assert_memory_equal(buf, frame, 64);
		assert_int_equal(buf[64], 0xee);
	}
	assert_int_equal(dg_dma_unmap_bulk(e.dd, dma, 8, 100, DG_DMA_FROM_DEVICE,
					   DG_DMA_ATTR_SKIP_CPU_SYNC, NULL),
			 0);
	assert_int_equal(dg_dma_unmap_single(e.dd, one, 90, DG_DMA_FROM_DEVICE,
					     DG_DMA_ATTR_SKIP_CPU_SYNC, NULL),
			 0);
	assert_int_equal(stats(e.dd).live, 0);
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	env_fini(&e);
	free(mem);
}

/*
 * Small syncs (<= 64 bytes: the inline copies) in each direction and each way, at the start
 * of a slot and inside its first unit: for the device copies the buffer into the slot unless
 * the device only writes it; for the CPU copies the slot into the buffer unless the device
 * only reads it; exactly the bytes asked, nothing around them. A sync for the device never
 * writes the CPU's buffer (session 14: the receive's sync is picked by for_cpu and dir in
 * bounce_sync(); without the for_cpu test a from-device sync for the device copied back).
 */
static void test_small_sync_dirs(void **state)
{
	static const enum dg_dma_dir dirs[] = {DG_DMA_BIDIRECTIONAL, DG_DMA_TO_DEVICE,
					       DG_DMA_FROM_DEVICE};
	static const struct {
		unsigned int off, len;
	} rng[] = {{0, 64}, {0, 13}, {8, 16}, {3, 40}, {0, 1}};
	uint8_t *buf = page_alloc(4096);
	struct env e;

	(void)state;
	assert_non_null(buf);
	env_init(&e, AREA);
	for (unsigned int d = 0; d < 3; d++)
		for (unsigned int k = 0; k < sizeof(rng) / sizeof(rng[0]); k++) {
			const enum dg_dma_dir dir = dirs[d];
			const unsigned int off = rng[k].off, len = rng[k].len;
			uint8_t want[100], got[100], pat[100], cpu[100];
			uint64_t dma;

			for (unsigned int j = 0; j < 100; j++) {
				buf[j] = (uint8_t)(0x40 + j);
				pat[j] = (uint8_t)(0x80 + j * 3 + k);
			}
			assert_int_equal(dg_dma_map_single(e.dd, buf, 100, dir, 0, &dma), 0);
			/* for the device: the CPU's new bytes reach the slot */
			memcpy(want, buf, 100);
			for (unsigned int j = 0; j < 100; j++)
				buf[j] ^= 0x5a;
			if (dir != DG_DMA_FROM_DEVICE)
				memcpy(want + off, buf + off, len);
			memcpy(cpu, buf, 100);
			assert_int_equal(dg_dma_sync_for_device(e.dd, dma + off, len, dir), 0);
			assert_memory_equal(buf, cpu, 100);
			if (dir != DG_DMA_FROM_DEVICE) {
				assert_int_equal(dg_dev_read(e.dev, dma, got, 100), 0);
				assert_memory_equal(got, want, 100);
			}
			/* for the CPU: the device's bytes reach the buffer */
			memcpy(want, buf, 100);
			if (dir != DG_DMA_TO_DEVICE) {
				assert_int_equal(dg_dev_write(e.dev, dma, pat, 100), 0);
				memcpy(want + off, pat + off, len);
			}
			assert_int_equal(dg_dma_sync_for_cpu(e.dd, dma + off, len, dir), 0);
			assert_memory_equal(buf, want, 100);
			/* another direction's sync is refused */
			assert_int_equal(dg_dma_sync_for_cpu(e.dd, dma + off, len,
							     dirs[(d + 1) % 3]),
					 -EINVAL);
			assert_int_equal(dg_dma_unmap_single(e.dd, dma, 100, dir,
							     DG_DMA_ATTR_SKIP_CPU_SYNC, NULL),
					 0);
		}
	assert_int_equal(dg_dma_dev_check(e.dd, stderr), 0);
	env_fini(&e);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_reuse_clean),
		cmocka_unit_test(test_exhaustion_gives_cache_back),
		cmocka_unit_test(test_cross_thread),
		cmocka_unit_test(test_thread_exit),
		cmocka_unit_test(test_dirty_from_buddy),
		cmocka_unit_test(test_fast_paths_vtd),
		cmocka_unit_test(test_fast_paths_lpae_s1),
		cmocka_unit_test(test_bulk_vs_single_vtd),
		cmocka_unit_test(test_bulk_vs_single_lpae_s1),
		cmocka_unit_test(test_bulk_all_or_nothing),
		cmocka_unit_test(test_bulk_double_unmap),
		cmocka_unit_test(test_bulk_wrong_len),
		cmocka_unit_test(test_small_sync_dirs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
