/* SPDX-License-Identifier: MIT */
/*
 * pt/fmt_vtd.c - Intel VT-d second-stage page tables (VT-d spec rev 4.x, section 9.8 "Second-
 * Stage Paging Entries"; Linux drivers/iommu/intel/ is the reference user).
 *
 * Tables are 4 KiB of 512 64-bit entries. 3, 4 or 5 levels translate 39, 48 or 57 input bits;
 * level 5 (PML5) .. level 1 (the 4K page table), root first:
 *
 *   entry bit   0      1      7          11    [51:12]          others
 *   leaf        Read   Write  PS (2M/1G) SNP   page address     0
 *   table       1      1      0          0     next table       0
 *
 * An entry is present when Read or Write is set (R = W = 0 means "not present"); write-only
 * leaves are legal. PS (super page) appears only at levels 2 (2 MiB) and 3 (1 GiB); a level-1
 * entry is always a 4 KiB leaf. SNP (snoop) is set for DG_PROT_CACHE. Non-leaf entries carry
 * R|W as Linux writes them (the hardware ANDs permissions along the walk), so above level 1 an
 * entry is a table descriptor iff R = W = 1 and PS = 0; dg_pt_check() rejects anything else. DG_PROT_NOEXEC,
 * DG_PROT_MMIO and DG_PROT_PRIV have no second-stage encoding and are ignored.
 */
#include "pt_internal.h"

#include <errno.h>

#define VTD_R	   (1ull << 0)
#define VTD_W	   (1ull << 1)
#define VTD_PS	   (1ull << 7)
#define VTD_SNP	   (1ull << 11)
#define VTD_ADDR   0x000ffffffffff000ull /* bits [51:12] */
#define VTD_SIZES  ((1ull << 12) | (1ull << 21) | (1ull << 30))
#define VTD_SHIFT  12
#define VTD_STRIDE 9

static int vtd_init(struct dg_pt *pt)
{
	struct dg_pt_geometry *geo = &pt->geo;
	unsigned int levels;

	if (!geo->ias)
		geo->ias = 48;
	if (!geo->oas)
		geo->oas = 48;
	if (!geo->granule)
		geo->granule = 1ull << VTD_SHIFT;
	if (!geo->pgsize_bitmap)
		geo->pgsize_bitmap = VTD_SIZES;
	switch (geo->ias) {
	case 39:
		levels = 3;
		break;
	case 48:
		levels = 4;
		break;
	case 57:
		levels = 5;
		break;
	default:
		return -EINVAL;
	}
	if (geo->oas < 32 || geo->oas > 52 || geo->granule != (1ull << VTD_SHIFT) ||
	    (geo->pgsize_bitmap & ~VTD_SIZES) || !(geo->pgsize_bitmap & geo->granule) ||
	    geo->window_base || geo->window_size)
		return -EINVAL;

	pt->depth = levels;
	for (unsigned int d = 0; d < levels; d++) {
		struct pt_level *l = &pt->lvl[d];

		l->hw_level = levels - d;
		l->shift = VTD_SHIFT + VTD_STRIDE * (l->hw_level - 1);
		l->size = 1ull << l->shift;
		l->index_mask = (1ull << VTD_STRIDE) - 1;
		l->table_bytes = 1ull << VTD_SHIFT;
	}
	pt->iova_base = 0;
	pt->va_limit = 1ull << geo->ias;
	pt->valid_mask = VTD_R | VTD_W;
	/* A table descriptor is exactly R|W with PS clear (dmaguard writes no other kind). */
	pt->table_mask = VTD_PS | VTD_R | VTD_W;
	pt->table_val = VTD_R | VTD_W;
	pt->table_bits = VTD_R | VTD_W;
	pt->table_addr_mask = VTD_ADDR;
	pt->oa_mask = VTD_ADDR;
	pt->oa_hi_mask = 0;
	pt->rw_xor = 0; /* R = bit 0, W = bit 1 */
	pt->rw_shift = 0;
	pt->rw_mask = DG_PROT_READ | DG_PROT_WRITE;
	pt->rw_or = 0;
	return 0;
}

static uint64_t vtd_leaf_attrs(const struct dg_pt *pt, unsigned int prot, unsigned int depth)
{
	uint64_t pte = 0;

	if (prot & DG_PROT_READ)
		pte |= VTD_R;
	if (prot & DG_PROT_WRITE)
		pte |= VTD_W;
	if (prot & DG_PROT_CACHE)
		pte |= VTD_SNP;
	if (pt->lvl[depth].hw_level > 1)
		pte |= VTD_PS;
	return pte;
}

static unsigned int vtd_leaf_prot(const struct dg_pt *pt, uint64_t pte)
{
	unsigned int prot = pt_leaf_rw(pt, pte);

	if (pte & VTD_SNP)
		prot |= DG_PROT_CACHE;
	return prot;
}

const struct pt_fmt_ops pt_fmt_vtd_ops = {
	.name = "vtd-ss",
	.init = vtd_init,
	.leaf_attrs = vtd_leaf_attrs,
	.leaf_prot = vtd_leaf_prot,
	.root_reg = pt_root_addr, /* SLPTPTR: the context entry's second-stage pointer */
};
