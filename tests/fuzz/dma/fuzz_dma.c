/* SPDX-License-Identifier: MIT */
/*
 * Fuzz harness of the DMA API: arbitrary call sequences on one device, checked against a
 * model of the live mappings.
 *
 * Input: byte 0 picks the policy and the device's mask and segment limits; then 4-byte
 * operations {op, a, b, c}: map single/page/sg (slot a, offset, length and direction from
 * b and c), unmap (correctly, or wrongly: another length, direction or kind, an address never
 * mapped, twice), device reads and writes of live mappings, syncs, batches around unmaps,
 * coherent allocations and frees (right and wrong), two-step links and unlinks, housekeeping
 * with the clock moved past the lazy timeout, policy switches, injected IOVA/shadow failures.
 *
 * Invariants (any violation aborts): a successful map is readable (to-device, bidirectional)
 * with the driver's bytes and writable (from-device, bidirectional) by the device, and the
 * forbidden access is refused; every wrong call fails with the documented errno and changes
 * nothing (the live count in dg_dma_dev_stats() equals the model's, dg_dma_dev_check()
 * passes); under strict and bounce a buffer's bytes are never reachable after its unmap.
 */
#include <dmaguard/dma.h>

#include "../../unit/dma/dma_test_util.h"

#include <stdio.h>

#define SLOTS 12
#define PG    4096u
#define ARENA (SLOTS * 3 * PG)

#define REQUIRE(c)                                                                         \
	do {                                                                               \
		if (!(c)) {                                                                \
			fprintf(stderr, "fuzz_dma: %s failed at line %d\n", #c, __LINE__); \
			abort();                                                           \
		}                                                                          \
	} while (0)

struct slot {
	int kind; /* 0 free, 1 single, 2 page, 3 sg, 4 coherent, 5 link */
	enum dg_dma_dir dir;
	uint8_t *buf;
	size_t len;
	uint64_t dma;
	struct dg_dma_sg sg[3];
	unsigned int nents, nr;
	void *coh;
	bool pending; /* two-step: unlinked in the batch still open */
};

struct fz {
	struct dma_fixture f;
	struct dg_dma_dev *dd;
	struct dg_device *dev;
	enum dg_dma_policy policy;
	uint8_t *arena;
	struct slot s[SLOTS];
	uint64_t live;
	struct dg_dma_batch b;
	bool in_batch;
	struct dg_dma_iova_state st;
	bool have_st;
	int fail_point, fail_err;
	uint64_t max_seg;
	unsigned int checks;
};

static int fz_fail(void *cookie, enum dg_dma_fail_point point, uint32_t rid)
{
	struct fz *z = cookie;

	(void)rid;
	if ((int)point != z->fail_point)
		return 0;
	z->fail_point = 0;
	return z->fail_err;
}

static bool tracked(const struct fz *z)
{
	return z->policy != DG_DMA_IDENTITY;
}

static void check_state(struct fz *z)
{
	struct dg_dma_stats st;

	REQUIRE(dg_dma_dev_stats(z->dd, &st) == 0);
	REQUIRE(st.live == z->live);
	if (!(++z->checks & 15)) /* the full check walks every table: every 16th step */
		REQUIRE(dg_dma_dev_check(z->dd, stderr) == 0);
}

static void device_use(struct fz *z, struct slot *s)
{
	uint8_t tmp[3 * PG];
	uint64_t pos = 0;

	for (unsigned int i = 0; i < (s->kind == 3 ? s->nr : 1); i++) {
		uint64_t dma = s->kind == 3 ? s->sg[i].dma_addr : s->dma;
		size_t len = s->kind == 3 ? s->sg[i].dma_len : s->len;
		int r = dg_dev_read(z->dev, dma, tmp, len);

		if (s->dir == DG_DMA_FROM_DEVICE && z->policy != DG_DMA_IDENTITY) {
			REQUIRE(r == -EACCES);
		} else {
			REQUIRE(r == 0);
			if (s->kind != 3)
				REQUIRE(!memcmp(tmp, s->buf, len));
		}
		if (s->dir != DG_DMA_TO_DEVICE) {
			memset(tmp, (int)(pos + 0x3c), len);
			REQUIRE(dg_dev_write(z->dev, dma, tmp, len) == 0);
		} else if (z->policy != DG_DMA_IDENTITY) {
			REQUIRE(dg_dev_write(z->dev, dma, tmp, 1) == -EACCES);
		}
		pos += len;
	}
	if (s->dir != DG_DMA_TO_DEVICE && s->kind != 3) {
		REQUIRE(dg_dma_sync_for_cpu(z->dd, s->dma, s->len, s->dir) == 0);
		for (size_t k = 0; k < s->len; k++)
			REQUIRE(s->buf[k] == 0x3c);
	}
}

static void op_map(struct fz *z, struct slot *s, uint8_t a, uint8_t b, uint8_t c)
{
	uint8_t *base = z->arena + (size_t)(s - z->s) * 3 * PG;
	int r, expect_fail = 0;

	s->dir = (enum dg_dma_dir)(c % 3);
	s->buf = base + (size_t)b * 16;
	s->len = 1 + (size_t)((a * 37u + c) % (2 * PG - (size_t)b * 16 + 1));
	for (size_t k = 0; k < s->len; k++)
		s->buf[k] = (uint8_t)(k * 31 + c);
	if (c & 0x40) { /* inject a failure into this map */
		z->fail_point = z->policy == DG_DMA_BOUNCE ? DG_DMA_FAIL_SHADOW : DG_DMA_FAIL_IOVA;
		z->fail_err = c & 0x80 ? -ENOMEM : -ENOSPC;
		expect_fail = z->policy != DG_DMA_IDENTITY;
	}
	if (a % 3 == 2 && s->len > 64) {
		s->nents = 2 + (a & 1);
		s->sg[0] = (struct dg_dma_sg){.addr = s->buf, .len = 64};
		s->sg[1] = (struct dg_dma_sg){.addr = s->buf + 64, .len = s->len - 64};
		if (s->nents == 3) {
			s->sg[2] = (struct dg_dma_sg){.addr = base + 2 * PG + 100, .len = 200};
			memset(base + 2 * PG + 100, 0x11, 200);
		}
		r = dg_dma_map_sg(z->dd, s->sg, s->nents, s->dir, 0, &s->nr);
		s->kind = 3;
		if (s->sg[1].len > z->max_seg) { /* a segment longer than the device takes */
			REQUIRE(r == -EINVAL);
			z->fail_point = 0;
			s->kind = 0;
			return;
		}
		if (!r)
			s->dma = s->sg[0].dma_addr;
	} else if (a % 3 == 1) {
		uintptr_t p = (uintptr_t)s->buf;

		r = dg_dma_map_page(z->dd, (void *)(p & ~(uintptr_t)(PG - 1)), p & (PG - 1), s->len,
				    s->dir, 0, &s->dma);
		s->kind = 2;
	} else {
		r = dg_dma_map_single(z->dd, s->buf, s->len, s->dir, 0, &s->dma);
		s->kind = 1;
	}
	z->fail_point = 0;
	if (expect_fail) {
		REQUIRE(r == -ENOSPC || r == -ENOMEM);
		s->kind = 0;
		return;
	}
	if (r) {
		/* only the shadow area may run out (bounce, 256 KiB per CPU) */
		REQUIRE(z->policy == DG_DMA_BOUNCE && r == -ENOSPC);
		s->kind = 0;
		return;
	}
	z->live++;
	device_use(z, s);
}

static int do_unmap(struct fz *z, struct slot *s, size_t len, enum dg_dma_dir dir, int kind,
		    unsigned int nents)
{
	struct dg_dma_batch *b = z->in_batch ? &z->b : NULL;

	if (kind == 3)
		return dg_dma_unmap_sg(z->dd, s->sg, nents, dir, 0, b);
	if (kind == 2)
		return dg_dma_unmap_page(z->dd, s->dma, len, dir, 0, b);
	return dg_dma_unmap_single(z->dd, s->dma, len, dir, 0, b);
}

static void op_unmap(struct fz *z, struct slot *s, uint8_t how)
{
	int r;

	if (s->kind < 1 || s->kind > 3)
		return;
	if (tracked(z)) {
		switch (how % 4) {
		case 1:
			if (s->kind != 3)
				REQUIRE(do_unmap(z, s, s->len + 1, s->dir, s->kind, 0) == -EINVAL);
			break;
		case 2:
			REQUIRE(do_unmap(z, s, s->len, (enum dg_dma_dir)((s->dir + 1) % 3), s->kind,
					 s->nents) == -EINVAL);
			break;
		case 3:
			if (s->kind != 3)
				REQUIRE(do_unmap(z, s, s->len, s->dir, s->kind == 1 ? 2 : 1, 0) ==
					-EINVAL);
			else if (s->nents > 2)
				REQUIRE(do_unmap(z, s, s->len, s->dir, 3, 2) == -EINVAL);
			break;
		}
		check_state(z);
	}
	r = do_unmap(z, s, s->len, s->dir, s->kind, s->nents);
	REQUIRE(r == 0);
	z->live--;
	if (s->dir != DG_DMA_TO_DEVICE && s->kind != 3)
		for (size_t k = 0; k < s->len; k++)
			REQUIRE(s->buf[k] == 0x3c);
	memset(s->buf, 0xee, s->len);
	if (tracked(z)) {
		REQUIRE(do_unmap(z, s, s->len, s->dir, s->kind, s->nents) == -ENOENT);
		if (!z->in_batch && (z->policy == DG_DMA_STRICT || z->policy == DG_DMA_BOUNCE)) {
			uint8_t tmp[16];

			/* the buffer's bytes are out of reach */
			if (dg_dev_read(z->dev, s->dma, tmp, 8) == 0)
				REQUIRE(memcmp(tmp, s->buf, 8) != 0);
		}
	}
	s->kind = 0;
}

static void op_coherent(struct fz *z, struct slot *s, uint8_t how)
{
	uint8_t tmp[8] = "cohrent";

	if (s->kind == 0) {
		size_t size = 1 + (size_t)how * 40;

		s->coh = dg_dma_alloc_coherent(z->dd, size, &s->dma);
		REQUIRE(s->coh);
		s->len = size;
		s->kind = 4;
		z->live++;
		REQUIRE(dg_dev_write(z->dev, s->dma, tmp, 8) == 0);
		REQUIRE(!memcmp(s->coh, tmp, 8));
	} else if (s->kind == 4) {
		REQUIRE(dg_dma_free_coherent(z->dd, s->coh, s->len + 8192, s->dma) == -EINVAL);
		REQUIRE(dg_dma_free_coherent(z->dd, s->coh, s->len, s->dma) == 0);
		z->live--;
		s->kind = 0;
	}
}

static void op_link(struct fz *z, struct slot *s, uint8_t how)
{
	unsigned int idx = (unsigned int)(s - z->s);
	uint64_t off = (uint64_t)idx * 2 * PG;
	int r;

	if (!z->have_st)
		return;
	if (s->kind == 0) {
		s->buf = z->arena + (size_t)idx * 3 * PG + how;
		s->len = 1 + how * 8u;
		s->dir = (enum dg_dma_dir)(how % 3);
		memset(s->buf, 0x5b, s->len);
		r = dg_dma_iova_link(&z->st, off, s->buf, s->len, s->dir, &s->dma);
		if (s->pending && r) { /* unlinked in the open batch: pages go at its end (or at an
					  early flush of a full batch, or never under identity) */
			REQUIRE(r == -EEXIST);
			return;
		}
		REQUIRE(r == 0);
		s->kind = 5;
		z->live++;
		if (s->dir != DG_DMA_FROM_DEVICE) {
			uint8_t tmp[8];

			REQUIRE(dg_dev_read(z->dev, s->dma, tmp, 1) == 0 && tmp[0] == 0x5b);
		}
	} else if (s->kind == 5) {
		if (tracked(z)) {
			REQUIRE(dg_dma_iova_unlink(&z->st, off, s->len + 1, s->dir, NULL) ==
				-EINVAL);
			REQUIRE(dg_dma_iova_free(&z->st) == -EBUSY);
		}
		REQUIRE(dg_dma_iova_unlink(&z->st, off, s->len, s->dir,
					   z->in_batch ? &z->b : NULL) == 0);
		s->pending = z->in_batch;
		if (tracked(z))
			REQUIRE(dg_dma_iova_unlink(&z->st, off, s->len, s->dir, NULL) == -ENOENT);
		s->kind = 0;
		z->live--;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dg_dma_fail_hook hook;
	struct dg_dma_dev_config c;
	struct fz *z;

	if (size < 1)
		return 0;
	z = calloc(1, sizeof(*z));
	REQUIRE(z && fixture_init(&z->f, false, 0) == 0);
	z->arena = page_alloc(ARENA);
	hook = (struct dg_dma_fail_hook){fz_fail, z};
	dg_dma_set_fail_hook(z->f.dma, &hook);
	dg_dma_dev_config_init(&c);
	z->policy = (enum dg_dma_policy)(data[0] % DG_DMA_NR_POLICIES);
	c.policy = z->policy;
	c.lazy.queue_size = 8;
	c.window.size = 64ull << 20; /* a small flat table: dg_pt_check() walks all of it */
	c.bounce.area_size = 256 << 10;
	if (data[0] & 0x10 && z->policy != DG_DMA_IDENTITY && z->policy != DG_DMA_WINDOW)
		c.dma_mask = 0xffffffffu;
	if (data[0] & 0x20)
		c.max_seg_size = 4096;
	z->max_seg = c.max_seg_size;
	if (data[0] & 0x40)
		c.seg_boundary = 0xffff;
	z->dd = fixture_dev(&z->f, 1, z->policy, &c, &z->dev);
	REQUIRE(z->dd);
	dg_dev_set_auto_offline(z->dev, true);
	z->have_st = dg_dma_iova_alloc(z->dd, SLOTS * 2 * PG, &z->st) == 0;
	REQUIRE(z->have_st == (z->policy != DG_DMA_BOUNCE));

	for (size_t i = 1; i + 4 <= size; i += 4) {
		uint8_t op = data[i], a = data[i + 1], b = data[i + 2], cc = data[i + 3];
		struct slot *s = &z->s[a % SLOTS];

		switch (op % 10) {
		case 0:
		case 1:
			if (!s->kind)
				op_map(z, s, a, b, cc);
			break;
		case 2:
		case 3:
			op_unmap(z, s, b);
			break;
		case 4:
			if (s->kind >= 1 && s->kind <= 3)
				device_use(z, s);
			break;
		case 5:
			if (!z->in_batch) {
				dg_dma_batch_begin(z->dd, &z->b);
				z->in_batch = true;
			} else {
				REQUIRE(dg_dma_batch_end(&z->b) == 0);
				z->in_batch = false;
				for (unsigned int k = 0; k < SLOTS; k++)
					z->s[k].pending = false;
			}
			break;
		case 6:
			op_coherent(z, s, b);
			break;
		case 7:
			op_link(z, s, b);
			break;
		case 8:
			fixture_advance(&z->f, (uint64_t)b * 100000);
			REQUIRE(dg_dma_housekeep(z->f.dma) == 0);
			break;
		case 9: {
			/* a policy switch: refused while anything is live */
			int r = dg_dma_dev_set_policy(z->dd, z->policy);

			REQUIRE(r == (z->live || z->have_st || z->in_batch ? -EBUSY : 0));
			/* wrong unmaps of addresses never mapped */
			if (tracked(z)) {
				r = dg_dma_unmap_single(z->dd, 0x100000000ull * (b + 1) + cc * 64,
							64, DG_DMA_TO_DEVICE, 0, NULL);
				REQUIRE(r == -ENOENT);
			}
			break;
		}
		}
		check_state(z);
	}
	if (z->in_batch)
		REQUIRE(dg_dma_batch_end(&z->b) == 0);
	z->in_batch = false;
	for (unsigned int k = 0; k < SLOTS; k++)
		z->s[k].pending = false;
	for (unsigned int k = 0; k < SLOTS; k++) {
		struct slot *s = &z->s[k];

		if (s->kind >= 1 && s->kind <= 3)
			op_unmap(z, s, 0);
		else if (s->kind == 4)
			op_coherent(z, s, 0);
		else if (s->kind == 5)
			op_link(z, s, 0);
	}
	if (z->have_st)
		REQUIRE(dg_dma_iova_free(&z->st) == 0);
	check_state(z);
	REQUIRE(dg_dma_dev_set_policy(
			z->dd, (enum dg_dma_policy)((z->policy + 1) % DG_DMA_NR_POLICIES)) == 0);
	fixture_dev_destroy(z->dd);
	fixture_fini(&z->f);
	free(z->arena);
	free(z);
	return 0;
}
