/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_linux.c - the Linux 6.1 reference search: what drivers/iommu/iova.c does.
 *
 * Written from the algorithm's description, to be measured against (dmaguard bench iova and
 * the DMA layer's Linux-like configuration), not used for real work. Linux keeps two cached
 * nodes, one for requests limited to 32 bits and one for the rest; an allocation starts at
 * the cached node and walks the tree backwards with rb_prev() one node at a time until a gap
 * below the current node holds the (aligned) request. If it falls off the bottom it retries
 * once from the node at the limit down to where the first walk started. Each successful
 * allocation becomes the cached node; a free at or above the cached node moves it to the
 * freed range's successor. max32_alloc_size remembers the smallest 32-bit request that failed
 * until something below 4 GiB is freed.
 *
 * The walk is linear in the number of ranges it passes, which is the pathology of EiovaR
 * (FAST'15) and of the soft lockups reported since: a cached node above N one-granule ranges
 * separated by one-granule holes and a two-granule request visits all N of them.
 *
 * Differences from Linux that do not change the walk: the tree is dmaguard's AVL tree with its
 * augmentation switched off instead of a red-black tree; the anchor sits at end + 1 instead
 * of at ~0UL; the size of a natural-alignment request is already rounded up to a power of two
 * (iova.c), as Linux's dma-iommu does for cacheable sizes. Every node the walk passes is
 * counted in tree_nodes_visited, as for the augmented search.
 *
 * Locking: all of this runs under the tree lock.
 */
#include "iova/iova_priv.h"

static inline uint64_t pfn_hi(const struct iova_node *n)
{
	return n->lo + n->len - 1;
}

/* Linux's dma_32bit_pfn: the first pfn at or above 4 GiB (an exclusive bound). */
static inline uint64_t dma_32bit_pfn(const struct dg_iova_space *s)
{
	return s->dma32_pfn + 1;
}

/* iova_find_limit(): the node to restart from when the first walk fell off the bottom. */
static struct iova_node *find_limit(struct dg_iova_space *s, uint64_t limit_pfn)
{
	struct iova_tree *t = &s->tree;
	struct iova_node *node, *next;

	/* Linux's "incredibly crude approximation": above 32 bits, start at the anchor. */
	if (limit_pfn > dma_32bit_pfn(s))
		return &s->anchor;
	node = t->root;
	t->visits++;
	while (pfn_hi(node) < limit_pfn) {
		node = node->right;
		t->visits++;
	}
search_left:
	while (node->left && node->left->lo >= limit_pfn) {
		node = node->left;
		t->visits++;
	}
	if (!node->left)
		return node;
	next = node->left;
	t->visits++;
	while (next->right) {
		next = next->right;
		t->visits++;
		if (next->lo >= limit_pfn) {
			node = next;
			goto search_left;
		}
	}
	return node;
}

struct iova_node *iova_linux_find_fit(struct dg_iova_space *s, uint64_t len,
				      unsigned int align_order, uint64_t lim, uint64_t *pfn)
{
	struct iova_tree *t = &s->tree;
	uint64_t limit_pfn = lim + 1; /* Linux passes limit + 1 */
	uint64_t align_mask = ~((1ull << align_order) - 1);
	uint64_t high_pfn = limit_pfn, low_pfn = s->start_pfn;
	uint64_t new_pfn, retry_pfn;
	struct iova_node *curr, *prev;

	if (limit_pfn <= dma_32bit_pfn(s) && len >= s->max32_alloc_size)
		return NULL;
	curr = limit_pfn <= dma_32bit_pfn(s) ? s->cached32_node : s->cached_node;
	retry_pfn = pfn_hi(curr);
retry:
	do {
		t->visits++;
		high_pfn = high_pfn < curr->lo ? high_pfn : curr->lo;
		new_pfn = (high_pfn - len) & align_mask; /* wraps when high_pfn < len: see below */
		prev = curr;
		curr = iova_tree_prev(t, curr);
	} while (curr && new_pfn <= pfn_hi(curr) && new_pfn >= low_pfn);

	if (high_pfn < len || new_pfn < low_pfn) {
		if (low_pfn == s->start_pfn && retry_pfn < limit_pfn) {
			high_pfn = limit_pfn;
			low_pfn = retry_pfn + 1;
			curr = find_limit(s, limit_pfn);
			goto retry;
		}
		s->max32_alloc_size = len;
		return NULL;
	}
	/* The new range lies between curr and prev, which are neighbours: prev is its
	 * successor. */
	*pfn = new_pfn;
	return prev;
}

/* __cached_rbnode_insert_update() */
void iova_linux_inserted(struct dg_iova_space *s, struct iova_node *x)
{
	if (pfn_hi(x) < dma_32bit_pfn(s))
		s->cached32_node = x;
	else
		s->cached_node = x;
}

/* __cached_rbnode_delete_update(), called before @x leaves the tree. */
void iova_linux_removing(struct dg_iova_space *s, struct iova_node *x)
{
	struct iova_node *cached = s->cached32_node;

	if (x == cached || (pfn_hi(x) < dma_32bit_pfn(s) && x->lo >= cached->lo))
		s->cached32_node = iova_tree_next(&s->tree, x);
	if (x->lo < dma_32bit_pfn(s))
		s->max32_alloc_size = dma_32bit_pfn(s);
	cached = s->cached_node;
	if (x->lo >= cached->lo)
		s->cached_node = iova_tree_next(&s->tree, x);
}
