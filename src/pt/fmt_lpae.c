/* SPDX-License-Identifier: MIT */
/*
 * pt/fmt_lpae.c - ARM LPAE (VMSAv8-64) stage 1 and stage 2 page tables, bit for bit as Linux
 * 6.1's drivers/iommu/io-pgtable-arm.c writes them (checked against tests/unit/pt/vectors/
 * lpae-kat.json, 384 leaves produced by that code).
 *
 * Geometry. A granule of 4K, 16K or 64K (shift g) gives tables of 2^(g-3) entries; levels are
 * numbered as Linux does, 0..3 with 3 the last (page) level, so a table with n levels starts at
 * level 4 - n. The root takes the bits left over (root_index_bits); at stage 2 a walk that
 * would start at level 0 with at most 16 root entries starts at level 1 instead, the root
 * being that many concatenated tables (ARM_LPAE_S2_MAX_CONCAT_PAGES).
 *
 *   descriptor   [1:0]  leaf attributes [11:2], [54:52]   address
 *   table        0b11   0                                  [47:g] next table
 *   block        0b01   see below (levels 1, 2)            [47:g] (bits below the block 0)
 *   page         0b11   see below (level 3)                [47:g]
 * With the 64K granule and oas 52, PA[51:48] goes in bits [15:12] of leaves.
 *
 * Leaf attributes (quirks 0, coherent walk), prot = DG_PROT_* (Linux's IOMMU_* values):
 *   AF bit 10 always; SH [9:8] = 0b11 (inner) with CACHE, else 0b10 (outer);
 *   XN [54:53] = 0b11 with NOEXEC.
 *   stage 1: nG bit 11 always; AP[2] bit 7 = read-only (READ without WRITE); AP[1] bit 6 =
 *            unprivileged unless PRIV; AttrIndx [4:2] = 2 MMIO, else 1 CACHE, else 0 (MAIR
 *            below). WRITE alone is stored as read-write: stage 1 has no write-only.
 *   stage 2: HAP bit 6 = READ, bit 7 = WRITE; MemAttr [5:2] = 0x1 MMIO (Device-nGnRE), else
 *            0xf CACHE (write-back), else 0x5 (non-cacheable); PRIV ignored.
 *
 * Table descriptors hold the table's process address (the identity "physical" address of
 * dmaguard/common.h); they are checked against the 48-bit address field, not against oas,
 * which limits only what leaves may point to.
 */
#include "pt_internal.h"

#include <errno.h>

#define LPAE_TYPE_TABLE 3ull
#define LPAE_TYPE_PAGE	3ull
#define LPAE_TYPE_BLOCK 1ull
#define LPAE_VALID	1ull
#define LPAE_AF		(1ull << 10)
#define LPAE_NG		(1ull << 11)
#define LPAE_SH_IS	(3ull << 8)
#define LPAE_SH_OS	(2ull << 8)
#define LPAE_SH_MASK	(3ull << 8)
#define LPAE_XN		(3ull << 53)
#define LPAE_AP_UNPRIV	(1ull << 6)
#define LPAE_AP_RDONLY	(1ull << 7)
#define LPAE_ATTRIDX(n) ((uint64_t)(n) << 2)
#define LPAE_ATTR_MASK	(7ull << 2)
#define LPAE_HAP_READ	(1ull << 6)
#define LPAE_HAP_WRITE	(1ull << 7)
#define LPAE_MEMATTR(n) ((uint64_t)(n) << 2)
#define LPAE_MEMATTR_M	(0xfull << 2)
#define LPAE_OA_HI	0xf000ull /* PA[51:48] with the 64K granule and oas 52 */
#define LPAE_MAX_CONCAT 16	  /* ARM_LPAE_S2_MAX_CONCAT_PAGES */

/* MAIR attribute indices and values (Linux ARM_LPAE_MAIR_ATTR_*). */
enum { LPAE_IDX_NC = 0, LPAE_IDX_CACHE = 1, LPAE_IDX_DEV = 2, LPAE_IDX_INC_OCACHE = 3 };
#define LPAE_MAIR_NC	     0x44u
#define LPAE_MAIR_WBRWA	     0xffu
#define LPAE_MAIR_DEVICE     0x04u
#define LPAE_MAIR_INC_OWBRWA 0xf4u

/* Stage-2 MemAttr values. */
#define LPAE_MEMATTR_DEV  0x1
#define LPAE_MEMATTR_OIWB 0xf
#define LPAE_MEMATTR_NC	  0x5

static bool lpae_is_s1(const struct dg_pt *pt)
{
	return pt->geo.format == DG_PT_FMT_ARM_LPAE_S1;
}

/* TCR.IPS / VTCR.PS encoding of an output size, or -1. */
static int lpae_ps(unsigned int oas)
{
	switch (oas) {
	case 32:
		return 0;
	case 36:
		return 1;
	case 40:
		return 2;
	case 42:
		return 3;
	case 44:
		return 4;
	case 48:
		return 5;
	case 52:
		return 6;
	default:
		return -1;
	}
}

/*
 * Linux computes MAIR with int shifts: 0xf4 << 24 is a negative int, sign-extended to 64 bits,
 * so bytes 4..7 read 0xff. Reproduced exactly (the vectors expect 0xfffffffff404ff44).
 */
static uint64_t lpae_mair(void)
{
	int32_t hi = (int32_t)(LPAE_MAIR_INC_OWBRWA << (8 * LPAE_IDX_INC_OCACHE));

	return ((uint64_t)LPAE_MAIR_NC << (8 * LPAE_IDX_NC)) |
	       ((uint64_t)LPAE_MAIR_WBRWA << (8 * LPAE_IDX_CACHE)) |
	       ((uint64_t)LPAE_MAIR_DEVICE << (8 * LPAE_IDX_DEV)) | (uint64_t)(int64_t)hi;
}

static int lpae_init(struct dg_pt *pt)
{
	struct dg_pt_geometry *geo = &pt->geo;
	struct pt_lpae_regs *r = &pt->lpae;
	unsigned int g, bpl, va_bits, levels, pgd_bits, start;
	uint64_t sizes;
	int ps;

	if (!geo->granule)
		geo->granule = 1ull << 12;
	if (!geo->ias)
		geo->ias = 48;
	if (!geo->oas)
		geo->oas = 48;
	switch (geo->granule) {
	case 1ull << 12:
		sizes = (1ull << 12) | (1ull << 21) | (1ull << 30);
		break;
	case 1ull << 14:
		sizes = (1ull << 14) | (1ull << 25);
		break;
	case 1ull << 16:
		sizes = (1ull << 16) | (1ull << 29);
		if (geo->oas > 48)
			sizes |= 1ull << 42; /* level-1 block, only with 52-bit output (as Linux) */
		break;
	default:
		return -EINVAL;
	}
	g = dg_ilog2(geo->granule);
	ps = lpae_ps(geo->oas);
	if (ps < 0 || (geo->oas > 48 && g != 16))
		return -EINVAL;
	if (geo->ias < 32 || geo->ias > (g == 16 ? 52u : 48u))
		return -EINVAL;
	if (!geo->pgsize_bitmap)
		geo->pgsize_bitmap = sizes;
	if ((geo->pgsize_bitmap & ~sizes) || !(geo->pgsize_bitmap & geo->granule))
		return -EINVAL;
	if (geo->window_base || geo->window_size)
		return -EINVAL;

	/* The walk geometry, as arm_lpae_alloc_pgtable() and its stage-2 variant compute it. */
	bpl = g - 3;
	va_bits = geo->ias - g;
	levels = (va_bits + bpl - 1) / bpl;
	start = 4 - levels;
	pgd_bits = va_bits - bpl * (levels - 1);
	r->concatenated = false;
	if (pt->geo.format == DG_PT_FMT_ARM_LPAE_S2 && start == 0 &&
	    (1u << pgd_bits) <= LPAE_MAX_CONCAT) {
		pgd_bits += bpl;
		start++;
		r->concatenated = true;
	}
	pt->depth = 4 - start;
	for (unsigned int d = 0; d < pt->depth; d++) {
		struct pt_level *l = &pt->lvl[d];
		unsigned int bits = d ? bpl : pgd_bits;

		l->hw_level = start + d;
		l->shift = g + bpl * (3 - l->hw_level);
		l->size = 1ull << l->shift;
		l->index_mask = (1ull << bits) - 1;
		l->table_bytes = 8ull << bits;
		if (l->table_bytes < PT_MIN_TABLE_BYTES)
			l->table_bytes = PT_MIN_TABLE_BYTES;
	}
	pt->iova_base = 0;
	pt->va_limit = 1ull << geo->ias;
	pt->valid_mask = LPAE_VALID;
	pt->table_mask = 3;
	pt->table_val = LPAE_TYPE_TABLE;
	pt->table_bits = LPAE_TYPE_TABLE;
	pt->table_addr_mask = ((1ull << 48) - 1) & ~(geo->granule - 1);
	pt->oa_mask = pt->table_addr_mask;
	pt->oa_hi_mask = geo->oas > 48 ? LPAE_OA_HI : 0;
	if (lpae_is_s1(pt)) {
		/* Always readable; writable unless AP[2] (RDONLY, bit 7) is set. */
		pt->rw_xor = LPAE_AP_RDONLY;
		pt->rw_shift = 6;
		pt->rw_mask = DG_PROT_WRITE;
		pt->rw_or = DG_PROT_READ;
	} else {
		/* S2AP: HAP_READ bit 6, HAP_WRITE bit 7. */
		pt->rw_xor = 0;
		pt->rw_shift = 6;
		pt->rw_mask = DG_PROT_READ | DG_PROT_WRITE;
		pt->rw_or = 0;
	}

	r->start_level = start;
	r->root_index_bits = pgd_bits;
	r->bits_per_level = bpl;
	r->mair = lpae_is_s1(pt) ? lpae_mair() : 0;
	r->ps = (unsigned int)ps;
	r->tg = g == 12 ? 0 : g == 16 ? 1 : 2;
	r->sh = 3;
	r->orgn = 1;
	r->irgn = 1;
	r->tsz = 64 - geo->ias;
	/* VTCR.SL0: the 4K granule counts one level more (Linux arm_64_lpae_alloc_pgtable_s2). */
	r->sl = lpae_is_s1(pt) ? 0 : (~(start + (g == 12)) & 3u);
	return 0;
}

static uint64_t lpae_leaf_attrs(const struct dg_pt *pt, unsigned int prot, unsigned int depth)
{
	uint64_t pte = LPAE_AF;

	if (lpae_is_s1(pt)) {
		pte |= LPAE_NG;
		if ((prot & DG_PROT_READ) && !(prot & DG_PROT_WRITE))
			pte |= LPAE_AP_RDONLY;
		if (!(prot & DG_PROT_PRIV))
			pte |= LPAE_AP_UNPRIV;
		if (prot & DG_PROT_MMIO)
			pte |= LPAE_ATTRIDX(LPAE_IDX_DEV);
		else if (prot & DG_PROT_CACHE)
			pte |= LPAE_ATTRIDX(LPAE_IDX_CACHE);
	} else {
		if (prot & DG_PROT_READ)
			pte |= LPAE_HAP_READ;
		if (prot & DG_PROT_WRITE)
			pte |= LPAE_HAP_WRITE;
		if (prot & DG_PROT_MMIO)
			pte |= LPAE_MEMATTR(LPAE_MEMATTR_DEV);
		else if (prot & DG_PROT_CACHE)
			pte |= LPAE_MEMATTR(LPAE_MEMATTR_OIWB);
		else
			pte |= LPAE_MEMATTR(LPAE_MEMATTR_NC);
	}
	pte |= (prot & DG_PROT_CACHE) ? LPAE_SH_IS : LPAE_SH_OS;
	if (prot & DG_PROT_NOEXEC)
		pte |= LPAE_XN;
	pte |= pt->lvl[depth].hw_level == 3 ? LPAE_TYPE_PAGE : LPAE_TYPE_BLOCK;
	return pte;
}

static unsigned int lpae_leaf_prot(const struct dg_pt *pt, uint64_t pte)
{
	unsigned int prot = pt_leaf_rw(pt, pte);

	if (lpae_is_s1(pt)) {
		if (!(pte & LPAE_AP_UNPRIV))
			prot |= DG_PROT_PRIV;
		if ((pte & LPAE_ATTR_MASK) == LPAE_ATTRIDX(LPAE_IDX_DEV))
			prot |= DG_PROT_MMIO;
		if ((pte & LPAE_ATTR_MASK) == LPAE_ATTRIDX(LPAE_IDX_CACHE))
			prot |= DG_PROT_CACHE;
	} else {
		if ((pte & LPAE_MEMATTR_M) == LPAE_MEMATTR(LPAE_MEMATTR_DEV))
			prot |= DG_PROT_MMIO;
		if ((pte & LPAE_MEMATTR_M) == LPAE_MEMATTR(LPAE_MEMATTR_OIWB))
			prot |= DG_PROT_CACHE;
	}
	if ((pte & LPAE_SH_MASK) == LPAE_SH_IS)
		prot |= DG_PROT_CACHE;
	if ((pte & LPAE_XN) == LPAE_XN)
		prot |= DG_PROT_NOEXEC;
	return prot;
}

int dg_pt_lpae_regs(const struct dg_pt *pt, struct pt_lpae_regs *out)
{
	if (pt->ops != &pt_fmt_lpae_ops)
		return -EINVAL;
	*out = pt->lpae;
	out->ttbr = pt_root_addr(pt);
	return 0;
}

const struct pt_fmt_ops pt_fmt_lpae_ops = {
	.name = "arm-lpae",
	.init = lpae_init,
	.leaf_attrs = lpae_leaf_attrs,
	.leaf_prot = lpae_leaf_prot,
	.root_reg = pt_root_addr, /* TTBR0 / VTTBR with ASID / VMID 0 */
};
