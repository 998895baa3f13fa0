/* SPDX-License-Identifier: MIT */
/*
 * An augmented treap of virtual ranges [start, end), keyed by start, for
 * vmalloc's free and busy areas (the kernel uses augmented rbtrees; a treap
 * has the same O(log n) expected costs with far less code).
 *
 * Each node keeps subtree_max, the longest range in its subtree, so the
 * lowest-addressed range of at least a length is found by one descent: go
 * left while the left subtree has one, else take this node if it is long
 * enough, else go right (find_vmap_lowest_match). Priorities make a
 * max-heap; they come from a hash of the node's address, so a tree is
 * deterministic. A range's start may change in place as long as the order
 * of the keys is kept (clipping and merging never move past a neighbour);
 * va_fix() then recomputes subtree_max along the path.
 *
 * Callers hold the tree's lock. Recursion depth is the tree height (about
 * 3 log2 n expected).
 */
#ifndef ALLOCLAB_PAGES_VATREE_H
#define ALLOCLAB_PAGES_VATREE_H

#include <stddef.h>
#include <stdint.h>

struct va_node {
	struct va_node *left;  /* smaller starts */
	struct va_node *right; /* larger starts */
	uintptr_t start;       /* first byte: the key */
	uintptr_t end;	       /* one past the last byte */
	size_t subtree_max;    /* longest end - start in this subtree */
	uint32_t prio;	       /* heap priority (larger is nearer the root) */
	uint32_t pad;	       /* unused */
};

static inline size_t va_size(const struct va_node *n)
{
	return n->end - n->start;
}

static inline size_t va_max(const struct va_node *n)
{
	return n ? n->subtree_max : 0;
}

static inline void va_update(struct va_node *n)
{
	size_t m = va_size(n), l = va_max(n->left), r = va_max(n->right);

	n->subtree_max = m > l ? (m > r ? m : r) : (l > r ? l : r);
}

/* A node's priority from its address (splitmix64's finaliser). */
static inline void va_init_prio(struct va_node *n)
{
	uint64_t x = (uint64_t)(uintptr_t)n;

	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	n->prio = (uint32_t)x;
}

static inline struct va_node *va_rot_right(struct va_node *n)
{
	struct va_node *l = n->left;

	n->left = l->right;
	l->right = n;
	va_update(n);
	va_update(l);
	return l;
}

static inline struct va_node *va_rot_left(struct va_node *n)
{
	struct va_node *r = n->right;

	n->right = r->left;
	r->left = n;
	va_update(n);
	va_update(r);
	return r;
}

/* Insert n (its start not in the tree); returns the new root. */
static struct va_node *va_insert(struct va_node *root, struct va_node *n)
{
	if (!root) {
		n->left = n->right = NULL;
		va_update(n);
		return n;
	}
	if (n->start < root->start) {
		root->left = va_insert(root->left, n);
		if (root->left->prio > root->prio)
			return va_rot_right(root);
	} else {
		root->right = va_insert(root->right, n);
		if (root->right->prio > root->prio)
			return va_rot_left(root);
	}
	va_update(root);
	return root;
}

/* Join two treaps, every key of a below every key of b. */
static struct va_node *va_join(struct va_node *a, struct va_node *b)
{
	if (!a)
		return b;
	if (!b)
		return a;
	if (a->prio > b->prio) {
		a->right = va_join(a->right, b);
		va_update(a);
		return a;
	}
	b->left = va_join(a, b->left);
	va_update(b);
	return b;
}

/* Remove the node whose start is key (if any); returns the new root. */
static struct va_node *va_erase(struct va_node *root, uintptr_t key)
{
	if (!root)
		return NULL;
	if (key < root->start)
		root->left = va_erase(root->left, key);
	else if (key > root->start)
		root->right = va_erase(root->right, key);
	else
		return va_join(root->left, root->right);
	va_update(root);
	return root;
}

/* Recompute subtree_max on the path to key (after a range changed in place). */
static size_t va_fix(struct va_node *n, uintptr_t key)
{
	if (!n)
		return 0;
	if (key < n->start)
		va_fix(n->left, key);
	else if (key > n->start)
		va_fix(n->right, key);
	va_update(n);
	return n->subtree_max;
}

static inline struct va_node *va_find(struct va_node *n, uintptr_t key)
{
	while (n && n->start != key)
		n = key < n->start ? n->left : n->right;
	return n;
}

/* The node with the largest start <= key (the range that may contain key). */
static inline struct va_node *va_find_le(struct va_node *n, uintptr_t key)
{
	struct va_node *best = NULL;

	while (n) {
		if (n->start <= key) {
			best = n;
			n = n->right;
		} else {
			n = n->left;
		}
	}
	return best;
}

/* The node with the smallest start > key. */
static inline struct va_node *va_find_gt(struct va_node *n, uintptr_t key)
{
	struct va_node *best = NULL;

	while (n) {
		if (n->start > key) {
			best = n;
			n = n->left;
		} else {
			n = n->right;
		}
	}
	return best;
}

/* The lowest-addressed node at least len long, or NULL. */
static inline struct va_node *va_lowest_fit(struct va_node *n, size_t len)
{
	if (va_max(n) < len)
		return NULL;
	while (n) {
		if (va_max(n->left) >= len)
			n = n->left;
		else if (va_size(n) >= len)
			return n;
		else
			n = n->right;
	}
	return NULL;
}

/* Heap order, subtree_max and key order within (lo, hi): 0, or -1. */
static int va_verify(const struct va_node *n, uintptr_t lo, uintptr_t hi, uint32_t prio_max)
{
	size_t m, l, r;

	if (!n)
		return 0;
	if (n->start < lo || n->start >= hi || n->end <= n->start || n->prio > prio_max)
		return -1;
	l = va_max(n->left);
	r = va_max(n->right);
	m = va_size(n);
	if (l > m)
		m = l;
	if (r > m)
		m = r;
	if (m != n->subtree_max)
		return -1;
	if (va_verify(n->left, lo, n->start, n->prio) ||
	    va_verify(n->right, n->start + 1, hi, n->prio))
		return -1;
	return 0;
}

#endif
