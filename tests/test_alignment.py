"""Each layer declares the alignment its objects have (min_align): the
contract checked here over every size from 1 to 4096 on every stack."""
import pytest

import alloclab as al
from alloclab import schema

from conftest import stacks


@pytest.mark.parametrize("spec", stacks())
def test_declared_alignment_holds_for_every_size(spec):
    with al.Allocator(spec) as a:
        align = a.min_align
        assert align >= 8 and align & (align - 1) == 0
        top = min(4096, a.max_size or 4096)
        offsets, live = set(), []
        for size in range(1, top + 1):
            for _ in range(2 if size <= 64 else 1):  # small classes: more than one slot
                try:
                    p = a.alloc(size)
                except al.AllocatorExhausted:
                    continue  # sizes a fixed-size cache does not serve
                assert p % align == 0, "%s: alloc(%d) = %#x is not %d-aligned" % (
                    spec, size, p, align)
                offsets.add(p % (2 * align))
                live.append(p)
        assert len(live) >= 8, "%s served %d allocations" % (spec, len(live))
        for p in live:
            a.free(p)
        a.drain()
        a.check()
        if align < 16 and a.policy.names[-1] != "null":
            # A declared alignment below 16 is one the stack really gives:
            # some object sits at an odd multiple of it.
            assert offsets != {0}


def test_caches_inherit_the_alignment_below():
    layers = schema.layers()
    assert layers["percpu"].min_align == 0
    assert al.Policy("percpu > buddy").min_align == layers["buddy"].min_align == 16
    assert al.Policy("percpu > slab").min_align == layers["slab"].min_align == 8
    assert al.Policy("bpf_ma > buddy").min_align == 8


def test_min_align_is_listed():
    assert all("min_align" in d for d in al.policies())
    assert schema.layers()["pages"].to_dict()["min_align"] == 4096
