/* SPDX-License-Identifier: MIT */
/*
 * Fuzz harness of the device's side of the machine - the input surface a malicious device
 * controls: arbitrary DMA requests (address, length, direction, through the IOMMU or through
 * translations it holds) interleaved with a driver's maps, unmaps, traffic and the passing of
 * time, under every policy. The reference model is the attack oracle (bench/attack): it knows
 * what every tagged byte is and what the device was given, and what each policy documents
 * as exposed.
 *
 * Input: byte 0 picks the policy; then 4-byte operations {op, a, b, c}:
 *   op % 8 = 0  map: slot a % 8, length (64 B .. 3 pages) and offset from b, direction c % 3,
 *               direct region (window) from c bit 2
 *            1  unmap slot a % 8
 *          2,3  device read / write: the address is a slot's DMA or host address, a stale
 *               one, the domain's end, the top of the space or a constant, chosen by a,
 *               plus an offset from b (-2 KiB .. +2 KiB) and a length from c (1 .. 16 KiB)
 *            4  device translates a slot's buffer and holds it, then reads and writes
 *               through it and completes
 *            5  time passes (b ms): lazy timeouts fire, housekeeping runs
 *            6  traffic: another mapping, used and unmapped
 *            7  the driver waits for every confirmation
 * FUZZ_ATTACK_LOG=1 in the environment describes every breach and anomaly on stderr.
 * Aborts when: a refused access has no fault record or a record matches nothing, a
 * legitimate operation fails, or a breach falls outside the policy's documented exposure
 * (including a lazy breach beyond the window the library reports).
 */
#include "../../../bench/attack/world.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SLOTS 8

static const size_t lens[] = {64, 128, 512, 2048, 4096, 8192, 12288, 1024};

static void fuzz_fail(const struct atk_result *r, const char *why)
{
	fprintf(stderr,
		"fuzz_attack: %s under %s: undocumented %llu, faults missing %llu, unexpected "
		"%llu, legitimate failures %llu\n",
		why, atk_policy_name(r->policy), (unsigned long long)r->undocumented,
		(unsigned long long)r->faults_missing, (unsigned long long)r->faults_unexpected,
		(unsigned long long)r->legit_failures);
	abort();
}

static uint64_t target(struct atk_world *w, struct atk_map *const *slot, uint8_t a, uint8_t b)
{
	const struct atk_map *m = slot[(a >> 3) % SLOTS];
	int64_t off = (int64_t)b * 16 - 2048;
	struct dg_domain *dom = w->dd[0] ? dg_dma_dev_domain(w->dd[0]) : NULL;
	uint64_t end = 1ull << 48;

	if (dom) {
		struct dg_pt_geometry g;

		dg_pt_geometry(dg_domain_pt(dom), &g);
		end = g.format == DG_PT_FMT_FLAT ? g.window_base + g.window_size : 1ull << g.ias;
	}
	switch (a % 8) {
	case 0:
	case 1:
	case 2: /* a DMA address it was given (live or stale) */
		return m ? m->dma + (uint64_t)off : (uint64_t)off;
	case 3: /* a host address (what pass-through would use) */
		return m ? (uintptr_t)m->buf + (uint64_t)off : (uintptr_t)w->arena;
	case 4:
		return end + (uint64_t)off;
	case 5:
		return UINT64_MAX - (uint64_t)b;
	case 6:
		return (uint64_t)b << 12;
	default:
		return (uintptr_t)w->arena + (uint64_t)b * 64;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct atk_config cfg = {.virtual_clock = true, .iterations = 1};
	struct atk_map *slot[SLOTS] = {0};
	struct atk_result res;
	struct atk_world w;

	if (size < 1)
		return 0;
	cfg.log = getenv("FUZZ_ATTACK_LOG") ? stderr : NULL; /* every breach and anomaly */
	memset(&res, 0, sizeof(res));
	res.policy = (enum atk_policy)(data[0] % ATK_NR_POLICIES);
	res.attack = ATK_STALE;
	if (world_init(&w, res.policy, &cfg, &res, 1, 1)) {
		world_fini(&w);
		fuzz_fail(&res, "machine set-up failed");
	}
	for (size_t i = 1; i + 4 <= size && i < 1 + 4 * 256; i += 4) {
		uint8_t op = data[i], a = data[i + 1], b = data[i + 2], c = data[i + 3];
		struct atk_map **s = &slot[a % SLOTS];

		switch (op % 8) {
		case 0: {
			size_t len = lens[b % 8];
			size_t off = len >= W_PAGE ? 0 :
						     (size_t)(b >> 3) * 64 % (W_PAGE - len + 64);

			if (*s && (*s)->state == MAP_LIVE)
				drv_unmap(&w, *s);
			*s = drv_map(&w, 0, len, off, (enum dg_dma_dir)(c % 3), c & 4);
			break;
		}
		case 1:
			if (*s && (*s)->state == MAP_LIVE)
				drv_unmap(&w, *s);
			break;
		case 2:
		case 3: {
			size_t len = 1 + ((size_t)c << 6) % (4 * W_PAGE);

			dev_access(&w, 0, op % 8 == 3, target(&w, slot, a, b), len, NULL);
			break;
		}
		case 4:
			if (*s && (*s)->state == MAP_LIVE) {
				unsigned int acc = (*s)->dir == DG_DMA_TO_DEVICE ?
							   DG_ACCESS_READ :
						   (*s)->dir == DG_DMA_FROM_DEVICE ?
							   DG_ACCESS_WRITE :
							   DG_ACCESS_READ | DG_ACCESS_WRITE;
				struct dg_sg sg[4];
				unsigned int nr;
				int r = dg_dev_translate(w.dev[0], (*s)->dma, (*s)->len, acc, sg, 4,
							 &nr);

				if (r) {
					w_legit_failure(&w, "translate of a live buffer", r);
					break;
				}
				/* through the translation, with its permissions only */
				if (acc & DG_ACCESS_READ)
					dev_held(&w, 0, false, sg, nr, NULL);
				if (acc & DG_ACCESS_WRITE)
					dev_held(&w, 0, true, sg, nr, NULL);
			}
			break;
		case 5:
			world_sleep(&w, (uint64_t)b * 1000000ull);
			break;
		case 6:
			drv_traffic(&w, 0);
			break;
		case 7:
			drv_wait_confirmed(&w, 50000000ull);
			break;
		}
		if (res.undocumented || res.faults_missing || res.faults_unexpected ||
		    res.legit_failures)
			fuzz_fail(&res, "during the run");
	}
	for (unsigned int k = 0; k < SLOTS; k++)
		if (slot[k] && slot[k]->state == MAP_LIVE)
			drv_unmap(&w, slot[k]);
	world_finish(&w);
	world_fini(&w);
	if (res.verdict == ATK_VULNERABLE || res.verdict == ATK_BROKEN)
		fuzz_fail(&res, "at the end");
	return 0;
}
