/* SPDX-License-Identifier: MIT */
/*
 * dma/dma_stats.c - counters, error accounting, the statistics snapshot, dump and check.
 *
 * Counting every map and unmap with an atomic add on a shared line would cost more than the
 * identity policy's whole map (and would be measured as part of every policy). Instead each
 * thread owns one counter block per device: the hot path finds it as the thread's last used
 * block (one TLS compare of the device's generation; generations are never reused,
 * dma_internal.h), else through an 8-entry thread-local cache keyed the same way, and bumps
 * it with a relaxed load and store; map and unmap look it up once per call. Blocks are pushed
 * on the device's list with a release CAS and summed by dg_dma_dev_stats(): exact whenever no
 * call on the device runs, which is when tests and the idle check (dma_dev_live()) read them.
 *
 * Thread ids are never reused (a global counter), so a block always has a single writer even
 * across thread exit and creation; a program that churns threads leaves one small block per
 * (thread, device) until the device is destroyed.
 *
 * Open batches are counted the same way (dma_tstats.open_batches: begun minus ended on the
 * thread, since a batch may end on another thread; dma_open_batches() sums them for the
 * busy check), so a strict poll's batch begin and end take no locked instruction.
 *
 * Errors are rare: they are counted with atomic adds on the device, by kind.
 */
#include "dma/dma_internal.h"
#include "pt/pt_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

_Thread_local struct dma_tls_slot dma_tls[DMA_TLS_SLOTS] __attribute__((tls_model("initial-exec")));
_Thread_local struct dma_tls_slot dma_tls_last __attribute__((tls_model("initial-exec")));

static _Atomic uint64_t next_thread_id = 1;
_Thread_local uint64_t dma_tls_tid __attribute__((tls_model("initial-exec")));

static uint64_t dma_thread_id(void)
{
	if (!dma_tls_tid)
		dma_tls_tid = atomic_fetch_add_explicit(&next_thread_id, 1, memory_order_relaxed);
	return dma_tls_tid;
}

struct dma_tstats *dma_tstats_slow(struct dg_dma_dev *dd)
{
	uint64_t me = dma_thread_id();
	struct dma_tls_slot *s = &dma_tls[dd->gen & (DMA_TLS_SLOTS - 1)];
	/* Acquire pairs with the release CAS below: a block's owner field is visible. */
	struct dma_tstats *t = atomic_load_explicit(&dd->tstats, memory_order_acquire);
	struct dma_tstats *head;

	if (s->gen == dd->gen) { /* in the cache, not the last one used */
		t = s->t;
		goto last;
	}
	for (; t; t = t->next)
		if (t->owner == me)
			goto found;
	t = calloc(1, sizeof(*t));
	if (!t) {
		/* Out of memory for 200 bytes: count into a shared block (races lose counts). */
		static struct dma_tstats overflow;

		return &overflow;
	}
	t->owner = me;
	head = atomic_load_explicit(&dd->tstats, memory_order_relaxed);
	do {
		t->next = head;
		/* Release pairs with the acquire loads of dd->tstats (lookup, stats). */
	} while (!atomic_compare_exchange_weak_explicit(&dd->tstats, &head, t, memory_order_release,
							memory_order_relaxed));
found:
	s->gen = dd->gen;
	s->t = t;
last:
	dma_tls_last = *s;
	return t;
}

void dma_tstats_free(struct dg_dma_dev *dd)
{
	/* Acquire pairs with the release CAS in dma_tstats_slow(). */
	struct dma_tstats *t = atomic_load_explicit(&dd->tstats, memory_order_acquire);

	while (t) {
		struct dma_tstats *n = t->next;

		free(t);
		t = n;
	}
	atomic_store_explicit(&dd->tstats, NULL, memory_order_relaxed);
}

static void tstats_sum(const struct dg_dma_dev *dd, uint64_t *c, uint64_t *subpage_max)
{
	/* Acquire pairs with the release CAS in dma_tstats_slow(). */
	const struct dma_tstats *t =
		atomic_load_explicit(&((struct dg_dma_dev *)dd)->tstats, memory_order_acquire);

	memset(c, 0, sizeof(uint64_t) * CTR_NR);
	*subpage_max = 0;
	for (; t; t = t->next) {
		uint64_t m = atomic_load_explicit(&t->subpage_max, memory_order_relaxed);

		for (unsigned int i = 0; i < CTR_NR; i++)
			c[i] += atomic_load_explicit(&t->c[i], memory_order_relaxed);
		if (m > *subpage_max)
			*subpage_max = m;
	}
}

/*
 * Exact when every batch's begin and end happen before the call (a caller that ends a batch
 * on one thread and removes the device on another synchronizes the two: the removal then
 * reads every block's value at least as new as its writer's last begin or end before it).
 * Each block holds begun minus ended on its thread mod 2^64, so a batch begun on A and ended
 * on B is +1 on A and -1 on B: the sum wraps back to 0.
 */
uint64_t dma_open_batches(const struct dg_dma_dev *dd)
{
	/* Acquire pairs with the release CAS in dma_tstats_slow(). */
	const struct dma_tstats *t =
		atomic_load_explicit(&((struct dg_dma_dev *)dd)->tstats, memory_order_acquire);
	uint64_t n = atomic_load_explicit(&dd->open_batches, memory_order_relaxed);

	for (; t; t = t->next)
		n += atomic_load_explicit(&t->open_batches, memory_order_relaxed);
	return n;
}

uint64_t dma_dev_live(const struct dg_dma_dev *dd)
{
	uint64_t c[CTR_NR], m, in, out;

	tstats_sum(dd, c, &m);
	in = c[CTR_MAPS] + c[CTR_LINKS] + c[CTR_COH_ALLOCS];
	out = c[CTR_UNMAPS] + c[CTR_UNLINKS] + c[CTR_COH_FREES];
	/* Identity keeps no records: a bogus unmap there can make out exceed in. */
	return in > out ? in - out : 0;
}

int dma_err(struct dg_dma_dev *dd, int err)
{
	enum dma_err_kind k;

	switch (err) {
	case -EINVAL:
		k = ERR_INVALID;
		break;
	case -ERANGE:
		k = ERR_RANGE;
		break;
	case -ENOENT:
		k = ERR_NOT_MAPPED;
		break;
	case -ENOSPC:
		k = ERR_IOVA_SPACE;
		break;
	case DMA_ENOSHADOW:
		k = ERR_SHADOW_SPACE;
		err = -ENOSPC;
		break;
	case -ENOMEM:
		k = ERR_NOMEM;
		break;
	case -ETIMEDOUT:
		k = ERR_TIMEOUT;
		break;
	default:
		k = ERR_OTHER;
		break;
	}
	atomic_fetch_add_explicit(&dd->err[k], 1, memory_order_relaxed);
	return err;
}

_Thread_local unsigned int dma_tls_cpu __attribute__((tls_model("initial-exec")));
_Thread_local unsigned int dma_tls_cpu_left __attribute__((tls_model("initial-exec")));

unsigned int dma_cpu_refresh(unsigned int n)
{
	int c = sched_getcpu();

	dma_tls_cpu = c < 0 ? 0 : (unsigned int)c;
	dma_tls_cpu_left = 255;
	return dg_likely(dma_tls_cpu < n) ? dma_tls_cpu : dma_tls_cpu % n;
}

int dg_dma_dev_stats(const struct dg_dma_dev *dd, struct dg_dma_stats *st)
{
	uint64_t c[CTR_NR], m;

	if (!dd || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	tstats_sum(dd, c, &m);
	st->policy = dd->policy;
	st->maps = c[CTR_MAPS];
	st->unmaps = c[CTR_UNMAPS];
	st->map_bytes = c[CTR_MAP_BYTES];
	st->sg_maps = c[CTR_SG_MAPS];
	st->links = c[CTR_LINKS];
	st->unlinks = c[CTR_UNLINKS];
	st->coherent_allocs = c[CTR_COH_ALLOCS];
	st->coherent_frees = c[CTR_COH_FREES];
	st->live = dma_dev_live(dd);
	st->batches = c[CTR_BATCHES];
	st->inval_submits = c[CTR_SUBMITS];
	st->inval_waits = c[CTR_WAITS];
	st->err_invalid = atomic_load_explicit(&dd->err[ERR_INVALID], memory_order_relaxed);
	st->err_range = atomic_load_explicit(&dd->err[ERR_RANGE], memory_order_relaxed);
	st->err_not_mapped = atomic_load_explicit(&dd->err[ERR_NOT_MAPPED], memory_order_relaxed);
	st->err_iova_space = atomic_load_explicit(&dd->err[ERR_IOVA_SPACE], memory_order_relaxed);
	st->err_shadow_space =
		atomic_load_explicit(&dd->err[ERR_SHADOW_SPACE], memory_order_relaxed);
	st->err_nomem = atomic_load_explicit(&dd->err[ERR_NOMEM], memory_order_relaxed);
	st->err_timeout = atomic_load_explicit(&dd->err[ERR_TIMEOUT], memory_order_relaxed);
	st->err_other = atomic_load_explicit(&dd->err[ERR_OTHER], memory_order_relaxed);
	st->quarantined = atomic_load_explicit(&dd->nr_quarantined, memory_order_relaxed);
	st->exposes_all_memory = dd->policy == DG_DMA_IDENTITY;
	st->subpage_bytes = c[CTR_SUBPAGE];
	st->subpage_max = m;
	st->persistent_bytes = atomic_load_explicit(&dd->persistent, memory_order_relaxed);
	if (dd->lazy)
		dma_lazy_stats(dd->lazy, st);
	st->bounce_copy_in = c[CTR_BOUNCE_IN];
	st->bounce_copy_out = c[CTR_BOUNCE_OUT];
	st->bounce_zeroed = c[CTR_BOUNCE_ZERO];
	if (dd->bounce)
		dma_bounce_stats(dd->bounce, st);
	st->window_direct_maps = c[CTR_WIN_DIRECT];
	st->window_dynamic_maps = c[CTR_WIN_DYNAMIC];
	st->pool_hits = c[CTR_POOL_HITS];
	st->pool_fallbacks = c[CTR_POOL_FALLBACKS];
	return 0;
}

void dg_dma_dev_dump(const struct dg_dma_dev *dd, FILE *out)
{
	struct dg_dma_stats st;

	if (!dd || !out)
		return;
	dg_dma_dev_stats(dd, &st);
	fprintf(out,
		"dma device rid %#x policy %s mask %#" PRIx64 " max_seg %" PRIu64
		" boundary %#" PRIx64 " flags %#x\n",
		dd->rid, dg_dma_policy_name(dd->policy), dd->mask, dd->max_seg, dd->boundary,
		dd->cfg.flags);
	if (dd->sp)
		fprintf(out,
			"  domain %u granule %#" PRIx64 " iova [%#" PRIx64 ", %#" PRIx64
			"] limit %#" PRIx64 "\n",
			dd->sp->dom_id, dd->sp->granule, dd->sp->first, dd->sp->last,
			dd->sp->limit);
	fprintf(out,
		"  maps %" PRIu64 " unmaps %" PRIu64 " live %" PRIu64 " links %" PRIu64 "/%" PRIu64
		" coherent %" PRIu64 "/%" PRIu64 " batches %" PRIu64 " submits %" PRIu64
		" waits %" PRIu64 "\n",
		st.maps, st.unmaps, st.live, st.links, st.unlinks, st.coherent_allocs,
		st.coherent_frees, st.batches, st.inval_submits, st.inval_waits);
	fprintf(out,
		"  errors: invalid %" PRIu64 " range %" PRIu64 " not-mapped %" PRIu64
		" iova-space %" PRIu64 " shadow-space %" PRIu64 " nomem %" PRIu64
		" timeout %" PRIu64 " other %" PRIu64 " quarantined %" PRIu64 "\n",
		st.err_invalid, st.err_range, st.err_not_mapped, st.err_iova_space,
		st.err_shadow_space, st.err_nomem, st.err_timeout, st.err_other, st.quarantined);
	fprintf(out,
		"  exposure: all-memory %d subpage %" PRIu64 " (max %" PRIu64
		") persistent %" PRIu64 "\n",
		st.exposes_all_memory, st.subpage_bytes, st.subpage_max, st.persistent_bytes);
	if (dd->policy == DG_DMA_LAZY)
		fprintf(out,
			"  lazy: flushes %" PRIu64 " (timeout %" PRIu64 ") full-waits %" PRIu64
			" pending %" PRIu64 " window max %" PRIu64 " ns / %" PRIu64 " unmaps\n",
			st.lazy_flushes, st.lazy_timeout_flushes, st.lazy_full_waits,
			st.lazy_pending, st.lazy_window_max_ns, st.lazy_window_max_unmaps);
	if (dd->policy == DG_DMA_BOUNCE)
		fprintf(out,
			"  bounce: in %" PRIu64 " out %" PRIu64 " zeroed %" PRIu64
			" in-use %" PRIu64 "\n",
			st.bounce_copy_in, st.bounce_copy_out, st.bounce_zeroed, st.bounce_in_use);
	if (dd->policy == DG_DMA_WINDOW)
		fprintf(out, "  window: direct maps %" PRIu64 " dynamic maps %" PRIu64 "\n",
			st.window_direct_maps, st.window_dynamic_maps);
	if (dd->policy == DG_DMA_POOL)
		fprintf(out, "  pool: hits %" PRIu64 " fallbacks %" PRIu64 "\n", st.pool_hits,
			st.pool_fallbacks);
}

/* ---- check ---------------------------------------------------------------------------------- */

struct check_ctx {
	const struct dg_dma_dev *dd;
	FILE *why;
	uint64_t records;
};

static int check_fail(FILE *why, const char *fmt, uint64_t a, uint64_t b)
{
	if (why) {
		fprintf(why, "dg_dma_dev_check: ");
		fprintf(why, fmt, a, b);
		fputc('\n', why);
	}
	return -EUCLEAN;
}

/* Every granule of a live record's range is mapped with the record's permissions, its IOVA
 * range is live in the allocator with the same size. */
static int check_rec(void *arg, uint64_t iova, uint64_t w0, uint64_t w1, uint64_t w2)
{
	struct check_ctx *cx = arg;
	struct dma_space *sp = cx->dd->sp;
	enum dg_dma_dir dir = (enum dg_dma_dir)((w0 >> REC_DIR_SHIFT) & 3);
	unsigned int want = dma_dir_prot(dir), kind = (unsigned int)(w0 >> REC_KIND_SHIFT) & 7;
	uint64_t start, size, off = w0 & 0xffffffffu;

	cx->records++;
	if (!kind || kind > KIND_COHERENT || !dma_dir_ok(dir))
		return check_fail(cx->why,
				  "record at %#" PRIx64 " has a bad kind/dir word %#" PRIx64, iova,
				  w0);
	if (off >= sp->granule || !w1 || !w2 || (w2 & sp->gmask) || off + w1 > w2)
		return check_fail(cx->why,
				  "record at %#" PRIx64 " has bad sizes (len %#" PRIx64 ")", iova,
				  w1);
	/* a stream granule (token DMA_TOKEN_STREAM) lies in its chunk's allocation */
	const struct dma_rec *rec = dma_rec_get(&sp->rec, iova, false);
	const bool streamed =
		rec && dma_token_stream(atomic_load_explicit(&rec->w3, memory_order_relaxed));
	const uint64_t cbytes = (uint64_t)sp->cspan << sp->gshift;

	if (dg_iova_find(sp->iova, iova, &start, &size) ||
	    (streamed ? !sp->cspan || w2 != sp->granule || size != cbytes ||
				(iova & ~(cbytes - 1)) != start :
			start != iova || size != w2))
		return check_fail(cx->why,
				  "record at %#" PRIx64 " not live in the allocator (%#" PRIx64
				  " bytes)",
				  iova, w2);
	for (uint64_t a = iova; a < iova + w2; a += sp->granule) {
		struct dg_pt_walk w;

		if (dg_pt_walk(sp->pt, a, &w))
			return check_fail(cx->why,
					  "IOVA %#" PRIx64 " of the record at %#" PRIx64
					  " is not mapped",
					  a, iova);
		if ((w.prot & (DG_PROT_READ | DG_PROT_WRITE)) != want &&
		    !(sp->write_only_ok == false && dir == DG_DMA_FROM_DEVICE))
			return check_fail(cx->why,
					  "IOVA %#" PRIx64 " mapped with prot %#" PRIx64
					  " not the record's direction",
					  a, (uint64_t)w.prot);
	}
	return 0;
}

int dg_dma_dev_check(const struct dg_dma_dev *dd, FILE *why)
{
	struct check_ctx cx = {.dd = dd, .why = why};
	uint64_t c[CTR_NR], m, coh, maps, live_slots = 0;
	int r;

	if (!dd)
		return -EINVAL;
	if (!dd->sp)
		return 0;
	/* The calling thread's last-leaf-table hint names a linked table, or is stale. */
	if (dg_iova_check(dd->sp->iova, why) || dg_pt_check(dd->sp->pt, why) ||
	    dg_pt_hint_check(dd->sp->pt, why))
		return -EUCLEAN;
	if (dma_stream_check(dd->sp, why))
		return -EUCLEAN;
	r = dma_rec_for_each(&dd->sp->rec, check_rec, &cx);
	if (r)
		return r;
	if (dd->bounce && dma_bounce_check(dd->bounce, why, &live_slots))
		return -EUCLEAN;
	/* The counters agree with the records where every mapping has one. */
	tstats_sum(dd, c, &m);
	coh = c[CTR_COH_ALLOCS] - c[CTR_COH_FREES];
	maps = c[CTR_MAPS] - c[CTR_UNMAPS];
	if ((dd->policy == DG_DMA_STRICT || dd->policy == DG_DMA_LAZY) && cx.records != maps + coh)
		return check_fail(why, "%" PRIu64 " records but %" PRIu64 " live mappings",
				  cx.records, maps + coh);
	if (dd->policy == DG_DMA_BOUNCE && (cx.records != coh || live_slots != maps))
		return check_fail(why,
				  "%" PRIu64 " live shadow slots but %" PRIu64 " live mappings",
				  live_slots, maps);
	return 0;
}
