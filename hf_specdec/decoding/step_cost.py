"""The step-cost model: what one target forward costs on this machine as a function of the tokens it verifies.

Drafting pays only where verifying n tokens costs little more than one, and that depends on the hardware: on a GPU
the curve is flat far past 8 tokens, on one CPU 8 tokens cost 1.1x one token and on another 2.7x. So the cost is
measured, never assumed: every speculative step records the seconds of its target forward against the rows and the
tokens it fed per row, and the adaptive budget (`budget.py`) reads the curve back. Points not measured yet are
filled in by the budget itself, which verifies those sizes in real steps first (nothing is run just to measure).
A point's cost is the median of its recent timings; the non-decreasing fit the budget reads weighs each median by
how many timings it has, and a single sequence times a size `SETTLED` times before that size can rule itself out.

One model per (target weights, device, dtype, torch threads, CPU model); loaded once per process, held by the budget
memory of each drafter decoding for that target (`BudgetMemory`, whose `save()` writes it) and saved as JSON under
`$HF_SPECDEC_CACHE` (default `~/.cache/hf_specdec`), so the next process starts from the curve already measured; a
missing, unreadable or damaged file, or one that cannot be written, only costs its measurements, with one warning
(`cost_cache.py`). `hf_specdec.cost_model(target)` returns it: print it to see the curve, `.reset()` to measure again.
"""

from __future__ import annotations

import os
import platform
import statistics
import threading
from pathlib import Path

import torch
from transformers import PreTrainedModel

from . import cost_cache

SAMPLES = 8  # recent timings kept per point; the median is the cost
SETTLED = 3  # timings before a size's cost is trusted to rule it out (one slow step must not, for good)
# fed tokens the budget measures first: powers of two, where a device's matrix tiles fill up and its cost steps (on
# the 2-core Xeon with AMX, 16 fed tokens cost 297 ms and 17 cost 421 ms); a size between two points is read off
# the line between them until steps at that size time it
GRID = (1, 2, 4, 8, 16, 32)
_MODELS: dict[str, StepCostModel] = {}


class StepCostModel:
    """Seconds of one target forward as a function of the rows in it and the tokens fed per row, measured here.

    Rows count on their own: on a CPU one row of 8 tokens costs far less than 8 rows of one token (every row reads
    its own KV cache), so a batch's curve is never guessed from a single sequence's.
    """

    def __init__(self, key: str, points: dict | None = None, path: Path | None = None) -> None:
        self.key = key
        self.points: dict[int, dict[int, list[float]]] = cost_cache.clean(points or {})[0]
        self.path = path
        self.pinned = False
        self.unsaved: str | None = None  # why the last `save()` could not write the cache file (None: it could)
        self._lock = threading.Lock()  # a save copies the points whole while other threads record

    def record(self, fed: int, seconds: float, rows: int = 1) -> None:
        """One measured forward over `rows` x `fed` tokens (ignored while the curve is pinned, and for a timing that
        is not a finite number of seconds above 0: a coarse timer's 0 must not make a forward free)."""
        if self.pinned or not cost_cache.valid_timing(seconds):
            return
        with self._lock:
            samples = self.points.setdefault(int(rows), {}).setdefault(int(fed), [])
            samples.append(float(seconds))
            del samples[:-SAMPLES]

    def measured(self, fed: int, rows: int = 1) -> bool:
        """Whether a point within a quarter of `fed` (at least one token) is measured for `rows` rows, or for a row
        count within a quarter of `rows` (`cost` scales it): close enough to estimate, so the budget does not spend
        real steps measuring every size at every load."""
        other = self._neighbour(rows)
        return self._near(rows, fed) or (other is not None and self._near(other, fed))

    def settled(self, fed: int, rows: int = 1) -> bool:
        """Whether the points within a quarter of `fed` for `rows` rows hold `SETTLED` timings together (or the
        curve is pinned): a median of one or two steps can be a stall, and a size judged dear is not verified again,
        so the budget measures it again first."""
        if self.pinned:
            return True
        near = self.points.get(int(rows), {})
        return sum(len(v) for n, v in near.items() if abs(n - fed) <= max(1.0, 0.25 * fed)) >= SETTLED

    def _near(self, rows: int, fed: int) -> bool:
        return any(abs(n - fed) <= max(1.0, 0.25 * fed) for n in self.points.get(int(rows), {}))

    def _neighbour(self, rows: int) -> int | None:
        """The other measured row count nearest `rows` within a quarter of it (ties: the larger), if any."""
        close = [r for r, fed in self.points.items() if fed and r != rows and abs(r - rows) <= 0.25 * rows]
        return min(close, key=lambda r: (abs(r - rows), -r)) if close else None

    def cost(self, fed: int, rows: int = 1) -> float | None:
        """Seconds for `rows` x `fed` tokens: from this row count's curve where it has a point near `fed`, else from
        the nearest row count within a quarter that has one, scaled by the ratio of rows (a loaded device pays per
        row), else this row count's curve extended; None before anything is measured for `rows` rows or near it.
        The curve read is made non-decreasing first (`monotone`): feeding more never costs less, and where the
        medians say otherwise it is timer noise, averaged out."""
        if not self._near(rows, fed):
            other = self._neighbour(rows)
            if other is not None and self._near(other, fed):
                return _on_curve(monotone(self.curve(other), self.weights(other)), fed) * rows / other
        return _on_curve(monotone(self.curve(rows), self.weights(rows)), fed)

    def estimate(self, fed: int, rows: int = 1) -> float | None:
        """`cost`, except where this row count has its one-token cost only: that cost times the curve's rise (fed vs
        one token) at the nearest row count measured at both (a lower bound on a loaded device, where the curve of
        more rows rises faster)."""
        if self.measured(fed, rows) or not self._near(rows, 1):
            return self.cost(fed, rows)
        others = [r for r in self.points if r != rows and self._near(r, fed) and self._near(r, 1)]
        if not others:
            return self.cost(fed, rows)
        near = min(others, key=lambda r: abs(r - rows))
        return self.cost(1, rows) * self.cost(fed, near) / self.cost(1, near)

    def weights(self, rows: int = 1) -> dict[int, int]:
        """{fed tokens per row: timings kept} for `rows` rows (how much each median of `curve` weighs)."""
        return {n: len(v) for n, v in self.points.get(int(rows), {}).items() if v}

    def curve(self, rows: int = 1) -> dict[int, float]:
        """{fed tokens per row: median seconds} of every point measured with `rows` rows."""
        return {n: statistics.median(v) for n, v in sorted(self.points.get(int(rows), {}).items()) if v}

    def pin(self, curve: dict[int, float], rows: int = 1) -> None:
        """Decide with `curve` ({fed tokens per row: seconds} for `rows` rows, e.g. measured on another machine)
        and stop measuring, until `reset()`. Not saved. ValueError for a cost that is not finite seconds above 0."""
        bad = {n: s for n, s in curve.items() if not cost_cache.valid_timing(s)}
        if bad:
            raise ValueError(f"pin() takes finite seconds above 0 per fed size; these are not: {bad}")
        self.points[int(rows)] = {int(n): [float(s)] for n, s in curve.items()}
        self.pinned = True

    def reset(self) -> None:
        """Forget every measurement (here and in the saved file) and unpin."""
        self.points.clear()
        self.pinned = False
        self.save()

    def save(self) -> bool:
        """Write this curve into the cache file (`path`, else `cache_path()` now); nothing while pinned or with the
        cache off. Never raises for the file: one that cannot be written keeps the curve in this process, with one
        warning per process (`unsaved` says why). Returns False only when a write failed."""
        path = self.path or cache_path()
        if path is None or self.pinned:
            return True
        with self._lock:
            points = {r: {n: list(v) for n, v in fed.items()} for r, fed in self.points.items()}
        self.unsaved = cost_cache.save(path, self.key, cost_cache.points_entry(points))
        return self.unsaved is None

    def __str__(self) -> str:
        if not self.points:
            return f"step-cost model {self.key}: nothing measured yet"
        lines = [f"step-cost model {self.key}", "  rows   fed tokens per row   ms per forward   x one token"]
        for rows in sorted(self.points):
            curve = self.curve(rows)
            one = curve.get(1)
            for n, seconds in curve.items():
                ratio = f"{seconds / one:10.2f}" if one else "         -"
                lines.append(f"  {rows:4d}   {n:18d}   {1000 * seconds:14.1f}   {ratio}")
        return "\n".join(lines)

    __repr__ = __str__


def model_key(target: PreTrainedModel) -> str:
    """What the curve depends on: the target's weights, device, dtype, torch threads and (on CPU) the CPU model."""
    name = getattr(target.config, "_name_or_path", "") or type(target).__name__
    params = sum(p.numel() for p in target.parameters())
    device = target.device
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_model()
    return f"{Path(name).name}|{params}|{device.type}|{target.dtype}|threads={torch.get_num_threads()}|{where}"


def monotone(curve: dict[int, float], weights: dict[int, int] | None = None) -> dict[int, float]:
    """The non-decreasing curve nearest `curve` in weighted least squares (isotonic regression by pooling adjacent
    violators): neighbouring sizes whose medians decrease get their mean, each weighted by its timings (`weights`,
    default 1 each), so one slow timing moves a pool less than a settled median."""
    pools: list[list] = []  # [weighted sum of seconds, weight, sizes] per pool, left to right
    for n, seconds in sorted(curve.items()):
        w = (weights or {}).get(n, 1)
        pools.append([seconds * w, w, [n]])
        while len(pools) > 1 and pools[-2][0] / pools[-2][1] > pools[-1][0] / pools[-1][1]:
            total, count, sizes = pools.pop()
            pools[-1][0] += total
            pools[-1][1] += count
            pools[-1][2] += sizes
    return {n: total / count for total, count, sizes in pools for n in sizes}


def _on_curve(curve: dict[int, float], fed: int) -> float | None:
    """The median at a measured point, linear between measured points, the last slope beyond them (never below the
    smallest point); None for an empty curve."""
    if not curve:
        return None
    ns = sorted(curve)
    if fed in curve:
        return curve[fed]
    below, above = [n for n in ns if n < fed], [n for n in ns if n > fed]
    if below and above:
        lo, hi = below[-1], above[0]
        return curve[lo] + (curve[hi] - curve[lo]) * (fed - lo) / (hi - lo)
    if above:  # below the smallest measured point: never dearer than it
        return curve[above[0]]
    if len(ns) == 1:
        return curve[ns[0]]
    lo, hi = ns[-2], ns[-1]
    return curve[hi] + max(0.0, (curve[hi] - curve[lo]) / (hi - lo)) * (fed - hi)


def cost_model(target: PreTrainedModel) -> StepCostModel:
    """The step-cost model of `target` on this machine (loaded from the saved file the first time)."""
    key = model_key(target)
    if key not in _MODELS:
        path = cache_path()
        _MODELS[key] = StepCostModel(key, cost_cache.load(path, key) if path is not None else None)
    return _MODELS[key]


def cache_path() -> Path | None:
    """Where curves are saved: $HF_SPECDEC_CACHE/step_costs.json (default ~/.cache/hf_specdec); "" = not saved."""
    root = os.environ.get("HF_SPECDEC_CACHE", str(Path.home() / ".cache" / "hf_specdec"))
    return Path(root) / cost_cache.COSTS_FILE if root else None


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")
    return name or platform.processor() or "cpu"


__all__ = ["GRID", "StepCostModel", "cache_path", "cost_model", "model_key", "monotone"]
