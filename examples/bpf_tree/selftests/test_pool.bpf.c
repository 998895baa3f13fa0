/* SPDX-License-Identifier: MIT */
/* bpf_tree's selftests: SEC("syscall") programs returning 0 on success. */
#include <libarena/common.h>
#include <libarena/buddy.h>
#include <libarena/asan.h>

extern struct buddy __arena buddy;

static void __arena *held[64];

SEC("syscall")
__weak int test_pool_classes(void)
{
	u8 __arena *p;
	int c, j, ret;

	ret = buddy_init(&buddy);
	if (ret)
		return ret;
	for (c = zero; c < POOL_CLASSES && can_loop; c++) {
		size_t sz = 1UL << (POOL_MIN_SHIFT + c);

		p = buddy_alloc(&buddy, sz - 1);
		if (!p)
			return -ENOMEM;
		if (buddy_usable_size(&buddy, p) != sz || ((u64)p & (sz - 1)))
			return -EINVAL;
		for (j = zero; j < sz && can_loop; j++)
			p[j] = (u8)c;
		held[c] = p;
	}
	for (c = zero; c < POOL_CLASSES && can_loop; c++) {
		p = held[c];
		if (p[0] != (u8)c || buddy_free(&buddy, p))
			return -EINVAL;
	}
	if (buddy.live)
		return -EFAULT;
	return buddy_destroy(&buddy);
}

SEC("syscall")
__weak int test_pool_reuse(void)
{
	void __arena *a, *b;
	int ret;

	ret = buddy_init(&buddy);
	if (ret)
		return ret;
	a = buddy_alloc(&buddy, 64);
	if (!a || buddy_free(&buddy, a))
		return -ENOMEM;
	b = buddy_alloc(&buddy, 64);
	if (a != b) /* LIFO: the object just freed comes back first */
		return -EINVAL;
	buddy_free(&buddy, b);
	return buddy_destroy(&buddy);
}

SEC("syscall")
__weak int test_pool_bulk(void)
{
	int i, n, ret;

	ret = buddy_init(&buddy);
	if (ret)
		return ret;
	n = buddy_alloc_bulk(&buddy, 128, held, 64);
	if (n != 64)
		return -ENOMEM;
	for (i = zero; i < n && can_loop; i++)
		if (buddy_usable_size(&buddy, held[i]) != 128)
			return -EINVAL;
	if (buddy_free_bulk(&buddy, held, n) || buddy.live)
		return -EINVAL;
	return buddy_destroy(&buddy);
}

SEC("syscall")
__weak int test_pool_invalid_free(void)
{
	u8 __arena *p;
	int ret;

	ret = buddy_init(&buddy);
	if (ret)
		return ret;
	p = buddy_alloc(&buddy, 32);
	if (!p)
		return -ENOMEM;
	if (buddy_free(&buddy, p + 8) != -EINVAL) /* inside an object */
		return -EINVAL;
	if (buddy_alloc(&buddy, 0) || buddy_alloc(&buddy, 8192)) /* no class */
		return -EINVAL;
	buddy_free(&buddy, p);
	return buddy_destroy(&buddy);
}

/* ASan builds only: a live object is readable, a free one poisoned. */
SEC("syscall")
__weak int asan_test_pool_poison(void)
{
	u8 __arena *p;
	int ret;

	ret = buddy_init(&buddy);
	if (ret)
		return ret;
	p = buddy_alloc(&buddy, 64);
	if (!p)
		return -ENOMEM;
	if (asan_shadow_set(p) || asan_shadow_set(p + 63))
		return -EINVAL;
	if (buddy_free(&buddy, p))
		return -EINVAL;
	if (!asan_shadow_set(p) || !asan_shadow_set(p + 63))
		return -EFAULT;
	return buddy_destroy(&buddy);
}

__weak char _license[] SEC("license") = "Dual MIT/GPL";
