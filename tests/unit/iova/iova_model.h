/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/iova/iova_model.h - the reference model the IOVA tests compare against.
 *
 * A sorted array of taken ranges (in granules), searched linearly: obviously right and
 * obviously slow. Used by the randomized unit test and by the fuzz harness. Cached ranges of
 * the allocator are free to the model: it only knows what callers hold.
 */
#ifndef DG_TEST_IOVA_MODEL_H
#define DG_TEST_IOVA_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct model_range {
	uint64_t lo, len; /* granules */
	uint64_t npfn;	  /* granules asked for (0: reserved) */
};

struct model {
	struct model_range *r;
	size_t n, cap;
	uint64_t start, end; /* usable granules [start, end] */
};

/* Smallest power of two >= x (x >= 1). */
static inline uint64_t model_pow2(uint64_t x)
{
	uint64_t p = 1;

	while (p < x)
		p <<= 1;
	return p;
}

static inline void model_init(struct model *m, uint64_t start, uint64_t end)
{
	memset(m, 0, sizeof(*m));
	m->start = start;
	m->end = end;
}

static inline void model_fini(struct model *m)
{
	free(m->r);
	m->r = NULL;
	m->n = m->cap = 0;
}

/* Index of the first range with lo >= pfn. */
static inline size_t model_lower(const struct model *m, uint64_t pfn)
{
	size_t a = 0, b = m->n;

	while (a < b) {
		size_t mid = (a + b) / 2;

		if (m->r[mid].lo < pfn)
			a = mid + 1;
		else
			b = mid;
	}
	return a;
}

static inline bool model_is_free(const struct model *m, uint64_t lo, uint64_t len)
{
	size_t i = model_lower(m, lo);

	if (lo < m->start || len == 0 || lo + len - 1 > m->end || lo + len < lo)
		return false;
	if (i < m->n && m->r[i].lo < lo + len)
		return false;
	if (i > 0 && m->r[i - 1].lo + m->r[i - 1].len > lo)
		return false;
	return true;
}

static inline void model_add(struct model *m, uint64_t lo, uint64_t len, uint64_t npfn)
{
	size_t i = model_lower(m, lo);

	if (m->n == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 64;
		m->r = realloc(m->r, m->cap * sizeof(*m->r));
		if (!m->r)
			abort();
	}
	memmove(&m->r[i + 1], &m->r[i], (m->n - i) * sizeof(*m->r));
	m->r[i] = (struct model_range){lo, len, npfn};
	m->n++;
}

/* The range starting at @lo, or NULL. */
static inline struct model_range *model_get(struct model *m, uint64_t lo)
{
	size_t i = model_lower(m, lo);

	return i < m->n && m->r[i].lo == lo ? &m->r[i] : NULL;
}

static inline void model_del(struct model *m, uint64_t lo)
{
	size_t i = model_lower(m, lo);

	memmove(&m->r[i], &m->r[i + 1], (m->n - i - 1) * sizeof(*m->r));
	m->n--;
}

/*
 * Highest x aligned to @align (granules, power of two) with [x, x + len) free and
 * x + len - 1 <= lim. Returns false when there is none.
 */
static inline bool model_highest_fit(const struct model *m, uint64_t len, uint64_t align,
				     uint64_t lim, uint64_t *out)
{
	uint64_t top = lim < m->end ? lim : m->end; /* last usable granule of this gap */
	size_t i = model_lower(m, top + 1);	    /* ranges below index i start <= top */

	for (;;) {
		uint64_t g0 = m->start;

		if (i > 0) {
			const struct model_range *p = &m->r[i - 1];

			if (p->lo + p->len - 1 >= top) { /* top is taken: skip below p */
				if (p->lo == 0 || p->lo - 1 < m->start)
					return false;
				top = p->lo - 1;
				i--;
				continue;
			}
			g0 = p->lo + p->len;
		}
		if (top + 1 >= len + g0) {
			uint64_t x = (top + 1 - len) & ~(align - 1);

			if (x >= g0) {
				*out = x;
				return true;
			}
		}
		if (i == 0)
			return false;
		if (m->r[i - 1].lo == 0 || m->r[i - 1].lo - 1 < m->start)
			return false;
		top = m->r[i - 1].lo - 1;
		i--;
	}
}

#endif /* DG_TEST_IOVA_MODEL_H */
