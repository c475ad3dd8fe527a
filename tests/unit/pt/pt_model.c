/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/pt/pt_model.c - reference model of an IO page table (see pt_model.h).
 */
#include "pt_model.h"

#include "pt/pt_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void pt_model_init(struct pt_model *m, const struct dg_pt *pt)
{
	memset(m, 0, sizeof(*m));
	dg_pt_geometry(pt, &m->geo);
	if (m->geo.format == DG_PT_FMT_FLAT) {
		m->in_base = m->geo.window_base;
		m->in_limit = m->geo.window_base + m->geo.window_size;
	} else {
		m->in_base = 0;
		m->in_limit = 1ull << m->geo.ias;
	}
}

void pt_model_fini(struct pt_model *m)
{
	free(m->leaf);
	memset(m, 0, sizeof(*m));
}

unsigned int pt_model_prot(const struct dg_pt_geometry *geo, unsigned int prot)
{
	const unsigned int rw = DG_PROT_READ | DG_PROT_WRITE;

	switch (geo->format) {
	case DG_PT_FMT_VTD_SS:
		return prot & (rw | DG_PROT_CACHE);
	case DG_PT_FMT_FLAT:
		return prot & rw;
	case DG_PT_FMT_ARM_LPAE_S1:
		/* No write-only at stage 1: WRITE reads back as READ | WRITE. */
		return DG_PROT_READ | (prot & ~DG_PROT_READ);
	case DG_PT_FMT_ARM_LPAE_S2:
		return prot & ~DG_PROT_PRIV;
	}
	return 0;
}

size_t pt_model_find(const struct pt_model *m, uint64_t iova)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->leaf[mid].iova + m->leaf[mid].size <= iova)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static bool model_overlaps(const struct pt_model *m, uint64_t iova, uint64_t end)
{
	size_t i = pt_model_find(m, iova);

	return i < m->n && m->leaf[i].iova < end;
}

static void model_reserve(struct pt_model *m, size_t more)
{
	while (m->n + more > m->cap) {
		m->cap = m->cap ? 2 * m->cap : 256;
		m->leaf = realloc(m->leaf, m->cap * sizeof(*m->leaf));
		if (!m->leaf)
			abort();
	}
}
static int model_check_args(const struct pt_model *m, uint64_t iova, uint64_t phys, uint64_t size,
			    uint64_t align, unsigned int prot)
{
	const unsigned int rw = DG_PROT_READ | DG_PROT_WRITE;

	if (!(prot & rw) || (prot & ~DG_PROT_ALL) || !size || iova % align || phys % align ||
	    size % align)
		return -EINVAL;
	if (iova < m->in_base || iova >= m->in_limit || size > m->in_limit - iova)
		return -ERANGE;
	if (phys >> m->geo.oas || size > (1ull << m->geo.oas) - phys)
		return -ERANGE;
	return 0;
}

/* The largest size in @sizes that divides both addresses and fits before @end. */
static uint64_t model_leaf_size(const struct pt_model *m, uint64_t iova, uint64_t phys,
				uint64_t end, uint64_t sizes)
{
	for (int b = 63; b >= 0; b--) {
		uint64_t c = 1ull << b;

		if ((sizes & c) && !((iova - m->in_base) % c) && !(phys % c) && end - iova >= c)
			return c;
	}
	abort(); /* callers guarantee the granule divides everything */
}

/* Map with leaves of the sizes in @sizes only, largest first. */
static int model_map_sizes(struct pt_model *m, uint64_t iova, uint64_t phys, uint64_t size,
			   unsigned int prot, uint64_t sizes)
{
	uint64_t end = iova + size;
	size_t at, count = 0;

	if (model_overlaps(m, iova, end))
		return -EEXIST;
	for (uint64_t v = iova, p = phys; v < end; count++) {
		uint64_t s = model_leaf_size(m, v, p, end, sizes);

		v += s;
		p += s;
	}
	/* The new leaves are contiguous: open one gap at the insertion point. */
	at = pt_model_find(m, iova);
	model_reserve(m, count);
	memmove(&m->leaf[at + count], &m->leaf[at], (m->n - at) * sizeof(*m->leaf));
	m->n += count;
	while (iova < end) {
		uint64_t s = model_leaf_size(m, iova, phys, end, sizes);

		m->leaf[at++] = (struct pt_model_leaf){iova, s, phys, pt_model_prot(&m->geo, prot)};
		iova += s;
		phys += s;
	}
	return 0;
}

int pt_model_map(struct pt_model *m, uint64_t iova, uint64_t phys, uint64_t size, unsigned int prot)
{
	int err = model_check_args(m, iova, phys, size, m->geo.granule, prot);

	return err ? err : model_map_sizes(m, iova, phys, size, prot, m->geo.pgsize_bitmap);
}

int pt_model_map_pages(struct pt_model *m, uint64_t iova, uint64_t phys, uint64_t pgsize,
		       uint64_t pgcount, unsigned int prot)
{
	int err;

	if (!pgsize || (pgsize & (pgsize - 1)) || !(pgsize & m->geo.pgsize_bitmap) || !pgcount)
		return -EINVAL;
	if (pgcount > UINT64_MAX / pgsize)
		return -ERANGE;
	err = model_check_args(m, iova, phys, pgsize * pgcount, pgsize, prot);
	return err ? err : model_map_sizes(m, iova, phys, pgsize * pgcount, prot, pgsize);
}

int pt_model_unmap(struct pt_model *m, uint64_t iova, uint64_t size, uint64_t *bytes)
{
	uint64_t end = iova + size, sum = 0;
	size_t first, last;

	*bytes = 0;
	if (!size || iova % m->geo.granule || size % m->geo.granule)
		return -EINVAL;
	if (iova < m->in_base || iova >= m->in_limit || size > m->in_limit - iova)
		return -ERANGE;
	first = pt_model_find(m, iova);
	for (last = first; last < m->n && m->leaf[last].iova < end; last++)
		sum += m->leaf[last].size;
	if (last > first) {
		memmove(&m->leaf[first], &m->leaf[last], (m->n - last) * sizeof(*m->leaf));
		m->n -= last - first;
	}
	*bytes = sum;
	return sum ? 0 : -ENOENT;
}

struct collect {
	struct pt_model_leaf *leaf;
	size_t n, cap;
};

static void collect_table(const struct dg_pt *pt, _Atomic uint64_t *table, unsigned int d,
			  uint64_t va, struct collect *c)
{
	const struct pt_level *l = &pt->lvl[d];

	for (uint64_t i = 0; i <= l->index_mask; i++, va += l->size) {
		uint64_t pte = atomic_load_explicit(&table[i], memory_order_relaxed);

		if (!(pte & pt->valid_mask))
			continue;
		if (d + 1 < pt->depth && (pte & pt->table_mask) == pt->table_val) {
			collect_table(pt,
				      (_Atomic uint64_t *)(uintptr_t)(pte & pt->table_addr_mask),
				      d + 1, va, c);
			continue;
		}
		if (c->n == c->cap) {
			c->cap = c->cap ? 2 * c->cap : 256;
			c->leaf = realloc(c->leaf, c->cap * sizeof(*c->leaf));
			if (!c->leaf)
				abort();
		}
		c->leaf[c->n++] = (struct pt_model_leaf){
			.iova = va + pt->iova_base,
			.size = l->size,
			.phys = pt_oa_decode(pt, pte) & ~(l->size - 1),
			.prot = pt->ops->leaf_prot(pt, pte),
		};
	}
}

size_t pt_model_collect(const struct dg_pt *pt, struct pt_model_leaf **out)
{
	struct collect c = {0};

	collect_table(pt, pt->root, 0, 0, &c);
	*out = c.leaf;
	return c.n;
}

int pt_model_compare(const struct pt_model *m, const struct dg_pt *pt, FILE *why)
{
	struct pt_model_leaf *got;
	size_t n = pt_model_collect(pt, &got);
	int rc = 0;

	for (size_t i = 0; i < n || i < m->n; i++) {
		const struct pt_model_leaf *a = i < n ? &got[i] : NULL;
		const struct pt_model_leaf *b = i < m->n ? &m->leaf[i] : NULL;

		if (a && b && a->iova == b->iova && a->size == b->size && a->phys == b->phys &&
		    a->prot == b->prot)
			continue;
		if (why) {
			fprintf(why, "pt model: leaf %zu differs (table has %zu, model %zu)\n", i,
				n, m->n);
			if (a)
				fprintf(why,
					"  table: iova 0x%" PRIx64 " size 0x%" PRIx64
					" phys 0x%" PRIx64 " prot 0x%x\n",
					a->iova, a->size, a->phys, a->prot);
			if (b)
				fprintf(why,
					"  model: iova 0x%" PRIx64 " size 0x%" PRIx64
					" phys 0x%" PRIx64 " prot 0x%x\n",
					b->iova, b->size, b->phys, b->prot);
		}
		rc = -1;
		break;
	}
	free(got);
	return rc;
}
