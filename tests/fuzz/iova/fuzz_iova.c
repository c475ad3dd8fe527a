/* SPDX-License-Identifier: MIT */
/*
 * Fuzz harness of the IOVA allocator, checked against the reference model
 * (tests/unit/iova/iova_model.h).
 *
 * Input: byte 0 picks the variant (augmented with magazines, without, Linux reference) and
 * whether the thread caches run the no-membarrier fallback (bit 4); then 4-byte operations {op, a, b, c}: alloc (size a, limit
 * chosen by b, alignment and prefer32 by c), free of a live range (index a; a wrong size when
 * c says so), free of an arbitrary address, reserve, find, flush, trim. Every allocation must
 * be aligned, below its limit and free in the model; without magazines the augmented tree must
 * return exactly the model's highest fit, and the augmented allocator must never report
 * -ENOSPC while the model has room. Errors must leave the live count unchanged, and
 * dg_iova_check() must pass after every operation. Any violation aborts.
 */
#include <dmaguard/iova.h>

#include "../../unit/iova/iova_model.h"
#include "iova/iova_priv.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define G    (16ull << 20) /* granule: 256 granules below 4 GiB */
#define NG   512ull
#define LOW  256ull
#define MAXL 256

#define REQUIRE(c)                                                                          \
	do {                                                                                \
		if (!(c)) {                                                                 \
			fprintf(stderr, "fuzz_iova: %s failed at line %d\n", #c, __LINE__); \
			abort();                                                            \
		}                                                                           \
	} while (0)

struct live {
	uint64_t iova, size;
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned int flags_of[3] = {0, DG_IOVA_CFG_NO_MAGAZINES, 0};
	struct live lv[MAXL];
	size_t nlive = 0;
	struct model m;

	if (size < 1)
		return 0;
	unsigned int variant = data[0] % 3;
	struct dg_iova_config cfg = {
		.start = 0,
		.end = NG * G - 1,
		.granule = G,
		.algo = variant == 2 ? DG_IOVA_ALGO_LINUX_REFERENCE : DG_IOVA_ALGO_AUGMENTED,
		.flags = flags_of[variant],
	};
	struct dg_iova_space *s = dg_iova_create(&cfg);
	bool augmented = variant != 2, exact = variant == 1;

	REQUIRE(s);
	if (data[0] & 16)
		iova_mag_force_fallback(s);
	model_init(&m, 0, NG - 1);
	model_add(&m, 0, 1, 0);
	for (size_t off = 1; off + 4 <= size; off += 4) {
		uint8_t op = data[off] % 8, a = data[off + 1], b = data[off + 2], c = data[off + 3];
		struct dg_iova_stats before, after;

		dg_iova_get_stats(s, &before);
		if (op <= 2 && nlive < MAXL) {
			uint64_t npfn = 1 + a % 40, len, align, iova, want = 0, lim, limit;
			unsigned int flags = c & 1 ? DG_IOVA_ALLOC_PAGE_ALIGN : 0;
			bool p32 = c & 2;
			uint64_t sz = npfn * G - (c & 4 ? (uint64_t)b * 1000 : 0);
			int err;

			limit = b < 128 ? UINT64_MAX :
				b < 160 ? LOW * G - 1 :
					  (uint64_t)b * 2 * G + G - 1;
			lim = limit >= NG * G ? NG - 1 : limit / G;
			len = flags ? npfn : model_pow2(npfn);
			align = flags ? 1 : len;
			err = p32 ? dg_iova_alloc_prefer32(s, sz, limit, flags, &iova) :
				    dg_iova_alloc(s, sz, limit, flags, &iova);
			bool fit = len <= NG && model_highest_fit(&m, len, align, lim, &want);
			if (p32 && lim >= LOW) {
				uint64_t w;

				if (len <= NG && model_highest_fit(&m, len, align, LOW - 1, &w)) {
					want = w;
					fit = true;
				}
			}
			if (err) {
				REQUIRE(err == -ENOSPC || (err == -EINVAL && len > NG - 1));
				if (augmented)
					REQUIRE(!fit);
			} else {
				uint64_t pfn = iova / G;

				REQUIRE(iova % G == 0 && pfn % align == 0);
				REQUIRE(pfn + len - 1 <= lim);
				REQUIRE(model_is_free(&m, pfn, len));
				if (exact)
					REQUIRE(pfn == want);
				model_add(&m, pfn, len, npfn);
				lv[nlive++] = (struct live){iova, sz};
			}
		} else if (op <= 4 && nlive) {
			size_t i = a % nlive;

			if (c & 1) {
				struct model_range *r = model_get(&m, lv[i].iova / G);

				REQUIRE(dg_iova_free(s, lv[i].iova, (r->npfn + 1 + b % 3) * G) ==
					-EINVAL);
				dg_iova_get_stats(s, &after);
				REQUIRE(after.live_ranges == before.live_ranges);
			} else {
				REQUIRE(dg_iova_free(s, lv[i].iova, lv[i].size) == 0);
				model_del(&m, lv[i].iova / G);
				lv[i] = lv[--nlive];
			}
		} else if (op == 5) {
			uint64_t pfn = (uint64_t)a * 2 + (b & 1);
			struct model_range *r = model_get(&m, pfn);
			int err = dg_iova_free(s, pfn * G + (c & 1), G);

			if (c & 1)
				REQUIRE(err == -EINVAL);
			else if (!r || !r->npfn)
				REQUIRE(err == -ENOENT);
			else
				REQUIRE(err == 0 || err == -EINVAL);
			if (!err) {
				for (size_t i = 0; i < nlive; i++) {
					if (lv[i].iova == pfn * G) {
						lv[i] = lv[--nlive];
						break;
					}
				}
				model_del(&m, pfn);
			} else {
				dg_iova_get_stats(s, &after);
				REQUIRE(after.live_ranges == before.live_ranges);
			}
		} else if (op == 6) {
			uint64_t pfn = (uint64_t)a * 2 + (b & 1), n = 1 + c % 3, start, sz;
			size_t k = model_lower(&m, pfn + 1);
			const struct model_range *r = k ? &m.r[k - 1] : NULL;
			int err;

			if (b & 2) {
				err = dg_iova_find(s, pfn * G + c, &start, &sz);
				if (r && r->lo + r->len > pfn) {
					REQUIRE(err == (r->npfn ? 0 : -EPERM));
					if (r->npfn)
						REQUIRE(start == r->lo * G && sz == r->npfn * G);
				} else {
					REQUIRE(err == -ENOENT);
				}
			} else {
				bool was_free = model_is_free(&m, pfn, n);

				err = dg_iova_reserve(s, pfn * G, n * G);
				if (was_free)
					REQUIRE(err == 0);
				REQUIRE(err == 0 || err == -EBUSY);
				if (!err) {
					for (uint64_t p = pfn; p < pfn + n && p < NG; p++) {
						size_t j = model_lower(&m, p + 1);
						const struct model_range *q = &m.r[j - 1];

						if (q->lo + q->len > p) {
							REQUIRE(q->npfn == 0);
							p = q->lo + q->len - 1;
						} else {
							model_add(&m, p, 1, 0);
						}
					}
				}
			}
		} else if (op == 7) {
			if (c & 1)
				dg_iova_flush_caches(s);
			else
				dg_iova_trim(s);
		}
		REQUIRE(dg_iova_check(s, stderr) == 0);
	}
	struct dg_iova_stats st;
	dg_iova_get_stats(s, &st);
	REQUIRE(st.live_ranges == nlive);
	model_fini(&m);
	dg_iova_destroy(s);
	return 0;
}
