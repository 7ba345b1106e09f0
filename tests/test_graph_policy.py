"""Which captured graphs a CapturedStep keeps (layers.graph.evict): the most recently used, at
most max_graphs of them and max_bytes of pool memory in all, never fewer than the newest one."""
from collections import OrderedDict

from layers.graph import evict


def _graphs(*sizes):
    return OrderedDict((f"shape{k}", size) for k, size in enumerate(sizes))


def test_the_count_limit_drops_the_least_recently_used():
    g = _graphs(1, 1, 1, 1)
    evict(g, 2, None, lambda size: size)
    assert list(g) == ["shape2", "shape3"]


def test_the_byte_budget_drops_old_graphs_until_the_rest_fit():
    g = _graphs(4, 3, 2, 5)                  # 14 bytes in all
    evict(g, 8, 8, lambda size: size)
    assert list(g) == ["shape2", "shape3"]   # 2 + 5 = 7 <= 8; 3 + 2 + 5 = 10 was not


def test_the_newest_graph_stays_even_over_budget():
    g = _graphs(4, 9)
    evict(g, 8, 5, lambda size: size)
    assert list(g) == ["shape1"]


def test_within_both_limits_nothing_is_dropped():
    g = _graphs(1, 2, 3)
    evict(g, 3, 6, lambda size: size)
    assert list(g) == ["shape0", "shape1", "shape2"]
