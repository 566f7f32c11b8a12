"""Audio normalisation: any contributed recording -> mono float32 at 16 kHz, with its defects.

libsndfile (soundfile) reads WAV, FLAC, OGG and MP3 and tells truncated files apart;
other containers (m4a, webm, ...) go through FFmpeg via audioread. Mono is the plain
average of the channels and resampling is soxr HQ, so the same file always gives the
same samples, bit for bit.

Every recording is untrusted input and fails closed with an AudioDecodeError (a
quarantine line), never a traceback nor unbounded memory:
- before any sample is decoded, the file size, and the header's sample rate
  (MIN_SOURCE_RATE..MAX_SOURCE_RATE), channel count, declared duration and (for PCM
  WAV) block layout are checked against `AudioLimits`;
- decoding runs in blocks of BLOCK_FRAMES: each block is checked for NaN/inf,
  averaged to mono and fed to a soxr HQ ResampleStream, and reading stops as soon as
  the audio runs past `max_duration_s`; peak memory is the 16 kHz mono output plus
  one block, not the full-rate multichannel source. soxr's stream gives the same
  samples, bit for bit, as a one-shot `soxr.resample` of the whole file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import audioread
import numpy as np
import soundfile as sf
import soxr
from audioread.ffdec import FFmpegAudioFile

from redvox.schemas import SAMPLE_RATE
from redvox.schemas.audio_cell import encode_flac as encode_flac  # the codec's, re-exported
from redvox.schemas.audio_cell import flac_samples as flac_samples
from redvox.schemas.audio_cell import write_flac as write_flac
from redvox.schemas.config import MAX_SOURCE_RATE, MIN_SOURCE_RATE, AudioLimits
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
# Source frames decoded at once: 512 KB of 48 kHz stereo float32.
BLOCK_FRAMES = 2**16
DEFAULT_LIMITS = AudioLimits()
# Bytes per sample of the PCM subtypes whose WAV block layout is checked.
_PCM_BYTES = {
    "PCM_S8": 1,
    "PCM_U8": 1,
    "PCM_16": 2,
    "PCM_24": 3,
    "PCM_32": 4,
    "FLOAT": 4,
    "DOUBLE": 8,
}
_WAV_BLOCK_ALIGN = re.compile(r"Block Align\s*:\s*(\d+)")
_WAV_DATA = re.compile(r"^data : (\d+)", re.MULTILINE)


@dataclass(frozen=True)
class DecodedAudio:
    samples: np.ndarray  # float32 mono at the requested rate (16 kHz)
    source_rate: int
    channels: int
    duration_s: float
    peak: float  # max |sample| of `samples`
    clipped_fraction: float  # share of source samples (all channels) at |x| >= CLIP_LEVEL


class AudioDecodeError(UserError, ValueError):
    """A recording that cannot be used; the message names the file and what is wrong."""


def decode_audio(path: str | Path, *, limits: AudioLimits = DEFAULT_LIMITS) -> DecodedAudio:
    """Read `path` as mono float32 at SAMPLE_RATE (16 kHz); AudioDecodeError when it is unusable
    or outside `limits` (checked from the header, before decoding)."""
    path = Path(path)
    _check_file(path, limits)
    decoded = _read_with_soundfile(path, SAMPLE_RATE, limits)
    if decoded is None:
        decoded = _read_with_ffmpeg(path, SAMPLE_RATE, limits)
    return decoded


class _Normaliser:
    """Blocks of (n, channels) float32 source frames in, 16 kHz mono float32 out.

    The output buffer is sized from the declared length and grown only if the file
    holds more; the result is what a one-shot average + `soxr.resample` would give."""

    def __init__(
        self, path: Path, source_rate: int, channels: int, sample_rate: int, frames: int
    ) -> None:
        self.path, self.source_rate, self.channels = path, source_rate, channels
        self.sample_rate = sample_rate
        self.stream = (
            soxr.ResampleStream(source_rate, sample_rate, 1, dtype="float32", quality="HQ")
            if source_rate != sample_rate
            else None
        )
        expected = -(-max(frames, 0) * sample_rate // source_rate) + 64
        self.out = np.empty(expected, dtype=np.float32)
        self.length = 0
        self.frames = 0
        self.clipped = 0

    def add(self, block: np.ndarray) -> None:
        if not np.isfinite(block).all():
            raise AudioDecodeError(
                f"{self.path}: non-finite samples (NaN/inf) from {self.frames / self.source_rate:.2f} s "
                f"on; {_REEXPORT} (re-export the float audio as 16-bit PCM)"
            )
        self.frames += len(block)
        self.clipped += int(np.count_nonzero(np.abs(block) >= CLIP_LEVEL))
        if self.channels == 1:
            mono = np.ascontiguousarray(block[:, 0])
        else:
            mono = block.mean(axis=1, dtype=np.float64).astype(np.float32)
        self._append(mono if self.stream is None else self.stream.resample_chunk(mono))

    def _append(self, mono: np.ndarray) -> None:
        end = self.length + len(mono)
        if end > len(self.out):
            grown = np.empty(max(end, 2 * len(self.out)), dtype=np.float32)
            grown[: self.length] = self.out[: self.length]
            self.out = grown
        self.out[self.length : end] = mono
        self.length = end

    def finish(self) -> DecodedAudio:
        if self.frames == 0:
            raise AudioDecodeError(f"{self.path}: no audio samples in the file; {_REEXPORT}")
        if self.stream is not None:
            self._append(self.stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
        samples = self.out[: self.length]
        # max/min propagate NaN and reach inf, and unlike np.abs copy nothing.
        peak = max(float(samples.max()), -float(samples.min())) if samples.size else 0.0
        if not np.isfinite(peak):
            # Finite source values far beyond full scale can overflow float32 in the filter.
            raise AudioDecodeError(
                f"{self.path}: non-finite samples (NaN/inf) after resampling: the source holds "
                f"values far beyond full scale; {_REEXPORT}"
            )
        return DecodedAudio(
            samples=samples,
            source_rate=self.source_rate,
            channels=self.channels,
            duration_s=len(samples) / self.sample_rate,
            peak=peak,
            clipped_fraction=float(self.clipped / (self.frames * self.channels)),
        )


def _check_header(
    path: Path, rate: int, channels: int, frames: int | None, limits: AudioLimits
) -> None:
    """What a header declares, checked before decoding so memory and time stay bounded."""
    if not MIN_SOURCE_RATE <= rate <= MAX_SOURCE_RATE:
        raise AudioDecodeError(
            f"{path}: the header declares a sample rate of {rate} Hz, outside "
            f"{MIN_SOURCE_RATE}-{MAX_SOURCE_RATE} Hz: a corrupt header or not a speech "
            f"recording; {_REEXPORT}"
        )
    if channels <= 0:
        raise AudioDecodeError(f"{path}: the header declares no audio channel; {_REEXPORT}")
    if channels > limits.max_channels:
        raise AudioDecodeError(
            f"{path}: {channels} channels, more than the {limits.max_channels} maximum "
            "(audio_limits.max_channels); export a mono or stereo recording"
        )
    if frames is not None and frames / rate > limits.max_duration_s:
        _too_long(path, frames / rate, limits)


def _too_long(path: Path, seconds: float | None, limits: AudioLimits) -> None:
    length = f"{seconds:.1f} s" if seconds is not None else "the audio"
    raise AudioDecodeError(
        f"{path}: {length} long, longer than the {limits.max_duration_s:g} s maximum "
        "(audio_limits.max_duration_s); trim the recording, or raise the limit in the "
        "input config if such long takes are intended"
    )


def _check_file(path: Path, limits: AudioLimits) -> None:
    if not path.exists():
        raise AudioDecodeError(
            f"{path}: audio file not found; check `audio_root` in the config and the "
            "contribution's `audio_file`"
        )
    if not path.is_file():
        raise AudioDecodeError(f"{path}: not a file; `audio_file` must name one recording")
    size = path.stat().st_size
    if size == 0:
        raise AudioDecodeError(f"{path}: empty audio file (0 bytes); {_REEXPORT}")
    if size > limits.max_file_mb * 1e6:
        raise AudioDecodeError(
            f"{path}: {size / 1e6:.1f} MB, larger than the {limits.max_file_mb:g} MB maximum "
            "(audio_limits.max_file_mb); export a compressed (FLAC) or shorter recording, or "
            "raise the limit in the input config"
        )
    kind = _text_kind(path)
    if kind is not None:
        raise AudioDecodeError(
            f"{path}: not an audio file (looks like {kind}: often a web page or an error "
            "message saved under an audio name); download or export the recording again"
        )


# How text files a collection tool saves by mistake begin (after whitespace).
_TEXT_STARTS = {b"<!doctype html": "HTML", b"<html": "HTML", b"<?xml": "XML", b"{": "JSON"}


def _text_kind(path: Path) -> str | None:
    """What text `path` holds, if its first bytes are text rather than audio."""
    with path.open("rb") as handle:
        head = handle.read(512)
    start = head.lstrip().lower()
    for prefix, kind in _TEXT_STARTS.items():
        if start.startswith(prefix):
            return kind
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None  # binary: audio, or something libsndfile and FFmpeg will judge
    printable = sum(c.isprintable() or c in "\r\n\t" for c in text)
    return "text" if text and printable == len(text) else None


@contextmanager
def _decoder_chatter_off() -> Iterator[None]:
    """libmpg123 writes notes ("Illegal Audio-MPEG-Header ...", "Trying to resync")
    straight to file descriptor 2 while it decodes a damaged MP3; the outcome is judged
    from the samples, so the notes only clutter the terminal."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    sys.stderr.flush()
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _read_with_soundfile(path: Path, sample_rate: int, limits: AudioLimits) -> DecodedAudio | None:
    """The decoded file, or None when libsndfile does not know the format at all."""
    with _decoder_chatter_off():
        return _read_with_libsndfile(path, sample_rate, limits)


def _read_with_libsndfile(path: Path, sample_rate: int, limits: AudioLimits) -> DecodedAudio | None:
    try:
        with sf.SoundFile(path) as audio:
            kind, declared, rate, channels, log = (
                audio.format,
                audio.frames,
                audio.samplerate,
                audio.channels,
                audio.extra_info,
            )
            _check_header(path, rate, channels, declared, limits)
            if kind in ("WAV", "WAVEX"):
                _check_wav_layout(path, audio.subtype, channels, declared, log)
            normaliser = _Normaliser(path, rate, channels, sample_rate, declared)
            while True:
                try:
                    block = audio.read(BLOCK_FRAMES, dtype="float32", always_2d=True)
                except sf.LibsndfileError as err:
                    raise AudioDecodeError(
                        f"{path}: truncated or corrupt {kind} audio: decoding failed "
                        f"({err.error_string or 'libsndfile error ' + str(err.code)}); "
                        f"{_REEXPORT}"
                    ) from err
                if len(block) == 0:
                    break
                normaliser.add(block)
                if normaliser.frames / rate > limits.max_duration_s:
                    _too_long(path, None, limits)
    except sf.LibsndfileError as err:
        if err.code == _SF_ERR_UNRECOGNISED_FORMAT:
            return None
        raise AudioDecodeError(
            f"{path}: corrupt audio file ({err.error_string}); {_REEXPORT}"
        ) from err
    if normaliser.frames < declared:
        raise AudioDecodeError(
            f"{path}: truncated {kind} audio: the header declares {declared} frames but only "
            f"{normaliser.frames} could be decoded; {_REEXPORT}"
        )
    _check_wav_data_size(path, log)
    return normaliser.finish()


def _check_wav_layout(path: Path, subtype: str, channels: int, frames: int, log: str) -> None:
    """A PCM WAV's fmt chunk must agree with itself and with its data chunk: a frame is
    channels x bytes per sample, and the data holds whole frames of that size."""
    width = _PCM_BYTES.get(subtype)
    align, data = _WAV_BLOCK_ALIGN.search(log), _WAV_DATA.search(log)
    if width is None or align is None:
        return
    if int(align[1]) != channels * width:
        raise AudioDecodeError(
            f"{path}: inconsistent WAV header: a block of {align[1]} bytes but {channels} "
            f"channel(s) of {width}-byte {subtype} samples ({channels * width} bytes); "
            f"{_REEXPORT}"
        )
    size = int(data[1]) if data is not None else None
    if size is None or size in _STREAMED_SIZES:
        return
    expected = frames * channels * width
    # A declared size beyond the file is a truncation, reported after decoding.
    if expected > size:
        raise AudioDecodeError(
            f"{path}: inconsistent WAV header: {frames} frames of {channels} x {width} bytes "
            f"need {expected} bytes, the data chunk declares {size}; {_REEXPORT}"
        )


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


def _read_with_ffmpeg(path: Path, sample_rate: int, limits: AudioLimits) -> DecodedAudio:
    """Formats libsndfile does not read (m4a, webm, ...), decoded by FFmpeg to 16-bit PCM.

    The rate, channels and duration FFmpeg reports are checked before any PCM is read,
    and reading stops once the audio runs past the duration limit. The PCM is read
    from FFmpeg's pipe one block at a time, so FFmpeg waits for the decoder: audioread's
    own reader thread would queue whatever FFmpeg writes, without bound (up to the
    whole 691 MB of a 1-hour 48 kHz stereo m4a)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioDecodeError(
            f"{path}: libsndfile does not read this format and FFmpeg is not installed; "
            "install FFmpeg (apt-get install -y ffmpeg) or convert the file to WAV or FLAC"
        )
    rate, channels, duration = _ffmpeg_stream(path)
    if channels <= 0 or rate <= 0:
        # FFmpeg guesses a container from the file name and finds no stream in it.
        raise AudioDecodeError(
            f"{path}: not a readable audio file (FFmpeg finds no audio stream in it); "
            "convert it to WAV or FLAC"
        )
    declared = round(duration * rate) if duration and duration > 0 else None
    _check_header(path, rate, channels, declared, limits)
    normaliser = _Normaliser(path, rate, channels, sample_rate, declared or 0)
    block_bytes = BLOCK_FRAMES * channels * 2
    # The command audioread runs: the same PCM, bit for bit.
    command = [ffmpeg, "-i", str(path), "-f", "s16le", "-"]
    with subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as decoder:
        try:
            # Fixed-size blocks whatever sizes the pipe delivers: the same file always
            # goes through the same steps.
            while block := decoder.stdout.read(block_bytes):
                if len(block) % (channels * 2):
                    raise AudioDecodeError(
                        f"{path}: FFmpeg's output ends inside a frame; convert the file to "
                        "WAV or FLAC"
                    )
                normaliser.add(_pcm_frames(block, channels))
                if normaliser.frames / rate > limits.max_duration_s:
                    _too_long(path, None, limits)
        finally:
            decoder.kill()
    return normaliser.finish()


def _ffmpeg_stream(path: Path) -> tuple[int, int, float]:
    """(sample rate, channels, duration in seconds) of the audio stream FFmpeg finds."""
    try:
        with audioread.audio_open(str(path), backends=[FFmpegAudioFile]) as audio:
            return audio.samplerate, audio.channels, audio.duration
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


def _pcm_frames(pcm: bytes | bytearray, channels: int) -> np.ndarray:
    ints = np.frombuffer(bytes(pcm), dtype="<i2")
    return (ints.astype(np.float32) / 32768.0).reshape(-1, channels)


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
