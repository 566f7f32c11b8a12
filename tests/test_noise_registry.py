"""The noise-kind contract (noise/kind.py): every kind module implements it, the
registry is what the builder asks, and a new kind needs only its own module."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import toy_noise_kind
from test_noise_contract import CHECKS, check_bounds, check_determinism
from test_noise_kinds import make_bank

from redvox import noise
from redvox.builder.cache import BuildCache
from redvox.builder.clips import ClipRenderer
from redvox.builder.variants import VariantError, load_condition
from redvox.builder.versions import VERSIONS, BuildConfig
from redvox.noise.kind import NoiseKindModule
from redvox.schemas import NoiseCondition
from redvox.sources.audio import flac_samples

SEED = 20260601


def declared_kinds() -> set[str]:
    """The KIND of every module file of the package, read from its source."""
    kinds = set()
    for path in Path(noise.__file__).parent.glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "KIND" for t in node.targets
            ):
                kinds.add(ast.literal_eval(node.value))
    return kinds


def test_the_released_kinds_are_discovered_from_their_modules():
    assert set(noise.KINDS) == declared_kinds()
    assert {c.kind for v in VERSIONS.values() for c in v.config.conditions} <= set(noise.KINDS)
    assert all(module.__name__ == f"redvox.noise.{kind}" for kind, module in noise.KINDS.items())


def test_a_kind_file_in_the_package_is_registered_without_other_edits(tmp_path, monkeypatch):
    """Adding a kind is adding its module: the package registers every module with a KIND."""
    shutil.copy(Path(toy_noise_kind.__file__), tmp_path / "toy_hum.py")
    monkeypatch.setattr(noise, "KINDS", dict(noise.KINDS))
    monkeypatch.setattr(noise, "__path__", [*noise.__path__, str(tmp_path)])
    try:
        noise._register_package_kinds()
        assert noise.KINDS["toy_hum"].__name__ == "redvox.noise.toy_hum"
        assert not noise.mixes_speech(NoiseCondition(name="hum", kind="toy_hum", duration_s=2.0))
    finally:
        sys.modules.pop("redvox.noise.toy_hum", None)


def test_an_unknown_kind_is_refused_wherever_a_condition_is_used(tmp_path):
    condition = NoiseCondition(name="hum", kind="toy_hum")  # the schema names no kinds
    with pytest.raises(
        noise.ConditionError, match="unknown noise condition kind 'toy_hum'.*babble"
    ):
        noise.check_condition(condition)
    config = VERSIONS["1.1.0"].config.model_dump()
    config["conditions"] = [*config["conditions"], condition.model_dump()]
    with pytest.raises(ValueError, match="unknown noise condition kind 'toy_hum'"):
        BuildConfig.model_validate(config)
    path = tmp_path / "hum.yaml"
    path.write_text("name: hum\nkind: toy_hum\n")
    with pytest.raises(VariantError, match="hum.yaml: not a usable noise condition: unknown"):
        load_condition(path)


@pytest.mark.parametrize("kind", sorted(noise.KINDS))
def test_every_kind_module_implements_the_contract(kind):
    module = noise.KINDS[kind]
    assert isinstance(module, NoiseKindModule)
    assert module.KIND == kind
    assert isinstance(module.MIXES_SPEECH, bool)
    assert all(isinstance(bound, noise.Bound) for bound in module.BOUNDS.values())


def test_a_registered_kind_gets_the_kind_tests():
    """Registering the toy kind (a pytest plugin, as another package would) is all it
    takes for tests/test_noise_contract.py to run every kind test on it."""
    tests = Path(__file__).parent
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "register_toy_kind", "-p", "no:cacheprovider",
         str(tests / "test_noise_contract.py"), "-k", "toy_hum"],
        capture_output=True, text=True, cwd=tests.parent, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tests)},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert re.search(rf"\b{len(CHECKS) + 1} passed", run.stdout), run.stdout[-2000:]


def mutant_toy(**functions) -> types.ModuleType:
    mutant = types.ModuleType("mutant_toy")
    mutant.__dict__.update({k: v for k, v in vars(toy_noise_kind).items() if k.isupper()})
    mutant.__dict__.update(
        check_condition=toy_noise_kind.check_condition,
        sample_params=toy_noise_kind.sample_params,
        render=toy_noise_kind.render,
    )
    mutant.__dict__.update(functions)
    return mutant


def test_the_kind_tests_fail_a_kind_that_breaks_its_contract(tmp_path, monkeypatch):
    bank = make_bank(tmp_path / "bank")

    def noisy_render(params, bank, *, speech=None):  # draws from global state
        return (toy_noise_kind.render(params, bank) * np.random.uniform(0.5, 1.0)).astype(
            np.float32
        )

    unbounded = mutant_toy(check_condition=lambda condition: {"level_dbfs": (-30.0, -20.0)})
    for mutant, check in ((mutant_toy(render=noisy_render), check_determinism),
                          (unbounded, lambda module, bank: check_bounds(module))):  # fmt: skip
        monkeypatch.setattr(noise, "KINDS", {**noise.KINDS, "toy_hum": mutant})
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            check(mutant, bank)


def test_mixes_speech_and_one_clip_come_from_the_kind():
    mixed = NoiseCondition(name="mixed", kind="speech_ambient", params={"snr_db": [5, 10]})
    clip = NoiseCondition(name="quiet", kind="silence")
    per_entry = NoiseCondition(name="quiet2", kind="silence", sampling="per_entry")
    assert noise.mixes_speech(mixed) and not noise.mixes_speech(clip)
    assert mixed.is_shared and not noise.renders_one_clip(mixed)
    assert noise.renders_one_clip(clip)
    assert not per_entry.is_shared and not noise.renders_one_clip(per_entry)


def test_a_module_without_the_contract_is_refused(monkeypatch):
    monkeypatch.setattr(noise, "KINDS", dict(noise.KINDS))
    with pytest.raises(TypeError):
        noise.register_kind(np)


def test_a_toy_kind_builds_clips_through_the_builder_path(tmp_path, monkeypatch):
    monkeypatch.setattr(noise, "KINDS", dict(noise.KINDS))
    noise.register_kind(toy_noise_kind)
    hum = {"level_dbfs": [-30, -20]}
    shared = NoiseCondition(name="hum", kind="toy_hum", duration_s=2.0, params=hum)
    each = NoiseCondition(
        name="hum2", kind="toy_hum", duration_s=2.0, params=hum, sampling="per_entry"
    )
    noise.check_condition(shared)
    assert noise.renders_one_clip(shared) and not noise.mixes_speech(shared)

    bank = make_bank(tmp_path / "bank")
    cache = BuildCache(tmp_path / "cache")
    renderer = ClipRenderer(bank, cache, SEED)
    ref, params = renderer.shared(shared)
    samples = flac_samples(cache.blob(ref.digest))
    assert ref.duration_s == pytest.approx(2.0) and samples.size == 32_000
    assert '"kind":"toy_hum"' in params
    a, params_a = renderer.per_entry(each, "entry-a")
    b, params_b = renderer.per_entry(each, "entry-b")
    assert params_a != params_b, "per-entry draws come from the entry key"
    assert renderer.per_entry(each, "entry-a") == (a, params_a), "deterministic"
    assert np.abs(flac_samples(cache.blob(b.digest))).max() > 0
