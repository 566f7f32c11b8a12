"""Audio normalisation: any contributed recording -> mono float32 at 16 kHz, with its defects.

libsndfile (soundfile) reads WAV, FLAC, OGG and MP3 and tells truncated files apart;
other containers (m4a, webm, ...) go through FFmpeg via audioread. Mono is the plain
average of the channels and resampling is soxr HQ, so the same file always gives the
same samples and the same `content_hash` (the key of the VAD cache).
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import audioread
import numpy as np
import soundfile as sf
import soxr
from audioread.ffdec import FFmpegAudioFile

from redvox.schemas import SAMPLE_RATE
from redvox.schemas.errors import UserError

# |x| at or above this counts as clipped: a few codecs never reach exactly 1.0.
CLIP_LEVEL = 0.999
# Below half a 16-bit step every sample encodes to 0 in the released PCM_16 FLAC.
SILENCE_PEAK = 0.5 / 32768
_SF_ERR_UNRECOGNISED_FORMAT = 1
# libsndfile logs a WAV whose data chunk is longer than the file as "data : N (should be M)".
_WAV_DATA_SIZE = re.compile(r"data : (\d+) \(should be (\d+)\)")
# Streaming writers (e.g. FFmpeg to a pipe) leave these placeholders instead of a size.
_STREAMED_SIZES = (0, 0x7FFFFFFF, 0xFFFFFFFF)
_REEXPORT = "re-export or re-upload the recording"


@dataclass(frozen=True)
class DecodedAudio:
    samples: np.ndarray  # float32 mono at the requested rate (16 kHz)
    source_rate: int
    channels: int
    duration_s: float
    peak: float  # max |sample| of `samples`
    clipped_fraction: float  # share of source samples (all channels) at |x| >= CLIP_LEVEL
    content_hash: str  # sha256 of the float32 samples' bytes: the VAD cache key


class AudioDecodeError(UserError, ValueError):
    """A recording that cannot be used; the message names the file and what is wrong."""


def decode_audio(path: str | Path, *, sample_rate: int = SAMPLE_RATE) -> DecodedAudio:
    """Read `path` as mono float32 at `sample_rate`; AudioDecodeError when it is unusable."""
    path = Path(path)
    _check_file(path)
    source = _read_with_soundfile(path)
    if source is None:
        source = _read_with_ffmpeg(path)
    frames, source_rate = source
    if frames.size == 0 or source_rate <= 0:
        raise AudioDecodeError(f"{path}: no audio samples in the file; {_REEXPORT}")
    return _normalise(frames, source_rate, sample_rate)


def _normalise(frames: np.ndarray, source_rate: int, sample_rate: int) -> DecodedAudio:
    """frames: (n, channels) float32 in [-1, 1] at `source_rate`."""
    clipped = np.count_nonzero(np.abs(frames) >= CLIP_LEVEL) / frames.size
    if frames.shape[1] == 1:
        mono = frames[:, 0]
    else:
        mono = frames.mean(axis=1, dtype=np.float64).astype(np.float32)
    if source_rate != sample_rate:
        mono = soxr.resample(mono, source_rate, sample_rate, quality="HQ")
    samples = np.ascontiguousarray(mono, dtype=np.float32)
    return DecodedAudio(
        samples=samples,
        source_rate=source_rate,
        channels=frames.shape[1],
        duration_s=len(samples) / sample_rate,
        peak=float(np.max(np.abs(samples))) if samples.size else 0.0,
        clipped_fraction=float(clipped),
        content_hash=hashlib.sha256(samples.astype("<f4", copy=False).tobytes()).hexdigest(),
    )


def _check_file(path: Path) -> None:
    if not path.exists():
        raise AudioDecodeError(
            f"{path}: audio file not found; check `audio_root` in the config and the "
            "contribution's `audio_file`"
        )
    if not path.is_file():
        raise AudioDecodeError(f"{path}: not a file; `audio_file` must name one recording")
    if path.stat().st_size == 0:
        raise AudioDecodeError(f"{path}: empty audio file (0 bytes); {_REEXPORT}")


def _read_with_soundfile(path: Path) -> tuple[np.ndarray, int] | None:
    """(frames, rate), or None when libsndfile does not know the format at all."""
    try:
        with sf.SoundFile(path) as audio:
            kind, declared, rate, log = (
                audio.format,
                audio.frames,
                audio.samplerate,
                audio.extra_info,
            )
            try:
                frames = audio.read(dtype="float32", always_2d=True)
            except sf.LibsndfileError as err:
                raise AudioDecodeError(
                    f"{path}: truncated or corrupt {kind} audio: decoding failed "
                    f"({err.error_string or 'libsndfile error ' + str(err.code)}); {_REEXPORT}"
                ) from err
    except sf.LibsndfileError as err:
        if err.code == _SF_ERR_UNRECOGNISED_FORMAT:
            return None
        raise AudioDecodeError(
            f"{path}: corrupt audio file ({err.error_string}); {_REEXPORT}"
        ) from err
    if len(frames) < declared:
        raise AudioDecodeError(
            f"{path}: truncated {kind} audio: the header declares {declared} frames but only "
            f"{len(frames)} could be decoded; {_REEXPORT}"
        )
    _check_wav_data_size(path, log)
    return frames, rate


def _check_wav_data_size(path: Path, log: str) -> None:
    """libsndfile silently shortens a WAV cut mid-upload; its log still has the declared size."""
    match = _WAV_DATA_SIZE.search(log)
    if match is None:
        return
    declared, present = int(match[1]), int(match[2])
    if declared > present and declared not in _STREAMED_SIZES:
        raise AudioDecodeError(
            f"{path}: truncated WAV: the header declares {declared} bytes of audio but the file "
            f"holds {present}; {_REEXPORT}"
        )


def _read_with_ffmpeg(path: Path) -> tuple[np.ndarray, int]:
    """Formats libsndfile does not read (m4a, webm, ...), decoded by FFmpeg to 16-bit PCM."""
    if shutil.which("ffmpeg") is None:
        raise AudioDecodeError(
            f"{path}: libsndfile does not read this format and FFmpeg is not installed; "
            "install FFmpeg (apt-get install -y ffmpeg) or convert the file to WAV or FLAC"
        )
    try:
        with audioread.audio_open(str(path), backends=[FFmpegAudioFile]) as audio:
            rate, channels = audio.samplerate, audio.channels
            pcm = b"".join(audio)
    except audioread.exceptions.NoBackendError as err:
        raise AudioDecodeError(
            f"{path}: not a readable audio file (neither libsndfile nor FFmpeg recognise it); "
            "convert it to WAV or FLAC"
        ) from err
    except (audioread.DecodeError, OSError, EOFError) as err:
        raise AudioDecodeError(
            f"{path}: not a readable audio file: libsndfile does not know the format and FFmpeg "
            f"failed ({err!r}); convert it to WAV or FLAC"
        ) from err
    if channels <= 0 or rate <= 0:
        # FFmpeg guesses a container from the file name and finds no stream in it.
        raise AudioDecodeError(
            f"{path}: not a readable audio file (FFmpeg finds no audio stream in it); "
            "convert it to WAV or FLAC"
        )
    ints = np.frombuffer(pcm, dtype="<i2")
    frames = (ints.astype(np.float32) / 32768.0).reshape(-1, channels)
    return frames, rate


def encode_flac(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    """16-bit PCM FLAC of mono `samples`; the same samples always give the same bytes."""
    mono = np.asarray(samples, dtype=np.float32)
    if mono.ndim != 1:
        raise ValueError(
            f"encode_flac takes mono samples (a 1-D array), got shape {mono.shape}; "
            "average the channels first"
        )
    buffer = io.BytesIO()
    # libsndfile wraps around instead of saturating above full scale.
    sf.write(buffer, np.clip(mono, -1.0, 1.0), sample_rate, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


def audio_problems(decoded: DecodedAudio, *, max_clipped_fraction: float = 0.01) -> list[str]:
    """Defects that make a recording unfit for release, as quarantine reasons (empty: fine)."""
    problems = []
    if decoded.peak < SILENCE_PEAK:
        problems.append("digital silence: every sample is 0 at 16-bit resolution")
    if decoded.clipped_fraction > max_clipped_fraction:
        problems.append(
            f"clipped: {decoded.clipped_fraction:.1%} of samples at full scale "
            f"(at most {max_clipped_fraction:.1%} allowed)"
        )
    return problems
