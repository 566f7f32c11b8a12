"""The two statistics of the representativeness gate, on plain tables, and the
descriptive statistics of a built set that its dataset card states.

Chi-square test of homogeneity on a groups x categories table, WITHOUT Yates'
continuity correction (the paper's figures are uncorrected, and the
correction only exists for 2 x 2 tables anyway), with Cramér's
V = sqrt(chi2 / (n * (min(r, c) - 1))) as the effect size; Spearman's rho with
its two-sided p-value. `set_statistics`: hours, rows, speakers and rows without a
transcript per language and audio type, from the rows' columns. Pure functions: no
files, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from redvox.schemas.vocab import SPEECH_AUDIO_TYPE, SPEECH_MODALITY


@dataclass(frozen=True)
class ChiSquare:
    """A contingency table and its test. `counts[g][c]` is the count of category
    `categories[c]` in group `groups[g]`."""

    groups: tuple[str, ...]
    categories: tuple[str, ...]
    counts: tuple[tuple[int, ...], ...]
    chi2: float
    dof: int
    p_value: float
    cramers_v: float
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def contingency(groups: Mapping[str, Mapping[str, int]]) -> tuple[tuple, tuple, np.ndarray]:
    """Groups -> (group names, sorted categories seen in any group, counts array)."""
    names = tuple(groups)
    categories = tuple(sorted({str(c) for counts in groups.values() for c in counts}))
    table = np.array(
        [[int(groups[g].get(c, 0)) for c in categories] for g in names], dtype=np.int64
    )
    return names, categories, table


def chi_square(groups: Mapping[str, Mapping[str, int]]) -> ChiSquare:
    """Chi-square test of homogeneity of the category distributions of `groups`.

    Categories absent from every group carry no information and are dropped; a
    table left with one category (or one group) is homogeneous by definition:
    chi2 = 0, p = 1, V = 0.
    """
    names, categories, table = contingency(groups)
    if len(names) < 2:
        raise ValueError(f"a comparison needs two groups, got {list(names)}")
    empty = [g for g, row in zip(names, table, strict=True) if row.sum() == 0]
    if empty:
        raise ValueError(f"group {empty[0]!r} has no rows: nothing to compare it with")
    keep = table.sum(axis=0) > 0
    categories = tuple(c for c, k in zip(categories, keep, strict=True) if k)
    table = table[:, keep]
    n = int(table.sum())
    rows, cols = table.shape
    if cols < 2:
        return ChiSquare(names, categories, _as_tuples(table), 0.0, 0, 1.0, 0.0, n)
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / n
    chi2 = float(((table - expected) ** 2 / expected).sum())
    dof = (rows - 1) * (cols - 1)
    p_value = float(stats.chi2.sf(chi2, dof))
    cramers_v = math.sqrt(chi2 / (n * (min(rows, cols) - 1)))
    return ChiSquare(names, categories, _as_tuples(table), chi2, dof, p_value, cramers_v, n)


def _as_tuples(table: np.ndarray) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(x) for x in row) for row in table)


@dataclass(frozen=True)
class Correlation:
    """Spearman's rho between two paired lists (e.g. per-model safe percentages)."""

    labels: tuple[str, ...]
    x: tuple[float, ...]
    y: tuple[float, ...]
    rho: float
    p_value: float

    def to_dict(self) -> dict:
        return asdict(self)


def spearman(x: Mapping[str, float], y: Mapping[str, float]) -> Correlation:
    """Spearman's rho over the labels present in both mappings.

    Fewer than three shared labels, or a constant side, give rho = p = NaN:
    no rank correlation can be estimated, and a gate reading NaN fails.
    """
    labels = tuple(sorted(set(x) & set(y)))
    xs = tuple(float(x[k]) for k in labels)
    ys = tuple(float(y[k]) for k in labels)
    if len(labels) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return Correlation(labels, xs, ys, math.nan, math.nan)
    result = stats.spearmanr(xs, ys)
    return Correlation(labels, xs, ys, float(result.statistic), float(result.pvalue))


def counts_of(values: Sequence) -> dict[str, int]:
    """Category -> count, with categories as strings (booleans and None included)."""
    out: dict[str, int] = {}
    for v in values:
        key = str(v)
        out[key] = out.get(key, 0) + 1
    return out


# --- descriptive statistics of a built set (the dataset card's "Statistics") ---

# The columns set_statistics reads.
STAT_COLUMNS = (
    "lang", "audio_type", "modality", "user_id", "duration_s", "transcript", "source", "original_id",
)  # fmt: skip


@dataclass(frozen=True)
class GroupStats:
    """One language (or one language and audio type): its rows, their audio, speakers."""

    rows: int
    seconds: float  # sum of the rows' duration_s (a shared clip counts once per row)
    speakers: int  # distinct user_id
    spoken_rows: int  # modality speech: the recording, alone or mixed
    spoken_without_transcript: int  # spoken rows whose transcript is null
    recordings: int  # distinct (language, source, item, speaker): the contributions
    recordings_without_speech_row: int  # whose recording was refused: text rows only

    @property
    def hours(self) -> float:
        return self.seconds / 3600


@dataclass(frozen=True)
class SetStatistics:
    """`by_lang[lang]` and `by_type[lang][audio_type]`, and `total` over every row."""

    total: GroupStats
    by_lang: dict[str, GroupStats]
    by_type: dict[str, dict[str, GroupStats]]


def _recording(row: Mapping) -> tuple:
    """One contribution: a speaker's take of one item in one language."""
    return (row["lang"], row["source"], row["original_id"], row["user_id"])


def _group(rows: Sequence[Mapping]) -> GroupStats:
    spoken = [r for r in rows if r["modality"] == SPEECH_MODALITY]
    recordings = {_recording(r) for r in rows}
    heard = {_recording(r) for r in rows if r["audio_type"] == SPEECH_AUDIO_TYPE}
    return GroupStats(
        rows=len(rows),
        seconds=math.fsum(float(r["duration_s"]) for r in rows),
        speakers=len({r["user_id"] for r in rows}),
        spoken_rows=len(spoken),
        spoken_without_transcript=sum(1 for r in spoken if r["transcript"] is None),
        recordings=len(recordings),
        recordings_without_speech_row=len(recordings - heard),
    )


def set_statistics(columns: Mapping[str, Sequence]) -> SetStatistics:
    """The statistics of the rows given as columns (`STAT_COLUMNS`, of equal lengths)."""
    rows = [
        dict(zip(STAT_COLUMNS, values, strict=True))
        for values in zip(*(columns[c] for c in STAT_COLUMNS), strict=True)
    ]
    by_lang: dict[str, list[Mapping]] = {}
    by_type: dict[str, dict[str, list[Mapping]]] = {}
    for row in rows:
        by_lang.setdefault(row["lang"], []).append(row)
        by_type.setdefault(row["lang"], {}).setdefault(row["audio_type"], []).append(row)
    return SetStatistics(
        total=_group(rows),
        by_lang={lang: _group(group) for lang, group in by_lang.items()},
        by_type={
            lang: {audio: _group(group) for audio, group in types.items()}
            for lang, types in by_type.items()
        },
    )
