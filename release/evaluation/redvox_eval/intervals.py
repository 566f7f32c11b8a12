"""Seeded cluster-bootstrap intervals, Wilson score intervals and Spearman's rho.

Rows of one speaker are not independent draws: they share a voice, and the rows of one
entry (item x speaker, under several audio types) share the text as well. A row bootstrap
would treat them as independent and give intervals that are too narrow, so every interval
here resamples *clusters* (speakers, see metrics.cluster_ids) with replacement.

Vectorised: a cell's rows are summarised as a (clusters x classes) count matrix M; one
resample is a multinomial(C, 1/C) vector of cluster weights w, and its class counts are
w @ M. All resamples at once are one (R x C) weight matrix times M, so 30,000 rows stay
fast.

The bootstrap cannot move a share that is 0% or 100% in every cluster (every resample
is 0% too), nor a cell with a single cluster. Each share interval is therefore the hull
(union) of the cluster-bootstrap percentile interval and the Wilson score interval at
the cell's row count: never zero-width, and at least as wide as the bootstrap where the
clusters differ. Differences of two shares take the hull with Newcombe's hybrid score
interval (built from the two Wilson intervals) in the same way.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

LEVEL = 95.0
_TAILS = ((100 - LEVEL) / 2, 100 - (100 - LEVEL) / 2)
Z = 1.959963984540054  # the normal quantile of 97.5 %


def wilson(hits: np.ndarray, n: int) -> np.ndarray:
    """Wilson score 95% intervals (0-100) of hits / n: shape (K, 2); NaN when n is 0."""
    hits = np.asarray(hits, dtype=float)
    if n <= 0:
        return np.full((hits.size, 2), np.nan)
    p = hits / n
    z2 = Z * Z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    low = np.clip(centre - half, 0.0, 1.0)
    high = np.clip(centre + half, 0.0, 1.0)
    # exact ends at 0 and n (rounding would leave 1e-17 instead of 0)
    low = np.where(hits <= 0, 0.0, low)
    high = np.where(hits >= n, 1.0, high)
    return np.stack([low, high], axis=-1).reshape(-1, 2) * 100.0


def newcombe(hits_a: int, n_a: int, hits_b: int, n_b: int) -> list[float]:
    """Newcombe's hybrid score interval (points) of b/n_b - a/n_a."""
    (la, ua), (lb, ub) = wilson(np.array([hits_a]), n_a)[0], wilson(np.array([hits_b]), n_b)[0]
    pa, pb = 100.0 * hits_a / n_a, 100.0 * hits_b / n_b
    d = pb - pa
    return [d - float(np.hypot(pb - lb, ua - pa)), d + float(np.hypot(ub - pb, pa - la))]


def _hull(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.stack([np.minimum(a[:, 0], b[:, 0]), np.maximum(a[:, 1], b[:, 1])], axis=1)


@dataclass(frozen=True)
class Bootstrap:
    seed: int = 0
    resamples: int = 1000

    def rng(self, cell: str) -> np.random.Generator:
        """One stream per table cell, so adding a model leaves other cells' intervals alone."""
        return np.random.default_rng([self.seed, zlib.crc32(cell.encode("utf-8"))])

    def cluster_weights(self, rng: np.random.Generator, clusters: int) -> np.ndarray:
        """(resamples x clusters) counts of how often each cluster is drawn."""
        return rng.multinomial(clusters, np.full(clusters, 1.0 / clusters), size=self.resamples)

    def share_intervals(self, counts: np.ndarray, cell: str) -> np.ndarray:
        """95% interval (0-100) of each class share: shape (K, 2).

        COUNTS is a (clusters x K) matrix of class counts per cluster; a flat (K,) vector
        counts every row as its own cluster (the row bootstrap, drawn as one multinomial).
        The interval is the hull of the percentile bootstrap and the Wilson interval.
        """
        counts = np.asarray(counts, dtype=np.int64)
        rng = self.rng(cell)
        if counts.ndim == 1:
            totals = counts
            n = int(totals.sum())
            if n == 0:
                return np.full((len(counts), 2), np.nan)
            draws = rng.multinomial(n, totals / n, size=self.resamples) * (100.0 / n)
        else:
            counts = counts[counts.sum(axis=1) > 0]
            totals = counts.sum(axis=0)
            n = int(totals.sum())
            if n == 0:
                return np.full((counts.shape[1], 2), np.nan)
            drawn = self.cluster_weights(rng, len(counts)) @ counts  # (R, K) class counts
            draws = drawn * (100.0 / drawn.sum(axis=1, keepdims=True))
        percentile = np.percentile(draws, _TAILS, axis=0).T
        return _hull(percentile, wilson(totals, n))

    def gap_intervals(
        self, a: np.ndarray, b: np.ndarray, cell: str
    ) -> tuple[list[float], list[float] | None]:
        """Intervals of b - a (points) and (b - a) / a (percent) for the shares of two groups.

        A and B are (clusters x 2) matrices of (hits, rows) per cluster; each group's
        clusters are resampled on their own (a stratified cluster bootstrap). The
        difference's interval is its hull with Newcombe's interval.
        """
        rng = self.rng(cell)
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)

        def shares(group: np.ndarray) -> np.ndarray:
            drawn = self.cluster_weights(rng, len(group)) @ group
            return drawn[:, 0] * 100.0 / drawn[:, 1]

        share_a, share_b = shares(a), shares(b)
        (hits_a, n_a), (hits_b, n_b) = a.sum(axis=0).astype(int), b.sum(axis=0).astype(int)
        boot = np.percentile(share_b - share_a, _TAILS).tolist()
        score = newcombe(hits_a, n_a, hits_b, n_b)
        difference = [min(boot[0], score[0]), max(boot[1], score[1])]
        if hits_a == 0:
            return difference, None
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = (share_b - share_a) / share_a * 100.0
        # A resample with no unsafe English rows has no relative gap: percentiles skip it.
        relative = relative[np.isfinite(relative)]
        if not len(relative):
            return difference, None
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
