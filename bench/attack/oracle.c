/* SPDX-License-Identifier: MIT */
/*
 * bench/attack/oracle.c - tagged memory (see oracle.h for the idea and the rules).
 *
 * Cells are numbered in registration order and never renumbered: an area that is removed
 * keeps its ids, so a tag read from a stale copy of freed memory decodes to no area and counts
 * as unknown rather than being attributed to whatever memory came next.
 */
#include "oracle.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define WORDS_PER_CELL (ORC_CELL / 8u)
#define MAX_CELL_ID    ((1u << 24) - 1)

static uint64_t tag(uint32_t cell, uint8_t gen, unsigned int word)
{
	return ORC_MAGIC << 48 | (uint64_t)cell << 24 | (uint64_t)gen << 16 | word;
}

static bool granted(const struct orc_cell *c, unsigned int dev, uint8_t gen)
{
	return c->granted[dev][gen >> 6] >> (gen & 63) & 1;
}

static void set_granted(struct orc_cell *c, unsigned int dev, uint8_t gen, bool on)
{
	uint64_t bit = 1ull << (gen & 63);

	if (on)
		c->granted[dev][gen >> 6] |= bit;
	else
		c->granted[dev][gen >> 6] &= ~bit;
}

/*
 * The cell's content changes: a new generation, given to the devices that may read it. The
 * kernel's write (@writer < 0) goes to every device with a live readable mapping of the cell;
 * a device's write only to that device. @device_data: a device's data that has not landed
 * (unchecked until the kernel writes the cell again).
 */
static void new_generation(struct orc_cell *c, int writer, bool device_data)
{
	c->gen++;
	for (unsigned int d = 0; d < ORC_MAX_DEVS; d++)
		set_granted(c, d, c->gen, writer < 0 ? c->rd[d] > 0 : d == (unsigned int)writer);
	c->device_data = device_data;
}

void orc_init(struct orc *o)
{
	memset(o, 0, sizeof(*o));
}

void orc_fini(struct orc *o)
{
	free(o->cell);
	memset(o, 0, sizeof(*o));
}

static void write_tags(uint8_t *p, uint32_t id, uint8_t gen)
{
	for (unsigned int w = 0; w < WORDS_PER_CELL; w++) {
		uint64_t t = tag(id, gen, w);

		memcpy(p + 8 * w, &t, 8);
	}
}

int orc_add_area(struct orc *o, void *base, size_t len)
{
	uint32_t n = (uint32_t)(len / ORC_CELL);
	struct orc_area *a = NULL;

	if (!base || !len || ((uintptr_t)base | len) % ORC_CELL || len / ORC_CELL > MAX_CELL_ID)
		return -EINVAL;
	for (unsigned int i = 0; i < ORC_MAX_AREAS && !a; i++)
		if (!o->area[i].used)
			a = &o->area[i];
	if (!a || o->ncells + (uint64_t)n > MAX_CELL_ID)
		return -ENOSPC;
	if (o->ncells + n > o->cap) {
		uint32_t cap = o->cap ? o->cap : 1024;
		struct orc_cell *c;

		while (cap < o->ncells + n)
			cap *= 2;
		c = realloc(o->cell, (size_t)cap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		o->cell = c;
		o->cap = cap;
	}
	memset(&o->cell[o->ncells], 0, (size_t)n * sizeof(*o->cell));
	*a = (struct orc_area){.base = base, .len = len, .first_cell = o->ncells, .used = true};
	for (uint32_t i = 0; i < n; i++)
		write_tags(a->base + (size_t)i * ORC_CELL, a->first_cell + i, 0);
	o->ncells += n;
	return 0;
}

void orc_remove_area(struct orc *o, const void *base)
{
	for (unsigned int i = 0; i < ORC_MAX_AREAS; i++)
		if (o->area[i].used && o->area[i].base == base)
			o->area[i].used = false;
}

static const struct orc_area *area_of_addr(const struct orc *o, uintptr_t addr)
{
	for (unsigned int i = 0; i < ORC_MAX_AREAS; i++) {
		const struct orc_area *a = &o->area[i];

		if (a->used && addr >= (uintptr_t)a->base && addr - (uintptr_t)a->base < a->len)
			return a;
	}
	return NULL;
}

static const struct orc_area *area_of_cell(const struct orc *o, uint32_t id)
{
	for (unsigned int i = 0; i < ORC_MAX_AREAS; i++) {
		const struct orc_area *a = &o->area[i];

		if (a->used && id >= a->first_cell && id - a->first_cell < a->len / ORC_CELL)
			return a;
	}
	return NULL;
}

bool orc_covers(const struct orc *o, uintptr_t addr, uint64_t len)
{
	const struct orc_area *a = area_of_addr(o, addr);

	return a && len && len <= a->len - (addr - (uintptr_t)a->base);
}

/* The cell holding @a (registered memory) and its id, or NULL. */
static uint8_t *cell_at(const struct orc *o, uintptr_t a, uint32_t *id)
{
	const struct orc_area *ar = area_of_addr(o, a);

	if (!ar)
		return NULL;
	*id = ar->first_cell + (uint32_t)((a - (uintptr_t)ar->base) / ORC_CELL);
	return ar->base + (a - (uintptr_t)ar->base) / ORC_CELL * ORC_CELL;
}

static uintptr_t first_cell(const void *addr)
{
	return (uintptr_t)addr & ~(uintptr_t)(ORC_CELL - 1);
}

/*
 * For each cell of registered memory that [addr, addr + len) touches (others are skipped):
 * @p, its first byte, and @id, its number.
 */
#define orc_for_each_cell(o, addr, len, id, p)                                                \
	for (uintptr_t a_ = first_cell(addr); a_ < (uintptr_t)(addr) + (len); a_ += ORC_CELL) \
		if (((p) = cell_at((o), a_, &(id))) == NULL) {                                \
		} else

void orc_kernel_write(struct orc *o, const void *addr, size_t len)
{
	uint32_t id;
	uint8_t *p;

	orc_for_each_cell(o, addr, len, id, p) {
		struct orc_cell *c = &o->cell[id];

		new_generation(c, -1, false);
		write_tags(p, id, c->gen);
	}
}

void orc_grant(struct orc *o, unsigned int dev, const void *addr, size_t len, bool rd, bool wr)
{
	uint32_t id;
	uint8_t *p;

	assert(dev < ORC_MAX_DEVS);
	orc_for_each_cell(o, addr, len, id, p) {
		struct orc_cell *c = &o->cell[id];

		if (rd) {
			set_granted(c, dev, c->gen, true);
			c->rd[dev]++;
		}
		if (wr)
			c->wr[dev]++;
	}
}

void orc_revoke(struct orc *o, unsigned int dev, const void *addr, size_t len, bool rd, bool wr)
{
	uint32_t id;
	uint8_t *p;

	assert(dev < ORC_MAX_DEVS);
	orc_for_each_cell(o, addr, len, id, p) {
		struct orc_cell *c = &o->cell[id];

		if (rd && c->rd[dev])
			c->rd[dev]--;
		if (wr && c->wr[dev])
			c->wr[dev]--;
	}
}

void orc_device_content(struct orc *o, const void *addr, size_t len, uint8_t *out)
{
	uint32_t id;
	uint8_t *p;

	orc_for_each_cell(o, addr, len, id, p) {
		write_tags(out + (p - (const uint8_t *)addr), id, (uint8_t)(o->cell[id].gen + 1));
	}
}

void orc_device_wrote(struct orc *o, unsigned int dev, const void *addr, size_t len, bool landed)
{
	uint32_t id;
	uint8_t *p;

	orc_for_each_cell(o, addr, len, id, p) {
		new_generation(&o->cell[id], (int)dev, !landed);
	}
}

bool orc_expected(const struct orc *o, const void *addr, size_t len)
{
	uint32_t id;
	uint8_t *p;
	uint8_t want[ORC_CELL];

	orc_for_each_cell(o, addr, len, id, p) {
		write_tags(want, id, o->cell[id].gen);
		if (memcmp(p, want, ORC_CELL))
			return false;
	}
	return true;
}

/* Decode one word: true and the cell, generation when it is a tag of registered memory. */
static bool decode(const struct orc *o, uint64_t t, uint32_t *id, uint8_t *gen, uintptr_t *host)
{
	const struct orc_area *a;

	if (t >> 48 != ORC_MAGIC || (t & 0xffff) >= WORDS_PER_CELL)
		return false;
	*id = (uint32_t)(t >> 24) & MAX_CELL_ID;
	*gen = (uint8_t)(t >> 16);
	a = area_of_cell(o, *id);
	if (!a || *id >= o->ncells)
		return false;
	*host = (uintptr_t)a->base + (size_t)(*id - a->first_cell) * ORC_CELL + (t & 0xffff) * 8;
	return true;
}

void orc_judge_read(const struct orc *o, unsigned int dev, const uint8_t *data, size_t len,
		    orc_breach_fn fn, void *arg, struct orc_verdict *v)
{
	unsigned int best = 0;
	size_t best_n = 0, words;

	memset(v, 0, sizeof(*v));
	/* A device may read at any byte offset: find the alignment the tags sit at. */
	for (unsigned int s = 0; s < 8 && s < len; s++) {
		size_t n = 0;

		for (size_t i = s; i + 8 <= len; i += 8) {
			uint64_t t;
			uint32_t id;
			uint8_t gen;
			uintptr_t host;

			memcpy(&t, data + i, 8);
			n += decode(o, t, &id, &gen, &host);
		}
		if (n > best_n) {
			best_n = n;
			best = s;
		}
		if (s == 0 && n == (len / 8))
			break;
	}
	words = len >= best ? (len - best) / 8 : 0;
	v->unknown = len - words * 8;
	uintptr_t run_host = 0;
	size_t run = 0;
	for (size_t k = 0; k < words; k++) {
		uint64_t t;
		uint32_t id;
		uint8_t gen;
		uintptr_t host;

		memcpy(&t, data + best + 8 * k, 8);
		if (!decode(o, t, &id, &gen, &host)) {
			v->unknown += 8;
			continue;
		}
		if (granted(&o->cell[id], dev, gen)) {
			v->granted += 8;
			continue;
		}
		v->breach += 8;
		if (run && host == run_host + run && (host & (ORC_CELL - 1))) {
			run += 8;
			continue;
		}
		if (run && fn)
			fn(arg, run_host, run);
		run_host = host;
		run = 8;
	}
	if (run && fn)
		fn(arg, run_host, run);
}

void orc_judge_writes(struct orc *o, unsigned int dev, orc_breach_fn fn, void *arg,
		      struct orc_verdict *v)
{
	uint8_t want[ORC_CELL];

	memset(v, 0, sizeof(*v));
	for (unsigned int i = 0; i < ORC_MAX_AREAS; i++) {
		const struct orc_area *a = &o->area[i];

		if (!a->used)
			continue;
		for (size_t off = 0; off < a->len; off += ORC_CELL) {
			uint32_t id = a->first_cell + (uint32_t)(off / ORC_CELL);
			struct orc_cell *c = &o->cell[id];
			uint8_t *p = a->base + off;
			size_t changed = 0;

			if (c->device_data)
				continue;
			write_tags(want, id, c->gen);
			if (!memcmp(p, want, ORC_CELL))
				continue;
			for (unsigned int w = 0; w < WORDS_PER_CELL; w++)
				changed += memcmp(p + 8 * w, want + 8 * w, 8) ? 8 : 0;
			if (c->wr[dev]) {
				v->granted += changed; /* the device's own buffer */
				c->device_data = true;
				continue;
			}
			v->breach += changed;
			if (fn)
				fn(arg, (uintptr_t)p, changed);
			memcpy(p, want, ORC_CELL); /* the kernel repairs, the next write is judged
						      alone */
		}
	}
}
