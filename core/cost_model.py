"""t(n, L): the time of one verification forward with n draft nodes (plus the root) after L cached tokens.

Measured by core.timing on a small grid of context lengths L and node counts n; `CostModel` reads any
(n, L) off that grid (docs/AUTOMATIC_SETTINGS.md, "The cost of the context length"):

- inside the grid: bilinear, linear in n between measured sizes and linear in L between measured lengths;
- beyond the longest length: linear in L along the last two lengths' slope (attention over the prefix
  grows linearly with L), each size's slope at least the smaller sizes' (an extra node never gets cheaper
  with more context);
- below the shortest length: the shortest length's times;
- beyond the largest size: linear in n along the last segment's slope.

Measured times are noisy (a busy core slows one round), so the grid is first made monotone: a time is
lowered to the smallest time measured at any size and length at least as large (a smaller tree after a
shorter prefix never costs more). On a monotone grid every rule above is non-decreasing in n and in L,
which the sizer relies on: a larger tree or a longer context never looks cheaper. Pure: no torch.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def _ascending(values: Sequence[int]) -> bool:
    return list(values) == sorted(set(values))


def monotone_grid(seconds: Sequence[Sequence[float]]) -> tuple[tuple[float, ...], ...]:
    """grid[j][i] lowered to min over j' ≥ j, i' ≥ i of grid[j'][i']: non-decreasing along both axes."""
    rows = [list(map(float, row)) for row in seconds]
    for j in range(len(rows) - 1, -1, -1):
        for i in range(len(rows[j]) - 1, -1, -1):
            if i + 1 < len(rows[j]):
                rows[j][i] = min(rows[j][i], rows[j][i + 1])
            if j + 1 < len(rows):
                rows[j][i] = min(rows[j][i], rows[j + 1][i])
    return tuple(tuple(row) for row in rows)


DISTURBED = 2.0  # a measured grid whose disorder exceeds this was disturbed by other work (see disorder)


def disorder(seconds: Sequence[Sequence[float]]) -> float:
    """How far a measured grid is from monotone: the largest factor by which monotone_grid lowered a time (1.0 for a
    monotone grid). Measured on an idle machine it stays under about 1.35 (SmolLM2 and the test models, one and two
    torch threads); while another program took the cores a t(0) came out 8.6× a t(1) (the twenty-second newcomer
    pass), and the repaired grid then priced a 16-node tree at 10.7× a greedy step instead of about 2×."""
    mono = monotone_grid(seconds)
    return max(
        (float(t) / m for row, mono_row in zip(seconds, mono) for t, m in zip(row, mono_row) if m > 0), default=1.0
    )


def _segment(points: Sequence[int], x: float) -> tuple[int, float]:
    """(i, w): x lies between points[i] and points[i + 1] at weight w in [0, 1] (clamped at the ends)."""
    i = min(max(bisect.bisect_right(points, x) - 1, 0), len(points) - 2)
    w = (x - points[i]) / (points[i + 1] - points[i])
    return i, min(max(w, 0.0), 1.0)


@dataclass(frozen=True)
class CostModel:
    """t(n, L) in seconds; `seconds[j][i]` was measured with `sizes[i]` draft nodes after `lengths[j]` cached
    tokens. The stored grid is the monotone one (`monotone_grid` of what was given)."""

    sizes: tuple[int, ...]  # draft nodes, ascending from 0, at least two
    lengths: tuple[int, ...]  # cached tokens before the tree, ascending, at least one
    seconds: tuple[tuple[float, ...], ...]

    def __post_init__(self):
        sizes, lengths = tuple(int(s) for s in self.sizes), tuple(int(n) for n in self.lengths)
        if len(sizes) < 2 or not _ascending(sizes) or sizes[0] != 0:
            raise ValueError("a cost model needs ≥ 2 distinct ascending node counts starting at 0")
        if not lengths or not _ascending(lengths) or lengths[0] < 1:
            raise ValueError("a cost model needs ≥ 1 distinct ascending context lengths, each ≥ 1")
        if len(self.seconds) != len(lengths) or any(len(row) != len(sizes) for row in self.seconds):
            raise ValueError(
                f"a cost model needs one row of {len(sizes)} times per context length ({len(lengths)} rows)"
            )
        if any(not float(t) > 0 for row in self.seconds for t in row):  # also refuses NaN
            raise ValueError("a cost model's times must be positive")
        grid = monotone_grid(self.seconds)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "seconds", grid)
        # Slope in L beyond the longest length, per size, non-decreasing in n (see the module docstring).
        slopes, running = [], 0.0
        for i in range(len(sizes)):
            s = 0.0 if len(lengths) < 2 else (grid[-1][i] - grid[-2][i]) / (lengths[-1] - lengths[-2])
            running = max(running, s)
            slopes.append(running)
        object.__setattr__(self, "_length_slopes", tuple(slopes))

    def _column(self, i: int, length: float) -> float:
        """t(sizes[i], L): linear in L between measured lengths, extrapolated beyond the longest."""
        lengths, grid = self.lengths, self.seconds
        if length <= lengths[0]:
            return grid[0][i]
        if length >= lengths[-1]:  # one measured length: slope 0, the same times at every L
            return grid[-1][i] + self._length_slopes[i] * (length - lengths[-1])
        j, w = _segment(lengths, length)
        return grid[j][i] + w * (grid[j + 1][i] - grid[j][i])

    def _size_slope(self, length: float) -> float:
        """Seconds per node beyond the largest size at length L: the last segment's slope, never lower than
        at a shorter measured length (so t stays non-decreasing in L past the largest size)."""
        last, prev = len(self.sizes) - 1, len(self.sizes) - 2
        width = self.sizes[last] - self.sizes[prev]

        def slope(x: float) -> float:
            return (self._column(last, x) - self._column(prev, x)) / width

        return max([slope(length)] + [slope(x) for x in self.lengths if x <= length])

    def __call__(self, n: float, length: float) -> float:
        """t(n, L) in seconds (n < 0 reads as 0, L below the shortest length as the shortest)."""
        n, length = max(float(n), 0.0), float(length)
        sizes = self.sizes
        if n >= sizes[-1]:
            return self._column(len(sizes) - 1, length) + self._size_slope(length) * (n - sizes[-1])
        i, w = _segment(sizes, n)
        return self._column(i, length) + w * (self._column(i + 1, length) - self._column(i, length))

    def ratio(self, n: float, length: float) -> float:
        """t(n, L) / t(0, L): what n draft nodes cost in single-token steps at this context length."""
        return self(n, length) / self(0, length)

    def curve_at(self, length: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """(sizes, t(size, L) for each): the slice at one context length, for a sizer that reads t(n)."""
        return self.sizes, tuple(self(n, length) for n in self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sizes": list(self.sizes),
            "lengths": list(self.lengths),
            "seconds": [list(row) for row in self.seconds],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostModel:
        """From `to_dict`'s shape; ValueError, KeyError or TypeError when it is not one."""
        return cls(
            tuple(int(s) for s in data["sizes"]),
            tuple(int(n) for n in data["lengths"]),
            tuple(tuple(float(t) for t in row) for row in data["seconds"]),
        )
