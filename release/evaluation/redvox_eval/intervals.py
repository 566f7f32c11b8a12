"""Seeded percentile bootstrap intervals and Spearman's rho.

Resampling n labelled rows with replacement and counting classes is the same draw as
one multinomial(n, observed shares); drawing the counts directly gives the row
bootstrap's exact distribution without materialising 1000 x n indices, which keeps
30,000 rows fast.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

LEVEL = 95.0
_TAILS = ((100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2)


@dataclass(frozen=True)
class Bootstrap:
    seed: int = 0
    resamples: int = 1000

    def rng(self, cell: str) -> np.random.Generator:
        """One stream per table cell, so adding a model leaves other cells' intervals alone."""
        return np.random.default_rng([self.seed, zlib.crc32(cell.encode("utf-8"))])

    def share_intervals(self, counts: np.ndarray, cell: str) -> np.ndarray:
        """95% percentile interval (0-100) of each share counts[k] / sum(counts): shape (K, 2)."""
        counts = np.asarray(counts, dtype=np.int64)
        n = int(counts.sum())
        if n == 0:
            return np.full((len(counts), 2), np.nan)
        draws = self.rng(cell).multinomial(n, counts / n, size=self.resamples)
        return np.percentile(draws * (100.0 / n), _TAILS, axis=0).T

    def gap_intervals(
        self, hits_a: int, n_a: int, hits_b: int, n_b: int, cell: str
    ) -> tuple[list[float], list[float] | None]:
        """Intervals of b - a (points) and (b - a) / a (percent) for two independent shares,
        resampling each group on its own (a stratified bootstrap)."""
        rng = self.rng(cell)
        a = rng.binomial(n_a, hits_a / n_a, size=self.resamples) * (100.0 / n_a)
        b = rng.binomial(n_b, hits_b / n_b, size=self.resamples) * (100.0 / n_b)
        difference = np.percentile(b - a, _TAILS).tolist()
        if hits_a == 0:
            return difference, None
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = (b - a) / a * 100.0
        # A resample with no unsafe English rows has no relative gap: percentiles skip it.
        relative = relative[np.isfinite(relative)]
        return difference, np.percentile(relative, _TAILS).tolist()


def spearman(a: list[float], b: list[float]) -> tuple[float | None, float | None]:
    """Spearman's rho and its p-value; None when undefined (fewer than 3 pairs, or a
    run whose values are all equal)."""
    if len(a) < 3:
        return None, None
    from scipy import stats  # a second of import time, only when runs are compared

    rho, p = stats.spearmanr(a, b)
    if not np.isfinite(rho):
        return None, None
    return float(rho), float(p)
