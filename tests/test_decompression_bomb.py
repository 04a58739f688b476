"""Decompression bombs: a small compressed batch that claims or produces gigabytes is refused quickly, within
bounded memory, with a CorruptRecordError naming the codec and the limit; legitimate large batches decode.

Every bomb here decodes (or claims to decode) to 3 GiB of zeros, more than the default cap
(``MAX_DECOMPRESSED_BYTES``, 2 GiB - 1), yet each is built in a few megabytes without compressing 3 GiB:
a compressed chunk of zeros is repeated. Where the format states its sizes (a gzip trailer, snappy block
lengths, zstd raw/RLE blocks and content sizes) the default cap refuses the bomb before decoding anything;
where it does not (lz4 blocks, gzip members, zstd compressed blocks) decoding stops at the cap, so those are
run with a 64 MiB cap to keep the test cheap, and peak RSS is checked against it.
"""

from __future__ import annotations

import contextlib
import resource
import struct
import time
import zlib

import cramjam
import pytest

from batchtools import replace_records
from kafkalog.errors import CorruptRecordError
from kafkalog.record import RecordBatchBuilder, iter_batches
from kafkalog.record.columnar import to_arrow
from kafkalog.record.compression import MAX_DECOMPRESSED_BYTES, decompress, lz4, snappy

GIB = 1 << 30
MIB = 1 << 20
BOMB = 3 * GIB
SMALL_CAP = 64 * MIB


def _peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak_rss() -> None:
    """Start a new peak from the current RSS (Linux: ``5`` in clear_refs), so that earlier tests' peaks do not
    hide this one's growth; where that is not possible the growth measured is a lower bound."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _rejected(
    codec: str, data: bytes, max_size: int = MAX_DECOMPRESSED_BYTES, *, before_decoding: bool = False
) -> CorruptRecordError:
    """Decompress ``data``, expecting a refusal; check it was quick and that memory stayed bounded: below the
    cap, or (``before_decoding``) near nothing at all."""
    _reset_peak_rss()
    before = _peak_rss()
    start = time.perf_counter()
    with pytest.raises(CorruptRecordError) as info:
        decompress(codec, data, max_size=max_size)
    elapsed = time.perf_counter() - start
    grown = _peak_rss() - before
    assert elapsed < 5.0, f"{codec} bomb took {elapsed:.1f} s to refuse"
    allowed = 32 * MIB if before_decoding else min(max_size, BOMB) + 192 * MIB
    assert grown < allowed, f"{codec} bomb grew the peak RSS by {grown >> 20} MiB"
    print(f"{codec}: refused in {elapsed * 1000:.0f} ms, peak RSS +{grown >> 20} MiB, cap {max_size >> 20} MiB")
    message = str(info.value)
    assert codec in message and f"limit of {max_size} bytes" in message
    return info.value


# ----- bomb builders: a chunk of compressed zeros, repeated ----------------------------------------------
def gzip_single_member_bomb(size: int = BOMB, chunk: int = 16 * MIB) -> bytes:
    """One gzip member of ``size`` zeros: byte-aligned full-flush deflate blocks of ``chunk`` zeros, repeated."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(bytes(chunk)) + deflate.flush(zlib.Z_FULL_FLUSH)  # needs no earlier data
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # an empty final block
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    crc = 0  # never reached: the size check comes first
    return header + block * (size // chunk) + final + struct.pack("<II", crc, size & 0xFFFFFFFF)


def gzip_member_bomb(size: int = BOMB, member: int = 64 * MIB) -> bytes:
    """Many gzip members of ``member`` zeros each: no trailer says the total."""
    one = zlib.compress(bytes(member), 9, wbits=31)
    return one * (size // member)


def snappy_bomb(size: int = BOMB) -> bytes:
    """Xerial framing, 32 KiB blocks of zeros: every block states its length."""
    block = bytes(cramjam.snappy.compress_raw(bytes(snappy.BLOCK_SIZE)))
    return snappy.XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * (size // snappy.BLOCK_SIZE)


def lz4_bomb(size: int = BOMB) -> bytes:
    """Kafka's lz4 frame (64 KiB blocks), every block 64 KiB of zeros: no size is stated anywhere."""
    block = bytes(cramjam.lz4.compress_block(bytes(lz4.BLOCK_SIZE), store_size=False))
    body = (struct.pack("<I", len(block)) + block) * (size // lz4.BLOCK_SIZE)
    return lz4.compress(b"")[:7] + body + b"\x00\x00\x00\x00"


def zstd_rle_bomb(size: int = BOMB) -> bytes:
    """One zstd frame without a content size, made of 128 KiB RLE blocks of zeros (4 bytes each)."""
    block_size = 128 * 1024
    blocks = size // block_size
    rle = (block_size << 3 | 1 << 1).to_bytes(3, "little") + b"\x00"
    last = (block_size << 3 | 1 << 1 | 1).to_bytes(3, "little") + b"\x00"
    header = struct.pack("<I", 0xFD2FB528) + bytes([0x00, 7 << 3])  # no content size, a 128 KiB window
    return header + rle * (blocks - 1) + last


def zstd_frames_bomb(size: int = BOMB, frame: int = 64 * MIB) -> bytes:
    """Concatenated streamed zstd frames (no content size) of a repeated pattern: compressed blocks, whose
    headers bound their output only loosely (128 KiB each)."""
    compressor = cramjam.zstd.Compressor(level=3)
    compressor.compress(bytes(range(256)) * (frame // 256))
    one = bytes(compressor.finish())
    return one * (size // frame)


# ----- the bombs ------------------------------------------------------------------------------------------
def test_a_gzip_member_claiming_gigabytes_is_refused_before_inflating():
    bomb = gzip_single_member_bomb()
    assert len(bomb) < 4 * MIB
    error = _rejected("gzip", bomb, before_decoding=True)
    assert str(BOMB) in str(error)


def test_gzip_members_are_refused_once_the_cap_is_passed():
    bomb = gzip_member_bomb()
    assert len(bomb) < 4 * MIB
    _rejected("gzip", bomb, SMALL_CAP)


def test_a_gzip_trailer_that_lies_does_not_get_past_the_cap():
    bomb = bytearray(gzip_single_member_bomb(GIB))
    struct.pack_into("<I", bomb, len(bomb) - 4, 1000)  # says 1000 bytes
    _rejected("gzip", bytes(bomb), SMALL_CAP)


def test_a_snappy_bomb_is_refused_from_its_block_lengths():
    bomb = snappy_bomb(256 * MIB)
    _rejected("snappy", bomb, SMALL_CAP, before_decoding=True)
    raw = bytes(cramjam.snappy.compress_raw(bytes(8 * MIB)))
    _rejected("snappy", raw, MIB, before_decoding=True)  # a raw block: its stated length alone is enough


def test_an_lz4_bomb_is_refused_once_the_cap_is_passed():
    bomb = lz4_bomb()
    assert len(bomb) < 16 * MIB
    _rejected("lz4", bomb, SMALL_CAP)


def test_a_zstd_rle_bomb_is_refused_before_decoding():
    bomb = zstd_rle_bomb()
    assert len(bomb) < MIB
    error = _rejected("zstd", bomb, before_decoding=True)
    assert str(BOMB) in str(error)


def test_a_zstd_content_size_over_the_cap_is_refused_before_decoding():
    bomb = bytes(cramjam.zstd.compress(bytes(256 * MIB)))  # states its content size
    _rejected("zstd", bomb, SMALL_CAP, before_decoding=True)


def test_zstd_frames_without_sizes_are_refused_once_the_cap_is_passed():
    bomb = zstd_frames_bomb()
    assert len(bomb) < 8 * MIB
    assert bomb[4] & 0xC0 == 0 and not bomb[4] & 0x20  # no content size in the frame header
    _rejected("zstd", bomb, SMALL_CAP)


def test_a_bomb_inside_a_batch_names_the_codec_the_limit_and_the_position():
    builder = RecordBatchBuilder(compression="zstd")
    builder.append(b"k", b"v")
    batch = replace_records(bytes(builder.build()), zstd_rle_bomb())
    first = RecordBatchBuilder()
    first.append(b"k", b"plain")
    prefix = bytes(first.build())  # the bomb sits after this batch
    _, found = list(iter_batches(prefix + batch))
    with pytest.raises(CorruptRecordError) as info:
        list(found)
    message = str(info.value)
    assert "zstd" in message and f"limit of {MAX_DECOMPRESSED_BYTES} bytes" in message
    assert info.value.position == len(prefix) and info.value.offset == 0
    assert f"position {len(prefix)}" in message


# ----- legitimate batches -------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_large_legitimate_batches_decode_and_the_cap_is_exact(codec):
    values = [bytes([i % 251]) * (256 * 1024) for i in range(96)]  # 24 MiB of records, very compressible
    builder = RecordBatchBuilder(compression=codec)
    for value in values:
        builder.append(None, value)
    (batch,) = list(iter_batches(bytes(builder.build())))
    assert [r.value for r in batch] == values
    assert to_arrow(bytes(builder.build())).column("value").to_pylist() == values
    section = batch._buffer[batch.position + 61 : batch.position + batch.size_in_bytes]
    size = len(decompress(codec, section))
    assert size > 24 * MIB
    assert len(decompress(codec, section, max_size=size)) == size  # exactly at the cap: accepted
    with pytest.raises(CorruptRecordError, match=f"limit of {size - 1} bytes"):
        decompress(codec, section, max_size=size - 1)
