"""The audio cell: one row's audio as a shard stores it, like `datasets`' `Audio` feature.

A cell is `{bytes, path}`: the 16-bit PCM FLAC bytes of 16 kHz mono audio and a
relative file name. This module is its one codec:

- `encode_flac` (samples -> FLAC bytes; `write_flac`: the same bytes into a file) and
  `flac_samples` / `decode_cell` (FLAC bytes or a read cell -> samples at SAMPLE_RATE);
- `arrow_type` and `cell_array`: the Arrow type the shard writer stores cells as (the
  bytes dictionary-encoded, so a clip shared by many rows is stored once per row group)
  and the column of one row group;
- `column_bytes`, `cell_bytes` and `read_cell`: the bytes of cells read back;
- `decode_fully`: the release check's decode, to the last frame and against the
  MD5 that the FLAC header records.

numpy, soundfile and pyarrow are imported on first use: `redvox.schemas` stays light.
"""

from __future__ import annotations

import builtins
import hashlib
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

SAMPLE_RATE = 16_000


class AudioCell(BaseModel):
    """An audio value as `datasets` stores it: encoded bytes plus a relative name."""

    model_config = ConfigDict(frozen=True)
    bytes: builtins.bytes | None = None
    path: str | None = None


# --- samples <-> FLAC bytes ----------------------------------------------------------


_FLAC_BLOCK = 1 << 18  # samples clipped and written at a time


def encode_flac(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    """16-bit PCM FLAC of mono `samples`; the same samples always give the same bytes."""
    buffer = io.BytesIO()
    write_flac(samples, buffer, sample_rate)
    return buffer.getvalue()


def write_flac(samples: np.ndarray, file: BinaryIO, sample_rate: int = SAMPLE_RATE) -> None:
    """`encode_flac`'s bytes written to `file` (any seekable binary file: libsndfile writes
    through the same virtual I/O whatever holds the bytes), which stays open."""
    import numpy as np
    import soundfile as sf

    mono = np.asarray(samples, dtype=np.float32)
    if mono.ndim != 1:
        raise ValueError(
            f"encode_flac takes mono samples (a 1-D array), got shape {mono.shape}; "
            "average the channels first"
        )
    if not np.isfinite(mono).all():
        raise ValueError(
            "encode_flac got non-finite samples (NaN/inf); decode_audio refuses such "
            "recordings, so these samples come from elsewhere"
        )
    # libsndfile wraps around instead of saturating above full scale. Clipped block by
    # block, so a long recording is not copied whole (the bytes are those of one write).
    with sf.SoundFile(file, "w", sample_rate, 1, format="FLAC", subtype="PCM_16") as out:
        for start in range(0, len(mono), _FLAC_BLOCK):
            out.write(np.clip(mono[start : start + _FLAC_BLOCK], -1.0, 1.0))


def flac_samples(data: bytes | BinaryIO) -> np.ndarray:
    """Mono float32 samples of FLAC bytes (or of a binary file holding them, read from
    where it stands): the audio exactly as released."""
    import soundfile as sf

    samples, rate = sf.read(io.BytesIO(data) if isinstance(data, bytes) else data, dtype="float32")
    if rate != SAMPLE_RATE or samples.ndim != 1:
        raise ValueError(
            f"expected mono {SAMPLE_RATE} Hz FLAC, got {rate} Hz, shape {samples.shape}"
        )
    return samples


def decode_cell(cell: Mapping[str, Any]) -> tuple[np.ndarray, int]:
    """(samples, sampling rate) of a cell read from a shard."""
    return flac_samples(read_cell(cell).bytes or b""), SAMPLE_RATE


# --- cells in Arrow ------------------------------------------------------------------


def arrow_type() -> pa.StructType:
    """The Arrow type of the shards' audio column: what `datasets.Audio` reads, its
    bytes dictionary-encoded (a storage detail: readers see plain binary)."""
    import pyarrow as pa

    return pa.struct(
        [pa.field("bytes", pa.dictionary(pa.int32(), pa.binary())), pa.field("path", pa.string())]
    )


def cell_array(indices: Sequence[int], blobs: Sequence[bytes], paths: Sequence[str | None]):
    """The audio column of one row group: row i holds `blobs[indices[i]]` and `paths[i]`."""
    import pyarrow as pa

    data = pa.DictionaryArray.from_arrays(
        pa.array(indices, pa.int32()), pa.array(list(blobs), pa.binary())
    )
    return pa.StructArray.from_arrays(
        [data, pa.array(paths, pa.string())], fields=list(arrow_type())
    )


def column_bytes(column: pa.ChunkedArray) -> list[bytes | None]:
    """The bytes of every cell of an audio column, without making the cells."""
    return [data for chunk in column.chunks for data in chunk.field("bytes").to_pylist()]


def cell_bytes(cell: Mapping[str, Any] | None) -> bytes:
    """The bytes of a read cell; empty for a missing cell or one without bytes."""
    return (cell or {}).get("bytes") or b""


def read_cell(cell: Any) -> AudioCell:
    """A cell read from a shard, checked: a mapping with non-empty bytes and a text (or
    no) path. ValueError says what is wrong."""
    if not isinstance(cell, Mapping) or set(cell) != {"bytes", "path"}:
        raise ValueError("the audio cell is not a {bytes, path} struct")
    data, path = cell["bytes"], cell["path"]
    if not isinstance(data, bytes) or not data:
        raise ValueError("the audio cell holds no bytes")
    if path is not None and not isinstance(path, str):
        raise ValueError("the audio cell's path is not text")
    return AudioCell(bytes=data, path=path)


# --- the release check's decode ------------------------------------------------------


def decode_fully(data: bytes) -> tuple[tuple[int, int, int], str | None]:
    """(channels, sample rate, frames) of FLAC bytes decoded to the last sample, and what
    is wrong with them (None: nothing): fewer frames than the header announces, or
    samples that differ from the MD5 in STREAMINFO. soundfile raises on a frame
    whose CRC does not match."""
    import soundfile as sf

    info = sf.info(io.BytesIO(data))
    samples, _ = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    shape = (info.channels, info.samplerate, len(samples))
    if len(samples) != info.frames:
        return shape, f"short read: {len(samples)} of the {info.frames} frames the header announces"
    md5, bits = _streaminfo_md5(data)
    decoded = hashlib.md5(samples.astype("<i2").tobytes(), usedforsecurity=False).digest()
    if md5 and bits == 16 and decoded != md5:
        return shape, "decoded samples differ from the MD5 in the FLAC header (damaged audio)"
    return shape, None


def _streaminfo_md5(data: bytes) -> tuple[builtins.bytes | None, int]:
    """The MD5 of the unencoded samples and the bits per sample from a FLAC STREAMINFO
    block; (None, 0) when absent or all zero (the encoder did not compute it)."""
    if data[:4] != b"fLaC" or len(data) < 42 or data[4] & 0x7F != 0:
        return None, 0
    info = data[8:42]  # the 34 bytes of STREAMINFO, right after its block header
    bits = (((info[12] & 0x01) << 4) | (info[13] >> 4)) + 1
    md5 = info[18:34]
    return (md5 if any(md5) else None), bits
