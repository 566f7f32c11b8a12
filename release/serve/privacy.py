"""Differential privacy of a job's result at the speaker level, and the per-user budget.

What is protected: the withheld rows. The public rows are public (anyone can run the model
on the public release), so a figure that mixes both is treated as the withheld part alone.

Unit of privacy: one speaker. Two builds are neighbours when every row of one withheld
speaker differs (the model answered differently on all of that speaker's clips, or the
speaker is replaced by another one). Each speaker is capped to SPEAKER_ROWS rows (the
first ones by entry key, chosen without looking at a label), so in one table, where every
row lands in exactly one cell, the class counts of all its cells together move by at
most 2 x cap in L1 (cap rows leave their classes, cap rows join others). The tables of a
result (overall, language, audio type, vulnerability type) repeat the same rows, so
they compose in sequence: the L1 sensitivity of everything a result releases is
2 x cap x tables. One discrete Laplace measurement of OpenDP over that whole vector, its
scale the smallest that OpenDP proves epsilon-DP at that sensitivity, covers the job.

That a speaker moves only their own rows' answers holds because the model answers each
withheld speaker's rows in a run of its own, given nothing else (runner.py, jobfiles.
partitions), and the public rows in a run before any withheld one: a model that saw every
withheld clip at once could move any row's answer, the exact public ones included, with
any speaker's audio. The budget below is spent when a result is released, after the
job's hold, so what a user sees of it never says when a model ended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.metadata import version

import numpy as np

MECHANISM = "discrete Laplace (OpenDP make_laplace on integer counts)"
UNIT = "speaker: all rows of one withheld speaker may change together"


@dataclass(frozen=True)
class Release:
    """The noise of one job: what was measured and what it cost."""

    noisy: list[int]  # the counts with noise, in the order they were given
    scale: float  # of the discrete Laplace noise on each count
    epsilon: float  # what OpenDP's privacy map gives for SENSITIVITY (<= the job's epsilon)
    sensitivity: int  # L1, over all the counts together


def sensitivity(speaker_rows: int, tables: int) -> int:
    """L1 distance of all released counts between neighbouring builds (module docstring)."""
    return 2 * speaker_rows * tables


def measure(counts: list[int], l1_sensitivity: int, epsilon: float) -> Release:
    """COUNTS with discrete Laplace noise making the release EPSILON-DP at L1_SENSITIVITY.
    Noise comes from OpenDP's own generator (the OS's), never from a seed: a seed the
    submitter could learn would let them subtract the noise."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    if not counts:
        return Release([], 0.0, 0.0, l1_sensitivity)
    if epsilon <= 0 or not math.isfinite(epsilon):
        raise ValueError(f"epsilon per job must be a positive number, got {epsilon}")
    space = dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int)
    scale = dp.binary_search_param(
        lambda s: dp.m.make_laplace(*space, scale=s), d_in=l1_sensitivity, d_out=epsilon
    )
    measurement = dp.m.make_laplace(*space, scale=scale)
    spent = float(measurement.map(l1_sensitivity))
    if spent > epsilon:  # binary_search_param promises this; never release above it
        raise ValueError(f"OpenDP gave epsilon {spent} over the job's {epsilon}")
    return Release([int(v) for v in measurement([int(c) for c in counts])], scale, spent,
                   l1_sensitivity)  # fmt: skip


def noise_sd(scale: float) -> float:
    """Standard deviation of discrete Laplace noise of SCALE (about sqrt(2) x scale)."""
    if scale <= 0:
        return 0.0
    q = math.exp(-1.0 / scale)
    return math.sqrt(2 * q) / (1 - q)


def bits_through_noise(rows: int, scale: float) -> float:
    """Mutual information (bits) between a count X drawn uniformly from 0..ROWS and X plus
    discrete Laplace noise of SCALE: what one released count can carry for a model that
    sets it at will. Without noise it is log2(ROWS + 1)."""
    if scale <= 0:
        return math.log2(rows + 1)
    q = math.exp(-1.0 / scale)
    reach = int(scale * 40) + 1  # the tail beyond carries < 2^-50 of the mass
    z = np.arange(-reach, reach + 1)
    noise = (1 - q) / (1 + q) * q ** np.abs(z)
    received = np.convolve(np.full(rows + 1, 1.0 / (rows + 1)), noise)
    received = received[received > 0]
    kept = noise[noise > 0]
    return float(-(received * np.log2(received)).sum() + (kept * np.log2(kept)).sum())


# --- the per-user budget ---------------------------------------------------------------


def pending_jobs(store, user: str) -> int:
    """Jobs of USER queued or running that have not spent yet: each may spend a job's
    epsilon when it is released."""
    return store.unspent_pending(user)


def budget_refusal(store, user: str, epsilon: float, budget: float) -> str | None:
    """Why USER may not submit another job (one line), None when the budget allows it.
    Queued and running jobs count as spent already, so a burst of submissions cannot
    overdraw the budget; the spending itself happens when a result is released, after
    the job's hold (Store.spend_epsilon, atomic), so what this says changes only when
    USER submits a job and when one of their jobs is released, never when a model ends."""
    spent, pending = store.epsilon_spent(user), pending_jobs(store, user)
    if spent + epsilon * (pending + 1) > budget + 1e-9:
        return (
            f"privacy budget: {user} has spent epsilon {spent:g} of {budget:g}"
            + (f" and {pending} job(s) pending at {epsilon:g} each" if pending else "")
            + f"; a job costs {epsilon:g}: ask the maintainers for more budget"
        )
    return None


def library() -> str:
    return f"opendp {version('opendp')}"
