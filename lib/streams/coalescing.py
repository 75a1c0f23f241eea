"""Coalescing windows: at most one firing per key per window, the window growing while the key
stays busy.

The first change of a quiet key fires at once. Later changes within its window are gathered
into one firing at the window's end. A key that fired within the last two windows is *busy*:
its next window is twice as long, up to ``max_s``; once it has been quiet for two windows it is
back to ``base_s``. A lone change waits for nothing, and a key that changes continuously fires
``1 / max_s`` times a second however many changes it has.

Used twice along the change path: by the detector, per stream-log channel, before it publishes
an advance (a busy tenant costs every process that follows it a few messages a second, not one
per round), and by each process's listener, per audience key, before it wakes the streams
(a busy tenant's streams read a few times a second, not forty).
"""

from __future__ import annotations

from collections.abc import Hashable


class CoalescingWindows:
    def __init__(self, base_s: float, max_s: float) -> None:
        self.base_s, self.max_s = base_s, max_s
        self._fired: dict[Hashable, tuple[float, float]] = {}  # key → its last firing, and its window then
        self._next_window: dict[Hashable, float] = {}

    def fire_at(self, key: Hashable, now: float) -> float:
        """When ``key``, changed at ``now``, fires (call once per firing, then ``fired``)."""
        if len(self._fired) > 4096:  # only keys fired within the longest window matter
            self._fired = {k: fired for k, fired in self._fired.items() if now - fired[0] < 2 * self.max_s}
        last, window = self._fired.get(key, (now - 4 * self.max_s, self.base_s))
        window = min(window * 2, self.max_s) if now - last < 2 * window else self.base_s
        self._next_window[key] = window
        return max(now, last + window)

    def fired(self, key: Hashable, now: float) -> None:
        self._fired[key] = (now, self._next_window.pop(key, self.base_s))
