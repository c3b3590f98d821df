"""Statistical bounds for distribution tests, each with its false-failure probability.

`assert_distribution(counts, probs, delta)` fails a correct sampler with probability at most `delta`: each cell's
empirical frequency is checked with Bernstein's inequality for a Bernoulli mean,
P(|f - p| >= t) <= 2 exp(-n t^2 / (2 p (1 - p) + 2 t / 3)), at level delta / cells (union bound).
"""

from __future__ import annotations

import math

import torch


def bernstein_radius(p: torch.Tensor, n: int, delta: float) -> torch.Tensor:
    """t such that 2 exp(-n t^2 / (2 v + 2 t / 3)) = delta for v = p (1 - p)."""
    log_term = math.log(2.0 / delta)
    v = p * (1 - p)
    return (log_term / 3 + torch.sqrt(log_term**2 / 9 + 2 * n * v * log_term)) / n


def distribution_excess(counts: torch.Tensor, probs: torch.Tensor, delta: float) -> float:
    """max over cells of |f - p| / radius; <= 1 means consistent with `probs` at false-failure level `delta`."""
    counts, probs = counts.double().flatten(), probs.double().flatten()
    n = int(counts.sum())
    radius = bernstein_radius(probs, n, delta / counts.numel())
    return float(((counts / n - probs).abs() / radius).max())


def assert_distribution(counts: torch.Tensor, probs: torch.Tensor, delta: float = 1e-6) -> None:
    excess = distribution_excess(counts, probs, delta)
    assert excess <= 1.0, f"empirical distribution off by {excess:.2f}x the bound (false-failure prob {delta})"


def dkw_uniform_excess(samples: torch.Tensor, delta: float) -> float:
    """sup |F_n - U(0,1)| over the DKW radius sqrt(ln(2/delta) / (2n)) (Massart); <= 1 is consistent."""
    x = samples.double().sort().values
    n = x.numel()
    grid = torch.arange(1, n + 1, dtype=torch.float64) / n
    sup = torch.maximum((grid - x).abs(), (grid - 1.0 / n - x).abs()).max()
    return float(sup / math.sqrt(math.log(2.0 / delta) / (2 * n)))
