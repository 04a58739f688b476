"""Compression codecs of Kafka record batches: ids, names, levels, and the compress/decompress entry points.

One module per codec frames the bytes exactly as Kafka's Java streams do. Levels follow Kafka's
``compression.<codec>.level`` configs, with Kafka's defaults and ranges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import UnsupportedCompressionTypeError
from . import gzip, lz4, snappy, zstd
from ._limits import MAX_DECOMPRESSED_BYTES

if TYPE_CHECKING:
    import cramjam
    import numpy as np

    from ..types import BytesLike

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
_ALIASES = {"uncompressed": "none"}


@dataclass(frozen=True)
class LevelRange:
    """Kafka's accepted range and default of one codec's compression level."""

    default: int
    minimum: int
    maximum: int
    config: str


LEVELS: dict[int, LevelRange] = {
    GZIP: LevelRange(gzip.DEFAULT_LEVEL, gzip.MIN_LEVEL, gzip.MAX_LEVEL, "compression.gzip.level"),
    LZ4: LevelRange(lz4.DEFAULT_LEVEL, lz4.MIN_LEVEL, lz4.MAX_LEVEL, "compression.lz4.level"),
    ZSTD: LevelRange(zstd.DEFAULT_LEVEL, zstd.MIN_LEVEL, zstd.MAX_LEVEL, "compression.zstd.level"),
}


def codec_id(codec: int | str) -> int:
    """Resolve a codec name ('gzip', 'uncompressed', ...) or id to Kafka's id, or raise."""
    if isinstance(codec, str):
        name = _ALIASES.get(codec.lower(), codec.lower())
        if name in CODEC_NAMES:
            return CODEC_NAMES.index(name)
        raise UnsupportedCompressionTypeError(f"Unknown compression name: {codec}")
    if isinstance(codec, int) and 0 <= codec < len(CODEC_NAMES):
        return codec
    raise UnsupportedCompressionTypeError(f"Unknown compression type id: {codec}")


def codec_name(codec: int | str) -> str:
    """Kafka's name of a codec ('none', 'gzip', 'snappy', 'lz4', 'zstd')."""
    return CODEC_NAMES[codec_id(codec)]


def resolve_level(codec: int, level: int | None) -> int | None:
    """Check ``level`` against Kafka's range for the codec; None means Kafka's default."""
    spec = LEVELS.get(codec)
    if spec is None:
        return None
    if level is None:
        return spec.default
    in_range = spec.minimum <= level <= spec.maximum
    if codec == GZIP:
        in_range = in_range or level == gzip.DEFAULT_LEVEL
    if not in_range:
        raise ValueError(
            f"Invalid value {level} for configuration {spec.config}: "
            f"Value must be between {spec.minimum} and {spec.maximum}" + (" or -1" if codec == GZIP else "")
        )
    return level


def compress(codec: int | str, data: BytesLike, level: int | None = None) -> bytes | cramjam.Buffer:
    """Compress a records section with Kafka's framing for ``codec``; returns a bytes-like object."""
    cid = codec_id(codec)
    if cid == NONE:
        return bytes(data)
    if cid == SNAPPY:  # no level (resolve_level passes None through)
        return snappy.compress(data)
    lvl = resolve_level(cid, level)
    assert lvl is not None  # gzip, lz4 and zstd have a level range: resolve_level gives their default for None
    if cid == GZIP:
        return gzip.compress(data, lvl)
    if cid == LZ4:
        return lz4.compress(data, lvl)
    return zstd.compress(data, lvl)


def decompress(
    codec: int | str,
    data: BytesLike,
    *,
    magic: int = 2,
    max_size: int = MAX_DECOMPRESSED_BYTES,
    into: np.ndarray | None = None,
) -> memoryview:
    """Decompress a records section, accepting every framing Kafka's readers accept.

    Returns a zero-copy byte view of the codec's output. ``magic`` matters for lz4 only: magic 0
    wrappers were written with a wrong descriptor checksum. Malformed input raises CorruptRecordError.
    ``into``: a scratch buffer the codec may decode into (lz4 does), for a caller that is done with the
    result before the buffer's next use (the log's validation); the result may then be a view of it.

    ``max_size`` caps the output (default ``MAX_DECOMPRESSED_BYTES``, 2 GiB - 1, which no batch Kafka
    writes or reads exceeds; see ``_limits``): a small batch cannot make the decoder allocate more. Output
    beyond it raises CorruptRecordError naming the codec and the limit, before decoding where the format
    states its sizes (snappy, zstd content sizes and raw/RLE blocks, a gzip trailer) and otherwise once the
    limit is passed, so a decompression bomb costs at most ``max_size`` bytes.
    """
    cid = codec_id(codec)
    out: BytesLike | cramjam.Buffer
    if cid == NONE:
        out = data
    elif cid == GZIP:
        out = gzip.decompress(data, max_size)
    elif cid == SNAPPY:
        out = snappy.decompress(data, max_size)
    elif cid == LZ4:
        out = lz4.decompress(data, ignore_descriptor_checksum=(magic == 0), max_size=max_size, into=into)
    elif magic < 2:
        raise UnsupportedCompressionTypeError("zstd is not allowed with magic 0 or 1")
    else:
        out = zstd.decompress(data, max_size)
    return memoryview(out).cast("B") if not isinstance(out, memoryview) else out


__all__ = [
    "CODEC_NAMES",
    "GZIP",
    "LEVELS",
    "LZ4",
    "MAX_DECOMPRESSED_BYTES",
    "NONE",
    "SNAPPY",
    "ZSTD",
    "codec_id",
    "codec_name",
    "compress",
    "decompress",
    "resolve_level",
]
