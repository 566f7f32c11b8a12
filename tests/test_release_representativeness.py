"""Representativeness statistics against hand-computed tables, and the gate."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from scipy import stats

from redvox.builder.versions import RepresentativenessThresholds
from redvox.release.hub.representativeness import (
    assess,
    read_metadata,
    releasable,
    render_markdown,
    withheld,
    write_report,
)
from redvox.release.hub.statistics import chi_square, spearman


def test_chi_square_2x2_is_uncorrected_and_matches_the_hand_computation():
    # public a=10 b=20, other a=20 b=10: every expected count is 15, so
    # chi2 = 4 * (5^2 / 15) = 6.667, V = sqrt(6.667 / 60) = 1/3.
    result = chi_square({"public": {"a": 10, "b": 20}, "other": {"a": 20, "b": 10}})
    assert result.chi2 == pytest.approx(20 / 3)
    assert result.dof == 1
    assert result.cramers_v == pytest.approx(1 / 3)
    assert result.p_value == pytest.approx(stats.chi2.sf(20 / 3, 1))
    yates = stats.chi2_contingency([[10, 20], [20, 10]], correction=True)[0]
    assert yates == pytest.approx(5.4)  # what a corrected test would have reported
    assert result.chi2 != pytest.approx(yates)


def test_chi_square_2x3_matches_the_hand_computation():
    # rows 30 and 60, columns 30/30/30, n = 90; expected 10s and 20s.
    # cells: (10-10)^2/10 + (5-10)^2/10 + (15-10)^2/10 + (20-20)^2/20 + (25-20)^2/20 + (15-20)^2/20
    #      = 0 + 2.5 + 2.5 + 0 + 1.25 + 1.25 = 7.5; V = sqrt(7.5 / 90).
    result = chi_square({"public": {"x": 10, "y": 5, "z": 15}, "full": {"x": 20, "y": 25, "z": 15}})
    assert result.chi2 == pytest.approx(7.5)
    assert result.dof == 2
    assert result.cramers_v == pytest.approx(math.sqrt(7.5 / 90))
    assert result.categories == ("x", "y", "z")
    assert result.counts == ((10, 5, 15), (20, 25, 15))


def test_identical_distributions_give_v_zero_and_single_categories_are_homogeneous():
    same = chi_square({"public": {"a": 3, "b": 6}, "full": {"a": 6, "b": 12}})
    assert same.chi2 == pytest.approx(0) and same.cramers_v == pytest.approx(0)
    single = chi_square({"public": {"non_adversarial": 5}, "full": {"non_adversarial": 9}})
    assert (single.chi2, single.p_value, single.cramers_v) == (0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="has no rows"):
        chi_square({"public": {}, "full": {"a": 1}})


def test_spearman_matches_the_rank_formula_and_refuses_too_few_models():
    # ranks differ by d = -1, 1, -1, 1, 0: rho = 1 - 6 * 4 / (5 * (25 - 1)) = 0.8
    result = spearman(
        {"m1": 1, "m2": 2, "m3": 3, "m4": 4, "m5": 5}, {"m1": 2, "m2": 1, "m3": 4, "m4": 3, "m5": 5}
    )
    assert result.rho == pytest.approx(0.8)
    assert 0 < result.p_value < 1
    assert math.isnan(spearman({"a": 1, "b": 2}, {"a": 1, "b": 2}).rho)


def _rows(prefix: str, langs: dict[str, int], speakers: int = 4) -> list[dict]:
    rows = []
    for lang, n in langs.items():
        for i in range(n):
            rows.append(
                {
                    "entry_key": f"{prefix}/{lang}/{i}",
                    "user_id": f"{prefix}{i % speakers}",
                    "lang": lang,
                    "vulnerability_type": "stereotype" if i % 2 else "unsafe_request_crime",
                    "audio_type": ["speech", "silence", "noise_a", "noise_b"][i % 4],
                    "gender": "female" if i % 3 else "male",
                    "age_group": "25-34",
                    "native_speaker": True,
                }
            )
    return rows


THRESHOLDS = RepresentativenessThresholds()


def test_a_representative_subset_passes_the_gate():
    public = pd.DataFrame(_rows("p", {"en": 40, "de": 20, "it": 20}))
    rest = pd.DataFrame(_rows("w", {"en": 41, "de": 19, "it": 21}))
    report = assess("9.9.9", public, pd.concat([public, rest]), THRESHOLDS)
    assert report["passed"] and releasable(report)
    assert report["sizes"]["withheld_rows"] == 81
    assert report["composition"]["public_vs_withheld"]["lang"]["n"] == 161


def test_a_subset_built_to_fail_the_gate_is_blocked_unless_overridden(tmp_path):
    # All the German rows were withheld: the public language mix is far from the full one.
    public = pd.DataFrame(_rows("p", {"en": 60, "it": 20}))
    rest = pd.DataFrame(_rows("w", {"en": 20, "de": 60, "it": 20}))
    full = pd.concat([public, rest])
    report = assess("9.9.9", public, full, THRESHOLDS)
    failed = [c["name"] for c in report["checks"] if not c["passed"]]
    assert failed == ["composition/lang"]
    # by hand: public en 60 it 20 de 0 (80), full en 80 it 40 de 60 (180)
    lang = report["composition"]["public_vs_full"]["lang"]
    expected = stats.chi2_contingency([[0, 60, 20], [60, 80, 40]], correction=False)[0]
    assert lang["chi2"] == pytest.approx(expected)
    assert lang["cramers_v"] == pytest.approx(math.sqrt(expected / 260))
    assert not releasable(report)

    overridden = assess(
        "9.9.9", public, full, THRESHOLDS, override="  pilot release, German to follow "
    )
    assert releasable(overridden) and not overridden["passed"]
    assert overridden["override"] == "pilot release, German to follow"
    with pytest.raises(ValueError, match="written reason"):
        assess("9.9.9", public, full, THRESHOLDS, override="   ")

    json_path, md_path = write_report(overridden, tmp_path)
    assert json.loads(json_path.read_text())["checks"][0]["name"] == "composition/lang"
    markdown = md_path.read_text()
    assert "FAILED (overridden: pilot release, German to follow)" in markdown
    assert "without Yates' continuity correction" in render_markdown(report)


def test_demo_build_comparison_reads_the_real_shards(demo_release):
    public = read_metadata(demo_release["version_dir"] / "public")
    full = read_metadata(demo_release["version_dir"] / "full")
    rest = withheld(public, full)
    assert len(rest) == len(full) - len(public) > 0
    assert not set(rest["entry_key"]) & set(public["entry_key"])
    report = json.loads((demo_release["version_dir"] / "representativeness.json").read_text())
    assert report["sizes"]["public_rows"] == len(public)
    assert report["composition"]["public_vs_full"]["audio_type"]["n"] == len(public) + len(full)
    # The demo has a handful of made-up speakers: its public set's language and age-group
    # mixes drift past the composition limit, the gate fails on exactly those two checks,
    # and `run` overrides it with a stated reason instead of stopping.
    assert not report["passed"]
    checks = {c["name"]: c for c in report["checks"]}
    failed = sorted(name for name, c in checks.items() if not c["passed"])
    assert failed == ["composition/age_group", "composition/lang"]
    assert checks["composition/lang"]["value"] == pytest.approx(0.138, abs=0.005)
    assert checks["composition/age_group"]["value"] == pytest.approx(0.132, abs=0.005)
    assert all(checks[name]["value"] > checks[name]["limit"] == 0.10 for name in failed)
    assert all(c["value"] <= c["limit"] for c in checks.values() if c["passed"])
    assert report["override"].startswith("synthetic demo corpus")
    assert releasable(report)


def _judged(folder, model: str, safe: int, total: int, lang: str = "en") -> None:
    """`total` judged rows of one model: `safe` safe/fair and related, the rest unsafe."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(total):
        row = {
            "ID": i, "original_id": str(i), "user_id": "0" * 32, "lang": lang,
            "vulnerability_type": "stereotype", "audio_type": "speech", "modality": "speech",
            "output": "...", "relatedness": "yes",
            "safety": "safe/fair" if i < safe else "unsafe/unfair",
        }  # fmt: skip
        lines.append(json.dumps(row))
    (folder / f"{model}.jsonl").write_text("\n".join(lines) + "\n")


def test_judged_outputs_rho_and_label_v_match_the_hand_computation(tmp_path):
    from redvox.release.hub.judged import compare_judged_files

    public_safe = {"m1": 9, "m2": 7, "m3": 5, "m4": 3}  # of 10 rows each
    full_safe = {"m1": 17, "m2": 15, "m3": 9, "m4": 7}  # of 20 rows each: same ranking
    for model in public_safe:
        _judged(tmp_path / "public", model, public_safe[model], 10)
        _judged(tmp_path / "full", model, full_safe[model], 20)
    judged = compare_judged_files(tmp_path / "public", tmp_path / "full", THRESHOLDS)
    comparison = judged["comparisons"]["public_vs_full"]
    assert comparison["spearman"]["rho"] == pytest.approx(1.0)
    assert comparison["spearman"]["x"] == (90.0, 70.0, 50.0, 30.0)
    # pooled en safety labels: public safe 24 / unsafe 16, full safe 48 / unsafe 32: identical shares
    assert comparison["labels"]["en"]["safety"]["cramers_v"] == pytest.approx(0.0)
    checks = {c["name"]: c["passed"] for c in judged["checks"]}
    assert checks == {
        "judged/spearman_rho": True, "judged/spearman_p": True,
        "judged/en/safety": True, "judged/en/relatedness": True,
    }  # fmt: skip
    # The paper's headline table, from the public outputs: m2 has 7 safe of 10.
    reference = judged["reference_results"]
    assert reference["m2"] == {
        "unsafe": 30.0, "controversial": 0.0, "safe_by_accident": 0.0, "safe": 70.0, "rows": 10
    }  # fmt: skip
    from redvox.release.hub.card import reference_results_section

    section = reference_results_section({"judged": judged})
    assert "| m2 | 30.0 | 0.0 | 0.0 | 70.0 | 10 |" in section
    assert "Placeholder" in reference_results_section({"judged": None})


def test_judged_outputs_that_disagree_fail_the_gate(tmp_path):
    from redvox.release.hub.judged import compare_judged_files

    public_safe = {"m1": 2, "m2": 4, "m3": 6, "m4": 8, "m5": 9}  # reversed ranking
    full_safe = {"m1": 18, "m2": 16, "m3": 12, "m4": 8, "m5": 4}
    for model in public_safe:
        _judged(tmp_path / "public", model, public_safe[model], 10)
        _judged(tmp_path / "full", model, full_safe[model], 20)
    judged = compare_judged_files(tmp_path / "public", tmp_path / "full", THRESHOLDS)
    rho = judged["comparisons"]["public_vs_full"]["spearman"]["rho"]
    assert rho == pytest.approx(-1.0)
    v = judged["comparisons"]["public_vs_full"]["labels"]["en"]["safety"]
    expected = stats.chi2_contingency([[29, 21], [58, 42]], correction=False)[0]
    assert v["chi2"] == pytest.approx(expected)
    public = pd.DataFrame(_rows("p", {"en": 40}))
    report = assess("9.9.9", public, public, THRESHOLDS, judged=judged)
    assert not report["passed"]
    assert "judged/spearman_rho" in [c["name"] for c in report["checks"] if not c["passed"]]
    assert "Spearman's rho of per-model safe percentages over 5 models: -1.000" in render_markdown(
        report
    )
