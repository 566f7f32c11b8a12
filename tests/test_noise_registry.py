"""The noise-kind contract (noise/kind.py): every kind module implements it, the
registry is what the builder asks, and a new kind needs only its own module."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import toy_noise_kind
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


def test_the_released_kinds_are_discovered_from_their_modules():
    assert set(noise.KINDS) == {"silence", "ambient", "babble", "speech_ambient"}
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
    shared = NoiseCondition(name="hum", kind="toy_hum", duration_s=2.0)
    each = NoiseCondition(name="hum2", kind="toy_hum", duration_s=2.0, sampling="per_entry")
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
