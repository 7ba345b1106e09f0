"""A bounded least-recently-used cache: plans, descriptors and derived set-ups are memoised per
problem, and variable-length workloads (Tacotron's batches) must not grow them without end."""
from collections import OrderedDict


class LRU:
    """At most `size` entries; a hit moves its entry to the back, an insert past `size` drops the
    front one. Dropping an entry only drops this cache's reference: a caller (or a captured graph)
    still holding the value keeps it alive."""

    def __init__(self, size):
        self.size = int(size)
        self._entries = OrderedDict()

    def get(self, key, make):
        """The value for key, made by make() on a miss."""
        entries = self._entries
        value = entries.get(key)
        if value is None:
            value = entries[key] = make()
            while len(entries) > max(self.size, 0):      # (a size lowered since: down to it)
                entries.popitem(last=False)
        else:
            entries.move_to_end(key)
        return value

    def peek(self, key):
        """The value for key (moved to the back), or None: a lookup that makes nothing."""
        value = self._entries.get(key)
        if value is not None:
            try:
                self._entries.move_to_end(key)
            except KeyError:        # (dropped by another thread meanwhile: still a hit)
                pass
        return value

    def put(self, key, value):
        entries = self._entries
        entries[key] = value
        entries.move_to_end(key)        # (a key put again is the most recent too)
        while len(entries) > max(self.size, 0):
            entries.popitem(last=False)

    def __len__(self):
        return len(self._entries)

    def values(self):
        return list(self._entries.values())

    def items(self):
        return list(self._entries.items())

    def __contains__(self, key):
        return key in self._entries

    def clear(self):
        self._entries.clear()
