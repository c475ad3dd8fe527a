/* SPDX-License-Identifier: MIT */
/*
 * pt/fmt_flat.c - a flat, one-level table over an IOVA window, in the style of PowerPC TCE
 * tables (PAPR "Translation Control Entry"; Linux arch/powerpc/kernel/iommu.c) and of the
 * per-ring flat tables of rIOMMU (ASPLOS'15).
 *
 * The window [window_base, window_base + window_size) is cut into pages of one size (the
 * granule: 4K, 64K or 2M); entry i translates IOVA window_base + i * granule. The table is a
 * single allocation of 2^k entries (the entry count rounded up to a power of two so the
 * allocator can align it; entries past the window stay zero). Entry layout, 64 bits:
 *
 *   bit 0      Read   (TCE_PCI_READ)
 *   bit 1      Write  (TCE_PCI_WRITE)
 *   [11:2]     0
 *   [51:12]    output address (granule aligned; the low bits below the page are 0)
 *   [63:52]    0
 *
 * Present means Read or Write set, as for TCEs. There are no tables below the root, so map
 * never allocates and unmap never frees: the gather only ever carries a range.
 * DG_PROT_CACHE, NOEXEC, MMIO and PRIV have no encoding and are ignored.
 */
#include "pt_internal.h"

#include <errno.h>

#define FLAT_R		 (1ull << 0)
#define FLAT_W		 (1ull << 1)
#define FLAT_ADDR	 0x000ffffffffff000ull /* bits [51:12] */
#define FLAT_MAX_ENTRIES (1ull << 24)

static int flat_init(struct dg_pt *pt)
{
	struct dg_pt_geometry *geo = &pt->geo;
	uint64_t entries, slots;
	unsigned int shift;

	if (!geo->oas)
		geo->oas = 52;
	if (!geo->granule)
		geo->granule = 1ull << 12;
	if (!geo->pgsize_bitmap)
		geo->pgsize_bitmap = geo->granule;
	if (geo->granule != (1ull << 12) && geo->granule != (1ull << 16) &&
	    geo->granule != (1ull << 21))
		return -EINVAL;
	if (geo->ias || geo->oas < 32 || geo->oas > 52 || geo->pgsize_bitmap != geo->granule)
		return -EINVAL;
	if (!geo->window_size || !dg_is_aligned(geo->window_size, geo->granule) ||
	    !dg_is_aligned(geo->window_base, geo->granule) ||
	    geo->window_size > UINT64_MAX - geo->window_base)
		return -EINVAL;
	shift = dg_ilog2(geo->granule);
	entries = geo->window_size >> shift;
	if (entries > FLAT_MAX_ENTRIES)
		return -EINVAL;
	slots = dg_roundup_pow2(entries);

	pt->depth = 1;
	pt->lvl[0].hw_level = 0;
	pt->lvl[0].shift = shift;
	pt->lvl[0].size = geo->granule;
	pt->lvl[0].index_mask = slots - 1;
	pt->lvl[0].table_bytes = slots * 8 < PT_MIN_TABLE_BYTES ? PT_MIN_TABLE_BYTES : slots * 8;
	pt->iova_base = geo->window_base;
	pt->va_limit = geo->window_size;
	pt->valid_mask = FLAT_R | FLAT_W;
	/* No depth below the root: is-a-table is never asked, make it never true anyway. */
	pt->table_mask = 0;
	pt->table_val = 1;
	pt->table_bits = 0;
	pt->table_addr_mask = 0;
	pt->oa_mask = FLAT_ADDR;
	pt->oa_hi_mask = 0;
	pt->rw_xor = 0; /* R = bit 0, W = bit 1 */
	pt->rw_shift = 0;
	pt->rw_mask = DG_PROT_READ | DG_PROT_WRITE;
	pt->rw_or = 0;
	return 0;
}

static uint64_t flat_leaf_attrs(const struct dg_pt *pt, unsigned int prot, unsigned int depth)
{
	(void)pt;
	(void)depth;
	return ((prot & DG_PROT_READ) ? FLAT_R : 0) | ((prot & DG_PROT_WRITE) ? FLAT_W : 0);
}

const struct pt_fmt_ops pt_fmt_flat_ops = {
	.name = "flat",
	.init = flat_init,
	.leaf_attrs = flat_leaf_attrs,
	.leaf_prot = pt_leaf_rw,  /* R and W only */
	.root_reg = pt_root_addr, /* the TCE table base */
};
