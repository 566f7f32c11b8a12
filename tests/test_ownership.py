"""One recording, one participant: a voice filed under another participant never
reaches a set, whether by path, link or a re-encoded copy of the same audio."""

from __future__ import annotations

import base64
import csv
import io
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from audio_edits import IN_SCOPE, mislabel
from test_audio_limits import recording
from test_sources_contributions import corpus, row

from redvox.builder.cache import BuildCache, digest_of
from redvox.builder.fingerprint import FASTER, FINGERPRINT_FORMAT, Fingerprint
from redvox.builder.ownership import fingerprint, matching_pairs
from redvox.builder.pipeline import BuildOptions, build_version
from redvox.builder.pseudonym import KEY_ENV, pseudonymize
from redvox.builder.recordings import DECODE_FORMAT, DecodeFact, normalise_recordings
from redvox.builder.versions import VERSIONS, VadParams
from redvox.schemas import DEMO_CONFIG, InputConfig
from redvox.schemas.config import AudioLimits
from redvox.schemas.layout import sha256_file
from redvox.sources.audio import decode_audio
from redvox.sources.contributions import read_contributions

DEMO_AUDIO = DEMO_CONFIG.parent / "audio"


def reencoded(path: Path, fmt: str, subtype: str, gain: float = 0.7) -> bytes:
    """The recording at `path` as another format, quieter: other bytes, same voice."""
    samples, rate = sf.read(path, dtype="float32")
    buffer = io.BytesIO()
    sf.write(buffer, samples * gain, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def samples_of(data: bytes) -> np.ndarray:
    samples, _ = sf.read(io.BytesIO(data), dtype="float32")
    return samples


# --- file identity (the reader) ------------------------------------------------------


def problems_by_line(result) -> dict[int, str]:
    return {p.row: p.message for p in result.problems if p.field == "audio_file"}


def test_a_symlink_inside_the_audio_folder_to_a_file_outside_is_refused(tmp_path):
    path, audio = corpus(tmp_path, [row(audio="p01/link.wav")])
    (audio / "p01" / "link.wav").symlink_to(tmp_path / "secret.wav")
    result = read_contributions(path, audio, participant_keys={"p01", "p02"})
    assert result.records == []
    assert "leads outside the audio folder" in problems_by_line(result)[2]


def test_one_file_under_two_participants_refuses_every_row_using_it(tmp_path):
    rows = [
        row(key="p01", audio="p01/a.wav"),
        row(key="p02", audio="p02/link.wav", lang="de"),  # a link to p01's file
        row(key="p02", audio="p02/hard.wav", lang="fr"),  # a hard link to it
        row(key="p02", audio="p02/a.wav", lang="it"),  # p02's own recording
    ]
    path, audio = corpus(tmp_path, rows)
    (audio / "p02" / "link.wav").symlink_to(audio / "p01" / "a.wav")
    os.link(audio / "p01" / "a.wav", audio / "p02" / "hard.wav")
    result = read_contributions(path, audio, participant_keys={"p01", "p02"})
    assert [c.audio_file for c in result.records] == ["p02/a.wav"]
    found = problems_by_line(result)
    assert set(found) == {2, 3, 4}
    assert "another participant on line(s) 3, 4" in found[2]
    assert "another participant on line(s) 2" in found[3]


def test_the_same_file_twice_for_one_participant_is_no_ownership_problem(tmp_path):
    rows = [row(key="p01", audio="p01/a.wav"), row(key="p01", audio="p01/a.wav", lang="de")]
    path, audio = corpus(tmp_path, rows)
    result = read_contributions(path, audio, participant_keys={"p01", "p02"})
    assert len(result.records) == 2


def test_a_windows_path_is_explained(tmp_path):
    path, audio = corpus(tmp_path, [row(audio="p01\\a.wav")])
    result = read_contributions(path, audio, participant_keys={"p01", "p02"})
    assert "backslashes (a Windows path)" in problems_by_line(result)[2]


# --- content identity (the fingerprint) ----------------------------------------------


def same_audio(a: np.ndarray, b: np.ndarray) -> bool:
    return matching_pairs([fingerprint(a), fingerprint(b)], ["owner", "thief"]) == {(0, 1)}


@pytest.mark.parametrize(
    ("fmt", "subtype"), [("MP3", "MPEG_LAYER_III"), ("OGG", "VORBIS"), ("WAV", "PCM_24")]
)
def test_a_reencoded_copy_matches_its_original(fmt, subtype):
    original = DEMO_AUDIO / "demo-p06" / "es_shades_2.1.flac"
    assert same_audio(decode_audio(original).samples, samples_of(reencoded(original, fmt, subtype)))


@pytest.mark.parametrize("pad", [1, 1105, 4800, 16000 + 37])  # samples, any phase of a frame
def test_a_copy_shifted_by_any_amount_still_matches(pad):
    samples = decode_audio(DEMO_AUDIO / "demo-p01" / "en_shades_1.0.flac").samples
    assert same_audio(samples, np.concatenate([np.zeros(pad, np.float32), samples]))
    assert same_audio(samples, samples[pad:])


def decoded(data: bytes, folder: Path) -> np.ndarray:
    """What the build reads from a file's bytes: 16 kHz mono."""
    path = folder / "copy"
    path.write_bytes(data)
    return decode_audio(path).samples


@pytest.mark.parametrize("rates", [(16000, 8000), (24000, 48000), (48000, 32000), (32000, 16000)])
@pytest.mark.parametrize("then", ["MP3", "noise 10 dB SNR", "trim start 1 s"])
def test_a_mislabel_by_an_octave_or_by_3_2_then_another_edit_still_matches(tmp_path, rates, then):
    """A file read at half, twice or 2/3 of its speed (its header names the wrong rate),
    re-exported after a second careless edit: the peaks of the original played 2 or 1.5
    times as fast are found in it (or its own, played so, in the original)."""
    samples = decode_audio(DEMO_AUDIO / "demo-p10" / "en_shades_6.0.flac").samples
    data, _ = IN_SCOPE[then](decoded(mislabel(samples, *rates)[0], tmp_path), samples)
    assert same_audio(samples, decoded(data, tmp_path))


def demo_fingerprints() -> tuple[list, list[str]]:
    """Every usable demo recording, owned by its participant (one participant's
    recordings share their spoken follow-up, as one voice saying the same words)."""
    prints, owners = [], []
    for path in sorted(DEMO_AUDIO.glob("*/*.flac")):
        try:
            prints.append(fingerprint(decode_audio(path).samples))
        except ValueError:  # the deliberately corrupt recording
            continue
        owners.append(path.parent.name)
    return prints, owners


def test_different_recordings_never_match_on_the_demo_corpus():
    """Every pair of demo recordings of two participants, including the same sentence
    in two voices."""
    prints, owners = demo_fingerprints()
    assert len(prints) > 60
    assert matching_pairs(prints, owners) == set()


def test_every_copy_in_a_collection_is_found_and_nothing_else():
    """Copies (MP3, quieter, under a 30 dB noise floor) among the demo recordings are
    each found against their original, and only there."""
    prints, owners = demo_fingerprints()
    rng = np.random.default_rng(0)
    originals = sorted(DEMO_AUDIO.glob("*/*.flac"))[::6][:10]
    for n, path in enumerate(originals):
        copy = samples_of(reencoded(path, "MP3", "MPEG_LAYER_III", gain=0.6))
        copy += rng.normal(0, np.sqrt(np.mean(copy**2)) / 30, len(copy)).astype(np.float32)
        prints.append(fingerprint(copy))
        owners.append(f"thief-{n}")
    found = matching_pairs(prints, owners)
    assert {owners[j] for _, j in found} == {f"thief-{n}" for n in range(len(originals))}
    assert {owners[i] for i, _ in found} <= {p.parent.name for p in originals}


@pytest.mark.parametrize("takes", [1, 70])
def test_a_participants_many_takes_of_one_voice_do_not_hide_a_copy(takes):
    """The stop-list counts the landmarks of other participants only: a participant who
    recorded one sentence more times than COMMON (their hashes all common among their
    own takes) still has a copy under another participant found, as with one take."""
    from redvox.builder import ownership

    assert takes == 1 or takes > ownership.COMMON
    path = sorted(DEMO_AUDIO.glob("demo-p02/*.flac"))[0]
    samples = decode_audio(path).samples
    rng = np.random.default_rng(takes)
    prints = [fingerprint(samples * rng.uniform(0.5, 1.0)) for _ in range(takes)]
    prints.append(fingerprint(samples[1600:] * 0.7))  # the copy, trimmed and quieter
    owners = ["demo-p02"] * takes + ["thief"]
    assert matching_pairs(prints, owners) == {(k, takes) for k in range(takes)}


def test_batches_of_queries_and_fingerprints_as_text_find_the_same_scores(monkeypatch):
    """A large collection is looked up a few query recordings at a time, its
    fingerprints given as text: the same scores as one batch over every recording."""
    from redvox.builder import ownership

    prints, owners = demo_fingerprints()
    count = len(prints)
    for n, fp in enumerate(prints[::7]):  # exact copies under other owners
        prints.append(fp)
        owners.append(f"copier-{n}")
    one_batch = ownership.pair_scores(prints, owners)
    assert {(7 * n, count + n) for n in range(len(prints) - count)} <= {
        pair for pair, score in one_batch.items() if score.same_audio
    }
    peaks = sum(len(fp.times) for fp in prints)
    assert ownership.PEAKS_PER_BATCH >= peaks  # so the first lookup was one batch
    monkeypatch.setattr(ownership, "PEAKS_PER_BATCH", 100)  # a recording or two a batch
    texts = [fp.to_text() for fp in prints]
    assert ownership.pair_scores(texts, owners) == one_batch


def test_a_fingerprint_is_computed_in_blocks_as_at_once(monkeypatch):
    """Blocks of the spectrogram overlap by a peak's neighbourhood: the same peaks as
    one block over the whole recording, plain and played faster."""
    from redvox.builder import fingerprint as module

    samples = np.concatenate(
        [decode_audio(p).samples for p in sorted((DEMO_AUDIO / "demo-p02").glob("*.flac"))]
    )
    whole = fingerprint(samples)
    monkeypatch.setattr(module, "BLOCK", 333)
    blocks = fingerprint(samples)
    assert len(whole.times) > 500
    assert np.array_equal(whole.times, blocks.times) and np.array_equal(whole.bins, blocks.bins)
    assert len(whole.faster) == len(module.FASTER) and all(len(t) > 200 for t, _ in whole.faster)
    for (times, bins), (block_times, block_bins) in zip(whole.faster, blocks.faster, strict=True):
        assert np.array_equal(times, block_times) and np.array_equal(bins, block_bins)


def test_the_peak_neighbourhood_maximum_is_scipys_maximum_filter():
    """The doubling maximum of the peak picking gives what scipy.ndimage computes for
    the same +-PEAK_T x +-PEAK_F neighbourhood, at the edges and on blocks of any shape
    (ties, silence at -inf dB and blocks shorter than the neighbourhood included)."""
    from scipy.ndimage import maximum_filter

    from redvox.builder import fingerprint as module

    rng = np.random.default_rng(3)
    size = (2 * module.PEAK_T + 1, 2 * module.PEAK_F + 1)
    for frames, bins in [(4138, 129), (1, 129), (7, 3), (40, 129), (41, 17), (100, 1)]:
        level = np.round(rng.normal(-40, 20, (frames, bins))).astype(np.float32)
        level[rng.random(level.shape) < 0.2] = -np.inf
        expected = maximum_filter(level, size, mode="constant", cval=-np.inf)
        found = module._window_max(module._window_max(level, module.PEAK_T, 0), module.PEAK_F, 1)
        assert np.array_equal(found, expected), (frames, bins)


def test_a_decode_cache_of_the_previous_fingerprint_format_is_not_misread(tmp_path):
    """A cache written before the played-faster peaks (its decode facts carry the plain
    peaks alone, under a key without the fingerprint's format) is not read as today's
    fingerprint: the recording is fingerprinted again, as with no cache."""
    path = DEMO_AUDIO / "demo-p10" / "en_shades_6.0.flac"
    sha, limits = sha256_file(path), AudioLimits()

    def outcome(cache: BuildCache):
        (found,) = normalise_recordings(
            [path], [sha], [recording(path.name)], VadParams(), cache, progress=False
        )
        return found

    cache = BuildCache(tmp_path / "fresh")
    fresh = outcome(cache)
    now = Fingerprint.from_text(fresh.fingerprint)
    assert len(now.faster) == len(FASTER) and all(len(t) for t, _ in now.faster)
    fact = cache.get(
        DecodeFact, digest_of(DECODE_FORMAT, FINGERPRINT_FORMAT, sha, limits.model_dump_json())
    )
    plain = now.times.astype("<i4").tobytes() + now.bins.astype("<i2").tobytes()
    old = BuildCache(tmp_path / "old")
    old.put_blob(cache.blob(fact.blob))
    old.put(
        digest_of(DECODE_FORMAT, sha, limits.model_dump_json()),
        replace(fact, fingerprint=base64.b64encode(plain).decode("ascii")),
    )
    with pytest.raises(ValueError, match="not a fingerprint"):
        Fingerprint.from_text(base64.b64encode(plain).decode("ascii"))
    assert outcome(old).fingerprint == fresh.fingerprint


def test_a_fingerprint_without_every_played_faster_set_is_refused():
    """A fingerprint lacking a set of peaks played faster would be looked up without it,
    and a copy mislabelled by about 2 or 3:2 missed: its text is refused, and so is one
    built in memory; read back whole, the text gives the same peaks."""
    path = DEMO_AUDIO / "demo-p10" / "en_shades_6.0.flac"
    whole = fingerprint(decode_audio(path).samples)
    again = Fingerprint.from_text(whole.to_text())
    for a, b in zip(
        [(whole.times, whole.bins), *whole.faster],
        [(again.times, again.bins), *again.faster],
        strict=True,
    ):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    sets = [(whole.times, whole.bins), *whole.faster][:-1]
    data = np.array([len(sets), *(len(t) for t, _ in sets)], "<i4").tobytes()
    for times, bins in sets:
        data += times.astype("<i4").tobytes() + bins.astype("<i2").tobytes()
    with pytest.raises(ValueError, match="not a fingerprint"):
        Fingerprint.from_text(base64.b64encode(data).decode("ascii"))
    with pytest.raises(ValueError, match="sets of peaks played faster"):
        Fingerprint(whole.times, whole.bins, whole.faster[:-1])


# --- the build -----------------------------------------------------------------------


def demo_copy(tmp_path: Path) -> Path:
    corpus_dir = tmp_path / "demo"
    shutil.copytree(DEMO_CONFIG.parent, corpus_dir, ignore=shutil.ignore_patterns("__pycache__"))
    return corpus_dir


def file_under(corpus_dir: Path, thief: str, lang: str, item: str, data: bytes, suffix: str):
    """A contribution row of `thief` whose audio is `data`."""
    name = f"{thief}/{lang}_shades_{item}{suffix}"
    (corpus_dir / "audio" / name).write_bytes(data)
    with (corpus_dir / "contributions.csv").open("a", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerow(
            [thief, "shades", item, lang, name, "x.", "Do you agree?", "x. Do you agree?", "", ""]
        )


def test_a_withheld_voice_reencoded_under_a_public_participant_reaches_no_set(
    tmp_path, monkeypatch, demo_cache
):
    monkeypatch.delenv(KEY_ENV, raising=False)
    corpus_dir = demo_copy(tmp_path)
    audio = corpus_dir / "audio"
    # demo-p06 consented to participation only; demo-p08 has no consent record.
    participation_only = reencoded(audio / "demo-p06" / "es_shades_2.1.flac", "OGG", "VORBIS")
    file_under(corpus_dir, "demo-p05", "es", "2.1", participation_only, ".ogg")
    no_record = reencoded(audio / "demo-p08" / "fr_shades_1.0.flac", "MP3", "MPEG_LAYER_III")
    file_under(corpus_dir, "demo-p07", "fr", "1.0", no_record, ".mp3")
    config = InputConfig.load(corpus_dir / "config.yaml")
    options = BuildOptions(out=tmp_path / "out", cache_dir=demo_cache, progress=False)
    build_version(VERSIONS["1.0.0"], config, options)
    key = config.pseudonym_key_file.read_text().strip().encode()
    thieves = {pseudonymize(key, "demo-p05"): "es", pseudonymize(key, "demo-p07"): "fr"}
    for dataset_set in ("public", "full"):
        folder = tmp_path / "out" / "1.0.0" / dataset_set
        rows = [r for s in folder.glob("data/*/*.parquet") for r in pq.read_table(s).to_pylist()]
        spoken = {
            (r["user_id"], r["lang"], r["original_id"]) for r in rows if r["audio_type"] == "speech"
        }
        assert (next(iter(thieves)), "es", "2.1") not in spoken
        assert (list(thieves)[1], "fr", "1.0") not in spoken
        quarantine = (folder / "quarantine.jsonl").read_text()
        assert quarantine.count('"stage": "ownership"') >= 2, dataset_set
    # The owner's own recording is excluded from the full set too: which copy is the
    # real one is for a maintainer to decide.
    full = tmp_path / "out" / "1.0.0" / "full" / "quarantine.jsonl"
    owner = pseudonymize(key, "demo-p06")
    assert any(owner in line and '"ownership"' in line for line in full.read_text().splitlines())
