/* SPDX-License-Identifier: MIT */
/*
 * iova/iova_tree.c - the augmented AVL tree of IOVA ranges.
 *
 * Every range that is not free (a live or cached allocation, a reserved range, and an anchor
 * node at end + 1) is a node keyed by its first pfn. Each node owns the free gap directly
 * below it, [lo - gap, lo - 1], so the gaps of the space are exactly the nodes' gaps and the
 * anchor owns the topmost one. Each node keeps, for its subtree:
 *
 *   max_gap    the largest gap (in granules)
 *   max_order  the largest k such that some gap holds a 2^k-aligned block of 2^k granules
 *
 * Alignment. A gap of length L >= 2^k need not hold an aligned 2^k block (gap [1, 2] holds no
 * aligned pair), so max_gap alone cannot steer a search for aligned blocks: it would have to
 * back out of subtrees that only looked promising, and a crafted layout makes that linear.
 * max_order is exact instead. For one gap [g0, g1] of length L >= 1 let K = floor(log2 L):
 *   - no aligned block of 2^(K+1) fits (it is longer than L);
 *   - an aligned block of 2^(K-1) always fits: L >= 2^K = 2 * 2^(K-1), and any window of
 *     2 * 2^(K-1) - 1 granules contains a 2^(K-1)-aligned block of 2^(K-1);
 *   - so gap_order is K if align_up(g0, 2^K) + 2^K - 1 <= g1, else K - 1: O(1) per gap.
 * A gap holding an aligned 2^k block also holds aligned blocks of every smaller power of two,
 * so "some gap of the subtree fits an aligned 2^a block" is exactly max_order >= a, and for
 * granule alignment "some gap fits n granules" is exactly max_gap >= n. Natural-alignment
 * requests are rounded up to 2^a granules (iova.c), so both kinds of request are answered
 * exactly by the subtree fields: a search never enters a subtree it has to leave again.
 *
 * The search (iova_tree_find_fit) for the highest block of @len granules, aligned to 2^a,
 * ending at or below @lim, with h the tree height:
 *   1. Descend towards key lim + 1 (h nodes). Every node with lo <= lim + 1 is a candidate
 *      together with its left subtree: all their gaps end at or below lim. The last node at
 *      which the descent went left (the lowest node with lo > lim + 1) is the one gap that
 *      straddles lim; it is tested clipped to lim, and it is the highest place of all.
 *   2. The candidates, deepest first, are in descending address order: for each, test its
 *      own gap (O(1)), then its left child's subtree fields (1 node). At most h tests.
 *   3. Descend into the first fitting subtree, always right when the right child's fields say
 *      it fits, else the node's own gap, else left (which must then fit): h nodes.
 * At most 3h + 1 nodes are examined, and h <= 1.4405 log2(n + 2) for an AVL tree of n nodes,
 * so a search examines at most 4.33 log2(n + 2) + 1 nodes. Insertion below a known successor
 * (h nodes to the leaf spot, h to retrace) and removal (h to find the successor, 2h to
 * retrace) are O(log n) too; iova.c counts every node examined (tree_nodes_visited) and the
 * tests assert the bound.
 *
 * Updates retrace from the changed leaf to the root, recomputing height and the subtree fields
 * and rotating where the balance factor reaches 2 (rotations recompute the two nodes they
 * move). Going all the way up, rather than stopping when the height settles, keeps the
 * augmented fields right: a gap change matters to every ancestor.
 *
 * Why not a red-black tree (Linux) or a treap: AVL is shallower (1.44 log2 n vs 2 log2 n),
 * and searches outnumber updates; a treap's bound is only expected. Why not a bitmap (PowerPC
 * TCE): the IOVA space is up to 2^52 granules.
 *
 * The Linux reference allocator uses the same tree with augment off (heights only); its walk
 * is in iova_linux.c.
 *
 * Locking: every function here runs under the space's tree lock.
 */
#include "iova/iova_priv.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

static inline unsigned int node_height(const struct iova_node *n)
{
	return n ? n->height : 0;
}

int8_t iova_gap_order(uint64_t g0, uint64_t len)
{
	unsigned int k;
	uint64_t a, x;

	if (!len)
		return -1;
	k = dg_ilog2(len);
	a = 1ull << k;
	/* g0 + a - 1 <= g0 + len - 1 <= end_pfn: no overflow. */
	x = dg_align_up(g0, a);
	return (int8_t)(x - g0 + a <= len ? k : k - 1);
}

static inline void set_gap(const struct iova_tree *t, struct iova_node *n, uint64_t gap)
{
	n->gap = gap;
	if (t->augment)
		n->gap_order = iova_gap_order(n->lo - gap, gap);
}

static inline void pull(const struct iova_tree *t, struct iova_node *n)
{
	const struct iova_node *l = n->left, *r = n->right;
	unsigned int hl = node_height(l), hr = node_height(r);

	n->height = (uint8_t)(1 + (hl > hr ? hl : hr));
	if (!t->augment)
		return;
	uint64_t g = n->gap;
	int8_t o = n->gap_order;
	if (l) {
		g = l->max_gap > g ? l->max_gap : g;
		o = l->max_order > o ? l->max_order : o;
	}
	if (r) {
		g = r->max_gap > g ? r->max_gap : g;
		o = r->max_order > o ? r->max_order : o;
	}
	n->max_gap = g;
	n->max_order = o;
}

static inline void replace_child(struct iova_tree *t, struct iova_node *parent,
				 struct iova_node *old, struct iova_node *new)
{
	if (!parent)
		t->root = new;
	else if (parent->left == old)
		parent->left = new;
	else
		parent->right = new;
	if (new)
		new->parent = parent;
}

static struct iova_node *rotate_left(struct iova_tree *t, struct iova_node *x)
{
	struct iova_node *y = x->right;

	x->right = y->left;
	if (y->left)
		y->left->parent = x;
	replace_child(t, x->parent, x, y);
	y->left = x;
	x->parent = y;
	pull(t, x);
	pull(t, y);
	return y;
}

static struct iova_node *rotate_right(struct iova_tree *t, struct iova_node *x)
{
	struct iova_node *y = x->left;

	x->left = y->right;
	if (y->right)
		y->right->parent = x;
	replace_child(t, x->parent, x, y);
	y->right = x;
	x->parent = y;
	pull(t, x);
	pull(t, y);
	return y;
}

/* @n is pulled; restore its balance and return the root of its subtree. */
static struct iova_node *rebalance(struct iova_tree *t, struct iova_node *n)
{
	int bf = (int)node_height(n->left) - (int)node_height(n->right);

	if (bf > 1) {
		if (node_height(n->left->left) < node_height(n->left->right))
			rotate_left(t, n->left);
		return rotate_right(t, n);
	}
	if (bf < -1) {
		if (node_height(n->right->right) < node_height(n->right->left))
			rotate_right(t, n->right);
		return rotate_left(t, n);
	}
	return n;
}

/* Recompute and rebalance from @n up to the root. */
static void retrace(struct iova_tree *t, struct iova_node *n)
{
	while (n) {
		t->visits++;
		pull(t, n);
		n = rebalance(t, n)->parent;
	}
}

void iova_tree_init(struct iova_tree *t, uint64_t start_pfn, struct iova_node *anchor,
		    uint64_t anchor_pfn, bool augment)
{
	t->root = anchor;
	t->start_pfn = start_pfn;
	t->augment = augment;
	t->nodes = 1;
	t->allocated = 0;
	t->reserved = 0;
	t->visits = 0;
	anchor->left = anchor->right = anchor->parent = NULL;
	anchor->lo = anchor_pfn;
	anchor->len = 1;
	anchor->kind = IOVA_KIND_ANCHOR;
	anchor->mag_order = -1;
	anchor->gap_order = -1;
	set_gap(t, anchor, anchor_pfn - start_pfn);
	pull(t, anchor);
}

struct iova_node *iova_tree_first(const struct iova_tree *t)
{
	struct iova_node *n = t->root;

	while (n && n->left)
		n = n->left;
	return n;
}

struct iova_node *iova_tree_next(struct iova_tree *t, struct iova_node *n)
{
	if (n->right) {
		n = n->right;
		t->visits++;
		while (n->left) {
			n = n->left;
			t->visits++;
		}
		return n;
	}
	while (n->parent && n->parent->right == n) {
		n = n->parent;
		t->visits++;
	}
	return n->parent;
}

struct iova_node *iova_tree_prev(struct iova_tree *t, struct iova_node *n)
{
	if (n->left) {
		n = n->left;
		t->visits++;
		while (n->right) {
			n = n->right;
			t->visits++;
		}
		return n;
	}
	while (n->parent && n->parent->left == n) {
		n = n->parent;
		t->visits++;
	}
	return n->parent;
}

struct iova_node *iova_tree_floor(struct iova_tree *t, uint64_t pfn)
{
	struct iova_node *n = t->root, *best = NULL;

	while (n) {
		t->visits++;
		if (n->lo <= pfn) {
			best = n;
			n = n->right;
		} else {
			n = n->left;
		}
	}
	return best;
}

struct iova_node *iova_tree_above(struct iova_tree *t, uint64_t pfn)
{
	struct iova_node *n = t->root, *best = NULL;

	while (n) {
		t->visits++;
		if (n->lo > pfn) {
			best = n;
			n = n->left;
		} else {
			n = n->right;
		}
	}
	return best;
}

/* Does @n's own (unclipped) gap hold the block? */
static inline bool own_fits(const struct iova_node *n, uint64_t len, unsigned int a)
{
	if (!a)
		return n->gap >= len;
	return n->gap_order >= (int)a;
}

/* Does some gap in the subtree of @n hold the block? */
static inline bool sub_fits(const struct iova_node *n, uint64_t len, unsigned int a)
{
	if (!a)
		return n->max_gap >= len;
	return n->max_order >= (int)a;
}

/* Highest fitting position inside @n's own gap (own_fits(n) holds). */
static inline uint64_t own_pos(const struct iova_node *n, uint64_t len, unsigned int a)
{
	return dg_align_down(n->lo - len, 1ull << a);
}

/* Rightmost fitting gap in the subtree of @n (sub_fits(n) holds). */
static struct iova_node *descend(struct iova_tree *t, struct iova_node *n, uint64_t len,
				 unsigned int a)
{
	for (;;) {
		struct iova_node *r = n->right;

		if (r) {
			t->visits++;
			if (sub_fits(r, len, a)) {
				n = r;
				continue;
			}
		}
		if (own_fits(n, len, a))
			return n;
		n = n->left;
		t->visits++;
	}
}

struct iova_node *iova_tree_find_fit(struct iova_tree *t, uint64_t len, unsigned int a,
				     uint64_t lim, uint64_t *pfn)
{
	struct iova_node *cand[IOVA_MAX_HEIGHT];
	struct iova_node *n = t->root, *straddle = NULL;
	int nc = 0;

	/* 1. Descend towards lim + 1 (lim <= end_pfn < UINT64_MAX). */
	while (n) {
		t->visits++;
		if (n->lo <= lim + 1) {
			cand[nc++] = n;
			n = n->right;
		} else {
			straddle = n;
			n = n->left;
		}
	}
	if (straddle) {
		uint64_t g0 = straddle->lo - straddle->gap;

		if (straddle->gap && g0 <= lim && lim + 1 - g0 >= len) {
			uint64_t x = dg_align_down(lim + 1 - len, 1ull << a);

			if (x >= g0) {
				*pfn = x;
				return straddle;
			}
		}
	}
	/* 2. Candidates from the highest down. */
	while (nc-- > 0) {
		struct iova_node *c = cand[nc];

		if (own_fits(c, len, a)) {
			*pfn = own_pos(c, len, a);
			return c;
		}
		if (c->left) {
			t->visits++;
			if (sub_fits(c->left, len, a)) {
				/* 3. Highest fit inside that subtree. */
				struct iova_node *d = descend(t, c->left, len, a);

				*pfn = own_pos(d, len, a);
				return d;
			}
		}
	}
	return NULL;
}

void iova_tree_insert_below(struct iova_tree *t, struct iova_node *succ, struct iova_node *x)
{
	uint64_t g0 = succ->lo - succ->gap;

	x->left = x->right = NULL;
	x->height = 1;
	set_gap(t, x, x->lo - g0);
	set_gap(t, succ, succ->lo - (x->lo + x->len));
	if (!succ->left) {
		succ->left = x;
		x->parent = succ;
	} else {
		struct iova_node *p = succ->left;

		t->visits++;
		while (p->right) {
			p = p->right;
			t->visits++;
		}
		p->right = x;
		x->parent = p;
	}
	pull(t, x);
	t->nodes++;
	if (x->kind == IOVA_KIND_ALLOC)
		t->allocated++;
	else if (x->kind == IOVA_KIND_RESERVED)
		t->reserved++;
	/* succ is an ancestor of x, so this also recomputes succ. */
	retrace(t, x->parent);
}

void iova_tree_insert(struct iova_tree *t, struct iova_node *x)
{
	iova_tree_insert_below(t, iova_tree_above(t, x->lo), x);
}

void iova_tree_remove(struct iova_tree *t, struct iova_node *x)
{
	struct iova_node *succ = iova_tree_next(t, x); /* never NULL: the anchor is last */

	set_gap(t, succ, succ->gap + x->len + x->gap);
	if (x->left && x->right) {
		/* succ is the leftmost node of x->right: it takes x's place. */
		struct iova_node *start = succ->parent == x ? succ : succ->parent;

		if (succ->parent != x) {
			replace_child(t, succ->parent, succ, succ->right);
			succ->right = x->right;
			x->right->parent = succ;
		}
		succ->left = x->left;
		x->left->parent = succ;
		replace_child(t, x->parent, x, succ);
		retrace(t, start);
	} else {
		struct iova_node *c = x->left ? x->left : x->right;
		struct iova_node *p = x->parent;

		if (!x->left && x->right) {
			/* succ is inside x->right, below the retrace path: recompute up to c. */
			for (struct iova_node *n = succ; n != c; n = n->parent) {
				t->visits++;
				pull(t, n);
			}
			pull(t, c);
		}
		replace_child(t, p, x, c);
		retrace(t, p);
	}
	x->left = x->right = x->parent = NULL;
	t->nodes--;
	if (x->kind == IOVA_KIND_ALLOC)
		t->allocated--;
	else if (x->kind == IOVA_KIND_RESERVED)
		t->reserved--;
}

/* ---- check ---- */

struct tree_check {
	const struct iova_tree *t;
	FILE *why;
	uint64_t prev_end; /* one past the previous node's last pfn */
	uint64_t nodes, allocated, reserved;
	const struct iova_node *last;
};

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			if (c->why) {                                       \
				fprintf(c->why, "iova tree: " __VA_ARGS__); \
				fputc('\n', c->why);                        \
			}                                                   \
			return -EUCLEAN;                                    \
		}                                                           \
	} while (0)

static int check_sub(struct tree_check *c, const struct iova_node *n,
		     const struct iova_node *parent, unsigned int depth)
{
	int err;

	if (!n)
		return 0;
	CHECK(depth < IOVA_MAX_HEIGHT, "depth %u exceeds the bound", depth);
	CHECK(n->parent == parent, "node %#llx: parent link broken", (unsigned long long)n->lo);
	if ((err = check_sub(c, n->left, n, depth + 1)))
		return err;

	/* in order: this node */
	CHECK(n->len >= 1, "node %#llx: empty range", (unsigned long long)n->lo);
	CHECK(n->lo >= c->prev_end, "node %#llx overlaps its predecessor (ends %#llx)",
	      (unsigned long long)n->lo, (unsigned long long)c->prev_end);
	CHECK(n->gap == n->lo - c->prev_end, "node %#llx: gap %llu, actual %llu",
	      (unsigned long long)n->lo, (unsigned long long)n->gap,
	      (unsigned long long)(n->lo - c->prev_end));
	CHECK(n->kind <= IOVA_KIND_ANCHOR, "node %#llx: bad kind %u", (unsigned long long)n->lo,
	      n->kind);
	CHECK(n->lo + n->len > n->lo, "node %#llx: range wraps", (unsigned long long)n->lo);
	c->prev_end = n->lo + n->len;
	c->nodes++;
	c->allocated += n->kind == IOVA_KIND_ALLOC;
	c->reserved += n->kind == IOVA_KIND_RESERVED;
	c->last = n;

	if ((err = check_sub(c, n->right, n, depth + 1)))
		return err;

	unsigned int hl = node_height(n->left), hr = node_height(n->right);
	CHECK(n->height == 1 + (hl > hr ? hl : hr), "node %#llx: height %u wrong",
	      (unsigned long long)n->lo, n->height);
	CHECK(hl <= hr + 1 && hr <= hl + 1, "node %#llx: unbalanced (%u, %u)",
	      (unsigned long long)n->lo, hl, hr);
	if (c->t->augment) {
		uint64_t g = n->gap;
		int8_t o = iova_gap_order(n->lo - n->gap, n->gap);

		CHECK(n->gap_order == o, "node %#llx: gap_order %d, actual %d",
		      (unsigned long long)n->lo, n->gap_order, o);
		if (n->left) {
			g = n->left->max_gap > g ? n->left->max_gap : g;
			o = n->left->max_order > o ? n->left->max_order : o;
		}
		if (n->right) {
			g = n->right->max_gap > g ? n->right->max_gap : g;
			o = n->right->max_order > o ? n->right->max_order : o;
		}
		CHECK(n->max_gap == g, "node %#llx: max_gap %llu, actual %llu",
		      (unsigned long long)n->lo, (unsigned long long)n->max_gap,
		      (unsigned long long)g);
		CHECK(n->max_order == o, "node %#llx: max_order %d, actual %d",
		      (unsigned long long)n->lo, n->max_order, o);
	}
	return 0;
}

int iova_tree_check(const struct iova_tree *t, FILE *why)
{
	struct tree_check cc = {.t = t, .why = why, .prev_end = t->start_pfn};
	struct tree_check *c = &cc;
	int err;

	CHECK(t->root && !t->root->parent, "root missing or has a parent");
	if ((err = check_sub(c, t->root, NULL, 0)))
		return err;
	CHECK(c->last->kind == IOVA_KIND_ANCHOR, "the last node is not the anchor");
	CHECK(c->nodes == t->nodes, "%llu nodes counted, %llu recorded",
	      (unsigned long long)c->nodes, (unsigned long long)t->nodes);
	CHECK(c->allocated == t->allocated, "%llu allocations counted, %llu recorded",
	      (unsigned long long)c->allocated, (unsigned long long)t->allocated);
	CHECK(c->reserved == t->reserved, "%llu reserved counted, %llu recorded",
	      (unsigned long long)c->reserved, (unsigned long long)t->reserved);
	/* AVL: n >= F(h + 2) - 1, so h < 1.4405 log2(n + 2). */
	double bound = 1.4405 * log2((double)t->nodes + 2.0);
	CHECK(t->root->height <= bound + 1.0, "height %u above the AVL bound %.1f", t->root->height,
	      bound);
	return 0;
}
