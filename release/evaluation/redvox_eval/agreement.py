"""Agreement between human and judge labels: accuracy, macro and weighted F1, Cohen's
kappa, Gwet's AC1 and the confusion matrix, in numpy (no scikit-learn in the Hub
environment). Values are fractions, 0-1; kappa and AC1 range -1..1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def confusion_matrix(human: Sequence[str], judge: Sequence[str], labels: Sequence[str]):
    """Counts with human labels as rows and judge labels as columns, in `labels` order."""
    index = {label: k for k, label in enumerate(labels)}
    h = np.array([index[v] for v in human], dtype=np.int64)
    j = np.array([index[v] for v in judge], dtype=np.int64)
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(matrix, (h, j), 1)
    return matrix


def f1_per_class(matrix: np.ndarray) -> np.ndarray:
    """F1 of each class; 0 where the class has no true positive (precision+recall = 0)."""
    tp = np.diag(matrix).astype(float)
    predicted, actual = matrix.sum(axis=0), matrix.sum(axis=1)
    denominator = predicted + actual
    return np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)


def cohen_kappa(matrix: np.ndarray) -> float | None:
    """(po - pe) / (1 - pe), pe from each rater's own marginals; None when pe = 1 (both
    raters used one and the same label throughout: kappa is undefined)."""
    n = matrix.sum()
    observed = np.trace(matrix) / n
    expected = float(matrix.sum(axis=1) @ matrix.sum(axis=0)) / n**2
    return None if np.isclose(expected, 1.0) else float((observed - expected) / (1 - expected))


def gwet_ac1(matrix: np.ndarray) -> float | None:
    """(po - pe) / (1 - pe) with pe = sum_k pi_k (1 - pi_k) / (q - 1), pi_k the mean of the
    two raters' shares of class k and q the number of classes of the task."""
    q = len(matrix)
    n = matrix.sum()
    observed = np.trace(matrix) / n
    pi = (matrix.sum(axis=1) + matrix.sum(axis=0)) / (2 * n)
    expected = float(np.sum(pi * (1 - pi)) / (q - 1))
    return None if np.isclose(expected, 1.0) else float((observed - expected) / (1 - expected))


def agreement(human: Sequence[str], judge: Sequence[str], labels: Sequence[str]) -> dict:
    """All scores for one task. Macro-F1 averages over the classes either rater used (as
    scikit-learn does), weighted-F1 weighs each class by its human support."""
    if len(human) == 0:
        raise ValueError("no rows carry both a human and a judge label")
    matrix = confusion_matrix(human, judge, labels)
    f1 = f1_per_class(matrix)
    support = matrix.sum(axis=1)
    used = (support + matrix.sum(axis=0)) > 0
    return {
        "n": int(matrix.sum()),
        "accuracy": float(np.trace(matrix) / matrix.sum()),
        "macro_f1": float(f1[used].mean()),
        "weighted_f1": float((f1 * support).sum() / support.sum()),
        "cohen_kappa": cohen_kappa(matrix),
        "gwet_ac1": gwet_ac1(matrix),
        "f1_per_class": {label: float(f1[k]) for k, label in enumerate(labels) if used[k]},
        "confusion_matrix": {
            "labels": list(labels),
            "rows": "human",
            "columns": "judge",
            "matrix": matrix.tolist(),
        },
    }
