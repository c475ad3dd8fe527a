/* SPDX-License-Identifier: MIT */
/*
 * bench/attack/attacks.c - the attacks (attack.h lists them; docs/attack.md explains each).
 *
 * Every attack is a loop of rounds on one fresh machine (world.h). A round varies the buffer
 * (64 B, 2 KiB, 4 KiB, 3 pages; its offset in the page), the direction and, under window, the
 * region (direct or on demand), so one run covers each policy's paths. The device is always
 * the attacker; the driver is correct (it unmaps before reusing memory and keeps memory aside
 * when an unmap says -ETIMEDOUT): an attack shows what the policy lets a device do to a
 * correct driver.
 */
#include "world.h"

#include <errno.h>
#include <string.h>

static const size_t sizes[] = {64, 2048, 4096, 3 * 4096};

static const char *const policy_names[ATK_NR_POLICIES] = {
	"identity", "strict", "lazy", "window", "bounce", "pool", "linux-ref",
};

static const char *const attack_names[ATK_NR_ATTACKS] = {
	"stale",	"stale-window", "subpage",  "perm",
	"out-of-range", "other-domain", "detached", "withheld",
};

static const char *const doc_names[ATK_NR_DOCS] = {
	"all_memory", "direct_region", "pool_memory", "subpage", "lazy_window", "unconfirmed",
};

static const char *const verdict_names[] = {"protected", "documented", "VULNERABLE", "BROKEN"};

const char *atk_policy_name(enum atk_policy p)
{
	return (unsigned int)p < ATK_NR_POLICIES ? policy_names[p] : NULL;
}

const char *atk_attack_name(enum atk_attack a)
{
	return (unsigned int)a < ATK_NR_ATTACKS ? attack_names[a] : NULL;
}

const char *atk_doc_name(enum atk_doc d)
{
	return (unsigned int)d < ATK_NR_DOCS ? doc_names[d] : NULL;
}

const char *atk_verdict_name(enum atk_verdict v)
{
	return (unsigned int)v <= ATK_BROKEN ? verdict_names[v] : NULL;
}

int atk_policy_parse(const char *name, enum atk_policy *p)
{
	for (unsigned int i = 0; name && i < ATK_NR_POLICIES; i++)
		if (!strcmp(name, policy_names[i])) {
			*p = (enum atk_policy)i;
			return 0;
		}
	return -EINVAL;
}

int atk_attack_parse(const char *name, enum atk_attack *a)
{
	for (unsigned int i = 0; name && i < ATK_NR_ATTACKS; i++)
		if (!strcmp(name, attack_names[i])) {
			*a = (enum atk_attack)i;
			return 0;
		}
	return -EINVAL;
}

static const enum dg_dma_dir dirs[] = {DG_DMA_BIDIRECTIONAL, DG_DMA_TO_DEVICE, DG_DMA_FROM_DEVICE};

/* Reads and writes through a DMA address: the two halves of most attacks. */
static void read_write(struct atk_world *w, unsigned int dev, uint64_t iova, size_t len,
		       const struct atk_map *stale)
{
	dev_access(w, dev, false, iova, len, stale);
	dev_access(w, dev, true, iova, len, stale);
}

/* stale: DMA through the IOVA right after the unmap returned and the kernel reused the memory. */
static void attack_stale(struct atk_world *w, unsigned int rounds)
{
	for (unsigned int i = 0; i < rounds; i++) {
		size_t len = sizes[i % 4];
		size_t off = len < W_PAGE ? (i / 4) % (W_PAGE / len) * len : 0;
		struct atk_map *m = drv_map(w, 0, len, off, DG_DMA_BIDIRECTIONAL, i & 1);

		if (!m)
			continue;
		drv_unmap(w, m);
		read_write(w, 0, m->dma, len, m);
	}
}

/*
 * stale-window: the stale IOVA again and again until the IOMMU refuses it. Even rounds the
 * driver idles (the window closes by the lazy timeout), odd rounds it keeps mapping and
 * unmapping another buffer before each try (the window closes once the unmaps after it fill
 * half the CPU's flush queue, which starts a flush, and that flush completes). Every policy
 * but lazy is left after 16 tries (where the window never closes: identity, pool, a window's
 * direct region); lazy gets up to 20 timeouts.
 */
static void attack_stale_window(struct atk_world *w, unsigned int rounds)
{
	uint64_t lazy_to = w->cfg->lazy_timeout_ns ? w->cfg->lazy_timeout_ns : 10000000ull;

	for (unsigned int i = 0; i < rounds; i++) {
		bool busy = i & 1;
		struct atk_map *m = drv_map(w, 0, 2048, 0, DG_DMA_BIDIRECTIONAL, (i >> 1) & 1);
		uint64_t t0;
		bool breached = false;

		if (!m)
			continue;
		drv_unmap(w, m);
		t0 = world_now(w);
		for (unsigned int k = 0;; k++) {
			uint64_t before = w->res->breaches;
			int r;

			if (busy)
				drv_traffic(w, 0);
			r = dev_access(w, 0, k % 4 == 3, m->dma, 2048, m);
			breached = w->res->breaches > before;
			if (r < 0)
				break; /* refused: the window closed */
			if (world_iova_reissued(w, m)) {
				breached = false; /* the window closed: the IOVA is another's now */
				break;
			}
			if (w->pol != ATK_POL_LAZY ? k >= 15 : world_now(w) - t0 > 20 * lazy_to)
				break;
			if (!busy)
				world_sleep(w, lazy_to / 20);
		}
		if (breached)
			w->res->window_open = true; /* still breaching when the attack gave up */
		drv_settle(w);
	}
}

/*
 * subpage: 64 B and 2 KiB buffers with kernel data in the rest of their page (Thunderclap).
 * The device reads and writes the whole page around its DMA address, and the cells just
 * before and after the buffer.
 */
static void attack_subpage(struct atk_world *w, unsigned int rounds)
{
	for (unsigned int i = 0; i < rounds; i++) {
		size_t len = i & 1 ? 2048 : 64;
		size_t off = len == 64 ? 64 * (1 + (i * 7) % 62) : ((i >> 1) & 1) * 2048;
		enum dg_dma_dir dir = dirs[(i / 2) % 3];
		struct atk_map *m = drv_map(w, 0, len, off, dir, (i / 6) & 1);
		uint64_t pg;

		if (!m)
			continue;
		pg = m->dma & ~(uint64_t)(W_PAGE - 1);
		read_write(w, 0, pg, W_PAGE, NULL);
		if (m->dma - pg >= 64)
			read_write(w, 0, m->dma - 64, 64, NULL);
		if ((m->dma + len) % W_PAGE)
			read_write(w, 0, m->dma + len, 64, NULL);
		drv_unmap(w, m);
	}
}

/*
 * perm: writes to device-read-only buffers, reads of device-write-only ones. The device's
 * legitimate write (drv_map) has filled the write-only buffer with its own data, which it may
 * read back wherever it lands; so the kernel writes the buffer again before the reads: data a
 * write-only mapping grants the device no access to, which a policy that maps it readable
 * would hand over (without this write such a policy passed as protected).
 */
static void attack_perm(struct atk_world *w, unsigned int rounds)
{
	for (unsigned int i = 0; i < rounds; i++) {
		size_t len = i & 1 ? 4096 : 2048;
		struct atk_map *to = drv_map(w, 0, len, 0, DG_DMA_TO_DEVICE, (i >> 1) & 1);
		struct atk_map *from = drv_map(w, 0, len, 0, DG_DMA_FROM_DEVICE, (i >> 1) & 1);

		if (to) {
			dev_access(w, 0, true, to->dma, len, NULL);
			dev_access(w, 0, true, to->dma + len - 64, 64, NULL);
			drv_unmap(w, to);
		}
		if (from) {
			drv_kernel_write(w, from);
			dev_access(w, 0, false, from->dma, len, NULL);
			dev_access(w, 0, false, from->dma + 64, 64, NULL);
			drv_unmap(w, from);
		}
	}
}

/*
 * out-of-range: just before and just after the mapped pages, straddling the end of the
 * mapping, beyond the domain's input range (and straddling its end), the top of the address
 * space, and wrapping past 2^64 (from the top, and from the buffer with a length that wraps).
 */
static void attack_out_of_range(struct atk_world *w, unsigned int rounds)
{
	struct dg_domain *dom = w->dd[0] ? dg_dma_dev_domain(w->dd[0]) : NULL;
	uint64_t dom_end = 1ull << 52; /* pass-through: no domain; the accesses are skipped */

	if (dom) {
		struct dg_pt_geometry g;

		dg_pt_geometry(dg_domain_pt(dom), &g);
		dom_end = g.format == DG_PT_FMT_FLAT ? g.window_base + g.window_size :
						       1ull << g.ias;
	}
	for (unsigned int i = 0; i < rounds; i++) {
		size_t len = i & 1 ? 2048 : 4096, off = i & 1 ? 2048 : 0;
		struct atk_map *m = drv_map(w, 0, len, off, DG_DMA_BIDIRECTIONAL, (i >> 1) & 1);
		uint64_t lo, hi;

		if (!m)
			continue;
		lo = m->dma & ~(uint64_t)(W_PAGE - 1);
		hi = (m->dma + len + W_PAGE - 1) & ~(uint64_t)(W_PAGE - 1);
		read_write(w, 0, lo - 64, 64, NULL);
		read_write(w, 0, hi, 64, NULL);
		read_write(w, 0, hi - 32, 64, NULL);
		read_write(w, 0, dom_end, 64, NULL);
		read_write(w, 0, dom_end - 32, 64, NULL);
		read_write(w, 0, 1ull << 63, 64, NULL);
		read_write(w, 0, UINT64_MAX - 31, 64, NULL);
		dev_access(w, 0, false, m->dma, (size_t)(0 - m->dma) + W_PAGE, NULL);
		drv_unmap(w, m);
	}
}

/* other-domain: device 1 uses device 0's DMA addresses, and its host addresses. */
static void attack_other_domain(struct atk_world *w, unsigned int rounds)
{
	for (unsigned int i = 0; i < rounds; i++) {
		size_t len = i & 1 ? 4096 : 2048;
		struct atk_map *m = drv_map(w, 0, len, 0, DG_DMA_TO_DEVICE, (i >> 1) & 1);

		if (!m)
			continue;
		read_write(w, 1, m->dma, len, NULL);
		read_write(w, 1, (uintptr_t)m->buf, len, NULL);
		read_write(w, 1, (m->dma & ~(uint64_t)(W_PAGE - 1)) + W_PAGE, 64, NULL);
		drv_unmap(w, m);
	}
}

/*
 * detached: device 0 did DMA to several buffers (its IOTLB holds them); the driver unmaps
 * them and tears the device's DMA state down (its context is blocked). Device 0 then tries
 * every address it saw, and device 1 - never attached, blocked from creation - tries them too.
 */
static void attack_detached(struct atk_world *w, unsigned int rounds)
{
	struct {
		uint64_t dma;
		uintptr_t host;
		size_t len;
	} seen[64];
	struct atk_map *m[4];
	unsigned int n = 0, ns = 0;
	int r;

	for (unsigned int i = 0; i < rounds && ns < 64; i++) {
		m[n] = drv_map(w, 0, sizes[i % 3], 0, DG_DMA_BIDIRECTIONAL, i & 1);
		if (m[n]) {
			seen[ns].dma = m[n]->dma;
			seen[ns].host = (uintptr_t)m[n]->buf;
			seen[ns++].len = m[n++]->len;
		}
		if (n == 4 || i + 1 == rounds) /* at most 4 live: the arena zones are small */
			while (n)
				drv_unmap(w, m[--n]);
	}
	drv_wait_confirmed(w, 1000000000ull);
	for (unsigned int d = 0; d < 3; d++)
		if (w->pool[d]) {
			orc_remove_area(&w->orc, w->pool_lo[d]);
			w->pool_lo[d] = NULL;
			if (dg_dma_pool_destroy(w->pool[d]))
				w_legit_failure(w, "pool destroy", -EBUSY);
			w->pool[d] = NULL;
		}
	r = dg_dma_dev_destroy(w->dd[0]);
	if (r) {
		w_legit_failure(w, "detach (dg_dma_dev_destroy)", r);
		return;
	}
	w->dd[0] = NULL;
	for (unsigned int i = 0; i < ns; i++)
		for (unsigned int d = 0; d < 2; d++) {
			read_write(w, d, seen[i].dma, seen[i].len, NULL);
			read_write(w, d, seen[i].host, seen[i].len, NULL);
		}
}

/*
 * withheld: the device translates a buffer and holds the sg list without completing (no
 * quiescent point, no acknowledgement). The driver gives up on the request and unmaps: a
 * policy that waits for the devices says -ETIMEDOUT and the driver keeps the memory aside;
 * otherwise the driver reuses it at once. The device then reads and writes through what it
 * holds, completes, and tries the IOVA through the IOMMU once more.
 */
static void attack_withheld(struct atk_world *w, unsigned int rounds)
{
	dg_dev_set_auto_offline(w->dev[0], false);
	w->auto_offline[0] = false;
	for (unsigned int i = 0; i < rounds; i++) {
		size_t len = i & 1 ? 4096 : 2048;
		struct atk_map *m = drv_map(w, 0, len, 0, DG_DMA_BIDIRECTIONAL, (i >> 1) & 1);
		struct dg_sg sg[4];
		unsigned int nr = 0;
		int r;

		if (!m)
			continue;
		r = dg_dev_translate(w->dev[0], m->dma, len, DG_ACCESS_READ | DG_ACCESS_WRITE, sg,
				     4, &nr);
		if (r) {
			w_legit_failure(w, "device translate of its buffer", r);
			dev_idle(w, 0);
			drv_unmap(w, m);
			continue;
		}
		drv_unmap(w, m); /* the device holds: waits time out */
		dev_held(w, 0, false, sg, nr, m);
		dev_held(w, 0, true, sg, nr, m);
		dev_idle(w, 0);		  /* completes at last */
		drv_wait_confirmed(w, 0); /* one housekeeping pass */
		read_write(w, 0, m->dma, len, m);
		dev_idle(w, 0);
	}
}

int atk_run(enum atk_policy policy, enum atk_attack attack, const struct atk_config *cfg,
	    struct atk_result *res)
{
	static const struct atk_config defaults = {0};
	unsigned int ndev = 1, attach = 1, rounds;
	struct atk_world w;
	uint64_t t0 = w_now_ns();
	int r;

	if ((unsigned int)policy >= ATK_NR_POLICIES || (unsigned int)attack >= ATK_NR_ATTACKS ||
	    !res)
		return -EINVAL;
	if (!cfg)
		cfg = &defaults;
	rounds = cfg->iterations ? cfg->iterations : 8;
	memset(res, 0, sizeof(*res));
	res->policy = policy;
	res->attack = attack;
	if (attack == ATK_OTHER_DOMAIN) {
		ndev = 2;
		attach = 3;
	} else if (attack == ATK_DETACHED) {
		ndev = 2; /* device 1 is never attached */
	}
	r = world_init(&w, policy, cfg, res, ndev, attach);
	if (r) {
		world_fini(&w);
		return r;
	}
	switch (attack) {
	case ATK_STALE:
		attack_stale(&w, rounds);
		break;
	case ATK_STALE_WINDOW:
		attack_stale_window(&w, rounds);
		break;
	case ATK_SUBPAGE:
		attack_subpage(&w, rounds);
		break;
	case ATK_PERM:
		attack_perm(&w, rounds);
		break;
	case ATK_OUT_OF_RANGE:
		attack_out_of_range(&w, rounds);
		break;
	case ATK_OTHER_DOMAIN:
		attack_other_domain(&w, rounds);
		break;
	case ATK_DETACHED:
		attack_detached(&w, rounds);
		break;
	case ATK_WITHHELD:
		attack_withheld(&w, rounds);
		break;
	case ATK_NR_ATTACKS:
		break;
	}
	world_finish(&w);
	world_fini(&w);
	if (res->legit_failures)
		res->verdict = ATK_BROKEN;
	res->elapsed_ns = w_now_ns() - t0;
	return 0;
}
