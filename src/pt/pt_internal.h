/* SPDX-License-Identifier: MIT */
/*
 * pt/pt_internal.h - what the generic walker (pt.c) and the formats (fmt_*.c) share.
 *
 * A format describes itself in two parts:
 *  - data, written once by its init() into struct dg_pt: the level geometry (struct pt_level)
 *    and a handful of masks that say how to tell a present entry, a table descriptor and a
 *    leaf apart and where the addresses live. The generic code applies them inline, so the
 *    per-entry path of map/unmap/walk never makes an indirect call;
 *  - code, in const struct pt_fmt_ops: geometry validation, the attribute bits of a leaf for a
 *    DG_PROT_* set, the reverse decoding, the root register. leaf_attrs() runs only at create,
 *    where it fills pt->leaf_tmpl[prot][depth]; map then ORs a template into each entry.
 *
 * Depth vs level: depth counts tables from the root (root = depth 0, last = depth - 1); each
 * format has its own level numbering (LPAE: Linux's 0..3 with the leaf level 3; VT-d: 1 = 4K
 * leaf up to 5 = PML5; flat: 0), kept in pt_level.hw_level for walk results and dumps.
 *
 * Input addresses: the generic code works on va = iova - iova_base (iova_base is the flat
 * window base, 0 for radix formats), so every format indexes tables by (va >> shift) & mask.
 */
#ifndef DG_PT_INTERNAL_H
#define DG_PT_INTERNAL_H

#include <dmaguard/pt.h>

#include "base/compiler.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Every DG_PROT_* combination indexes the leaf template table. */
#define PT_PROT_COMBOS (DG_PROT_ALL + 1)

/* Tables are at least this big (the smallest LPAE root is 4 entries; TTBR needs 64 bytes). */
#define PT_MIN_TABLE_BYTES 64u

/* One depth of the tree. Read-only after create. */
struct pt_level {
	uint64_t size;	      /* IOVA bytes one entry covers (1 << shift) */
	uint64_t index_mask;  /* entries in a table at this depth - 1 */
	uint64_t table_bytes; /* bytes allocated for a table at this depth */
	uint32_t shift;	      /* log2(size) */
	uint32_t hw_level;    /* the format's number for this level */
	bool leaf_ok;	      /* pgsize_bitmap allows a leaf of @size here */
};

/*
 * Format operations. All are called with no lock held; none is on the per-entry path.
 *  init:       validate pt->geo (the caller's geometry, defaults not yet filled), fill in the
 *              defaults and every field of @pt marked "format" (not leaf_ok: dg_pt_create
 *              derives it from the page sizes). Returns 0 or -EINVAL. Called once.
 *  leaf_attrs: every bit of a leaf at @depth except the output address, for a valid @prot
 *              (READ or WRITE set). Called at create for each (prot, leaf depth).
 *  leaf_prot:  DG_PROT_* granted by a present leaf (walk path: device threads, must not block).
 *  root_reg:   the root register value (VT-d SLPTPTR, LPAE TTBR0/VTTBR, flat TCE base).
 */
struct pt_fmt_ops {
	const char *name;
	int (*init)(struct dg_pt *pt);
	uint64_t (*leaf_attrs)(const struct dg_pt *pt, unsigned int prot, unsigned int depth);
	unsigned int (*leaf_prot)(const struct dg_pt *pt, uint64_t pte);
	uint64_t (*root_reg)(const struct dg_pt *pt);
};

/* The values Linux's io-pgtable-arm computes for an LPAE table (formats S1 and S2). */
struct pt_lpae_regs {
	unsigned int start_level;     /* level of the root table, 0..3 */
	unsigned int root_index_bits; /* IOVA bits that index the root (concatenation included) */
	unsigned int bits_per_level;  /* index bits of every other table: granule shift - 3 */
	bool concatenated;	      /* stage 2 root made of several concatenated tables */
	uint64_t mair;		      /* stage 1 MAIR_EL1 value as Linux computes it */
	uint64_t ttbr;		      /* TTBR0 (stage 1) or VTTBR (stage 2): the root address */
	/* TCR (stage 1) or VTCR (stage 2) fields, as values (not packed): */
	unsigned int ps;   /* TCR.IPS / VTCR.PS: 0..6 = 32,36,40,42,44,48,52 bits */
	unsigned int tg;   /* TG0: 0 = 4K, 1 = 64K, 2 = 16K */
	unsigned int sh;   /* SH0: 3 = inner shareable */
	unsigned int orgn; /* ORGN0: 1 = write-back write-allocate */
	unsigned int irgn; /* IRGN0: 1 = write-back write-allocate */
	unsigned int tsz;  /* T0SZ: 64 - ias */
	unsigned int sl;   /* VTCR.SL0 (stage 2 only) */
};

struct dg_pt {
	/* Read-only after create (format: set by ops->init). */
	const struct pt_fmt_ops *ops;
	struct dg_pt_geometry geo;	/* the effective geometry */
	uint32_t depth;			/* format: levels of tables, 1..DG_PT_MAX_DEPTH */
	uint64_t iova_base;		/* format: IOVA of va 0 (flat window base) */
	uint64_t va_limit;		/* format: va must be below this (2^ias, window size) */
	uint64_t oa_limit;		/* 2^oas: output addresses must be below */
	uint64_t granule_mask;		/* granule - 1 */
	uint64_t valid_mask;		/* format: entry present iff pte & valid_mask */
	uint64_t table_mask, table_val; /* format: above the last depth, a present entry is
					    a table iff (pte & table_mask) == table_val */
	uint64_t table_bits;		/* format: ORed onto a table address to link it */
	uint64_t table_addr_mask;	/* format: table address bits of a table descriptor */
	uint64_t oa_mask;		/* format: output address bits of a leaf (low part) */
	uint64_t oa_hi_mask;		/* format: LPAE 52-bit PA[51:48] at bits [15:12], or 0 */
	uint64_t rw_xor;		/* format: a leaf grants DG_PROT_READ | DG_PROT_WRITE */
	uint32_t rw_shift, rw_mask;	/*   ((pte ^ rw_xor) >> rw_shift & rw_mask) | rw_or */
	uint32_t rw_or;			/*   (pt_leaf_rw(): the one decoder of those bits) */
	uint64_t table_bytes;		/* bytes of every non-root table */
	struct pt_level lvl[DG_PT_MAX_DEPTH]; /* format: per depth, root first */
	_Atomic uint64_t *root;		      /* the root table, never unlinked */
	const struct dg_pt_mem_ops *mem;      /* table allocator */
	void *mem_cookie;
	struct pt_lpae_regs lpae; /* format (LPAE only): register values */
	uint64_t leaf_tmpl[PT_PROT_COMBOS][DG_PT_MAX_DEPTH]; /* leaf bits but the address */
	uint8_t leaf_depth_of[64];  /* log2 alignment -> shallowest depth whose leaf fits */
	uint8_t cover_depth_of[64]; /* log2 alignment -> shallowest depth it covers whole */
	uint64_t id;		    /* unique, never reused: keys the per-thread hints */
	bool granule_fast;	    /* a granule is a last-level leaf under a table (depth > 1):
				       pt_map_granule/pt_unmap_granule may use the hint */
	uint32_t hint_shift;	    /* lvl[depth - 2].shift: va >> it tags a last-level table */
	uint32_t leaf_shift;	    /* lvl[depth - 1].shift */
	uint64_t leaf_index_mask;   /* lvl[depth - 1].index_mask */
	/* Tables unlinked so far (relaxed; read-mostly: written only when a table is unlinked).
	 * A per-thread last-leaf-table hint is valid while this has not moved (pt.c). */
	_Atomic uint64_t unlink_gen;

	/* Written concurrently by map/unmap (relaxed: statistics, no ordering), own line. */
	_Atomic uint64_t nr_tables dg_cacheline; /* tables allocated (linked + on gathers) */
	_Atomic uint64_t nr_pending;		 /* tables on gathers, not yet released */
	/* Test hook (dg_pt_set_sweep_hook), NULL but in tests; set while no map/unmap runs.
	 * Here, not above: the fields above keep the cache lines they had without it. */
	void (*sweep_hook)(void *arg, uint64_t iova, unsigned int depth);
	void *sweep_hook_arg;
};

extern const struct pt_fmt_ops pt_fmt_vtd_ops;
extern const struct pt_fmt_ops pt_fmt_lpae_ops;
extern const struct pt_fmt_ops pt_fmt_flat_ops;

/* Output address of a leaf (format-independent through the masks). */
static inline uint64_t pt_oa_decode(const struct dg_pt *pt, uint64_t pte)
{
	return (pte & pt->oa_mask) | ((pte & pt->oa_hi_mask) << 36);
}

/* Output address bits of a leaf for @pa (aligned to the leaf size, below oa_limit). */
static inline uint64_t pt_oa_encode(const struct dg_pt *pt, uint64_t pa)
{
	return (pa & pt->oa_mask) | ((pa >> 36) & pt->oa_hi_mask);
}

/*
 * DG_PROT_READ | DG_PROT_WRITE granted by a present leaf: the formats describe their two
 * permission bits as data (init), this decodes them for every format, and each format's
 * leaf_prot() uses it for those bits, so the walk and the IOMMU's cheap miss (pt_leaf.h)
 * decode permissions with the same code.
 */
static inline unsigned int pt_leaf_rw(const struct dg_pt *pt, uint64_t pte)
{
	return ((unsigned int)((pte ^ pt->rw_xor) >> pt->rw_shift) & pt->rw_mask) | pt->rw_or;
}

/*
 * The root table's address: the root register of every format (VT-d SLPTPTR, LPAE TTBR0 /
 * VTTBR with ASID / VMID 0, the flat TCE base).
 */
static inline uint64_t pt_root_addr(const struct dg_pt *pt)
{
	return (uint64_t)(uintptr_t)pt->root;
}

/*
 * The LPAE register values of @pt (start level, concatenation, MAIR, TCR/VTCR fields).
 * Returns 0, or -EINVAL when @pt is not an LPAE table. Private: tests and the IOMMU engine.
 */
int dg_pt_lpae_regs(const struct dg_pt *pt, struct pt_lpae_regs *out);

/*
 * The calling thread's last-leaf-table hint for @pt, checked against the tree: 0 when it has
 * none, when it is stale (it will not be used), or when the table it names is the one the
 * tree links at its place now; -EUCLEAN (with a line on @why, if not NULL) when a valid hint
 * names any other table - a freed or unlinked one. Private: tests call it after each step.
 * The caller must not run map/unmap concurrently on the hinted range.
 */
int dg_pt_hint_check(const struct dg_pt *pt, FILE *why);

/*
 * Test hook: every unmap calls @fn(@arg, iova, depth), from the unmapping thread with nothing
 * held, just before it sweeps a table above the last level (depth @depth) from @iova on: after
 * its descent read the entry there, before the sweep reads it again. A test runs another
 * thread's map in that window (tests/stress/pt/pt_unmap_race.c). @fn NULL removes it. Set
 * only while no map or unmap runs on @pt. Private: tests only.
 */
void dg_pt_set_sweep_hook(struct dg_pt *pt,
			  void (*fn)(void *arg, uint64_t iova, unsigned int depth), void *arg);

#endif /* DG_PT_INTERNAL_H */
