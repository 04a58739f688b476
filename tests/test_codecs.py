"""Codec framings as Kafka's Java streams write and read them (spec 1.5), checked against python-lz4,
python-snappy and stdlib gzip, which are independent of the cramjam code paths we use."""

from __future__ import annotations

import gzip as stdlib_gzip
import os
import random
import struct

import lz4.block
import lz4.frame
import pytest
import snappy as python_snappy
import zstandard

from kafkalog.errors import CorruptRecordError, UnsupportedCompressionTypeError
from kafkalog.record import compression
from kafkalog.record.checksums import crc32, crc32c, xxhash32
from kafkalog.record.compression import lz4 as kafka_lz4
from kafkalog.record.compression import snappy as kafka_snappy

RNG = random.Random(7)
TEXT = b"".join(RNG.choice([b"alpha ", b"beta ", b"gamma ", b"delta "]) for _ in range(60_000))  # ~330 KB
NOISE = RNG.randbytes(100_000)


def test_xxhash32_reference_values() -> None:
    """Published xxHash32 values (seed 0)."""
    assert xxhash32(b"") == 0x02CC5D05
    assert xxhash32(b"a") == 0x550D7456
    assert xxhash32(b"abc") == 0x32D153FF
    assert xxhash32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_crc_helpers() -> None:
    assert crc32c(b"Some String") == 608512271  # spec 16, from Kafka's Crc32CTest
    assert crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value


# ----- lz4 ---------------------------------------------------------------------------------------------


def test_lz4_frame_header_is_kafkas() -> None:
    framed = kafka_lz4.compress(b"x")
    assert framed[:7] == bytes.fromhex("04224d18604082")
    assert framed.endswith(b"\0\0\0\0")


@pytest.mark.parametrize("data", [b"", b"x", TEXT, NOISE], ids=["empty", "one", "text", "noise"])
def test_lz4_frames_read_by_python_lz4(data: bytes) -> None:
    framed = kafka_lz4.compress(data)
    assert lz4.frame.decompress(framed) == data
    assert bytes(kafka_lz4.decompress(framed)) == data


def test_lz4_incompressible_blocks_are_stored_with_the_high_bit() -> None:
    framed = kafka_lz4.compress(NOISE[:1000])
    (word,) = struct.unpack_from("<I", framed, 7)
    assert word == 0x80000000 | 1000
    assert framed[11:1011] == NOISE[:1000]


def test_lz4_blocks_are_64k_and_independent() -> None:
    framed = kafka_lz4.compress(TEXT)
    pos, sizes = 7, []
    while True:
        (word,) = struct.unpack_from("<I", framed, pos)
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        block = framed[pos + 4 : pos + 4 + size]
        raw = block if word & 0x80000000 else lz4.block.decompress(block, uncompressed_size=65536)
        sizes.append(len(raw))
        pos += 4 + size
    assert sizes[:-1] == [65536] * (len(sizes) - 1)
    assert sum(sizes) == len(TEXT)


@pytest.mark.parametrize("block_checksum", [False, True])
@pytest.mark.parametrize("content_checksum", [False, True])
@pytest.mark.parametrize("block_size", [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX4MB])
def test_lz4_reads_other_flags(block_checksum: bool, content_checksum: bool, block_size: int) -> None:
    framed = lz4.frame.compress(
        TEXT,
        block_size=block_size,
        block_linked=False,
        block_checksum=block_checksum,
        content_checksum=content_checksum,
        store_size=True,
    )
    assert bytes(kafka_lz4.decompress(framed)) == TEXT


def test_lz4_block_checksum_is_verified() -> None:
    framed = bytearray(lz4.frame.compress(b"hello " * 100, block_linked=False, block_checksum=True))
    framed[-9] ^= 0xFF  # a byte of the last block's checksum (block checksum, then the end mark)
    with pytest.raises(CorruptRecordError, match="Block checksum mismatch"):
        kafka_lz4.decompress(bytes(framed))


def test_lz4_dependent_blocks_are_refused() -> None:
    framed = lz4.frame.compress(TEXT, block_linked=True)
    with pytest.raises(CorruptRecordError, match="Dependent block stream"):
        kafka_lz4.decompress(framed)


def test_lz4_descriptor_checksum() -> None:
    framed = bytearray(kafka_lz4.compress(b"data"))
    framed[6] ^= 0x01
    with pytest.raises(CorruptRecordError, match="descriptor corrupted"):
        kafka_lz4.decompress(bytes(framed))


def test_lz4_magic_v0_descriptor_checksum_quirk() -> None:
    """Old (magic 0) writers hashed the magic bytes too; Kafka ignores the HC byte for magic 0 only."""
    framed = bytearray(kafka_lz4.compress(b"old data"))
    framed[6] = (xxhash32(bytes(framed[0:6])) >> 8) & 0xFF
    assert compression.decompress("lz4", bytes(framed), magic=0) == b"old data"
    with pytest.raises(CorruptRecordError, match="descriptor corrupted"):
        compression.decompress("lz4", bytes(framed), magic=2)


@pytest.mark.parametrize("cut", [3, 6, 9, 12, 20])
def test_lz4_truncated_frames(cut: int) -> None:
    framed = kafka_lz4.compress(TEXT)
    with pytest.raises(CorruptRecordError):
        kafka_lz4.decompress(framed[:cut])


def test_lz4_oversized_block_length() -> None:
    framed = bytearray(kafka_lz4.compress(b"abc"))
    struct.pack_into("<I", framed, 7, 70_000)
    with pytest.raises(CorruptRecordError, match="exceeded max"):
        kafka_lz4.decompress(bytes(framed))


# ----- snappy ------------------------------------------------------------------------------------------


def test_snappy_xerial_header_and_32k_blocks() -> None:
    framed = kafka_snappy.compress(TEXT)
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, total = 16, 0
    while pos < len(framed):
        (length,) = struct.unpack_from(">i", framed, pos)
        raw = python_snappy.uncompress(framed[pos + 4 : pos + 4 + length])
        assert len(raw) <= 32 * 1024
        total += len(raw)
        pos += 4 + length
    assert total == len(TEXT)


def test_snappy_reads_raw_blocks_and_xerial_from_python_snappy() -> None:
    assert bytes(kafka_snappy.decompress(python_snappy.compress(TEXT))) == TEXT
    block = python_snappy.compress(TEXT[:1000])
    framed = kafka_snappy.XERIAL_HEADER + struct.pack(">i", len(block)) + block
    assert bytes(kafka_snappy.decompress(framed)) == TEXT[:1000]


def test_snappy_refuses_an_impossible_claimed_length() -> None:
    """A raw block claiming 4 GiB from a few bytes is refused before anything is allocated."""
    with pytest.raises(CorruptRecordError, match="claims"):
        kafka_snappy.decompress(b"\xff\xff\xff\xff\x0f\x00\x01")


def test_snappy_bad_block_length() -> None:
    with pytest.raises(CorruptRecordError):
        kafka_snappy.decompress(kafka_snappy.XERIAL_HEADER + struct.pack(">i", 1000) + b"abc")


# ----- gzip and zstd -----------------------------------------------------------------------------------


def test_gzip_reads_concatenated_members() -> None:
    data = stdlib_gzip.compress(b"first ") + stdlib_gzip.compress(b"second")
    assert compression.decompress("gzip", data) == b"first second"
    assert stdlib_gzip.decompress(compression.compress("gzip", TEXT)) == TEXT


def test_gzip_truncated() -> None:
    with pytest.raises(CorruptRecordError):
        compression.decompress("gzip", compression.compress("gzip", TEXT)[:-10])


def test_zstd_interoperates_with_zstandard() -> None:
    assert zstandard.ZstdDecompressor().decompress(compression.compress("zstd", TEXT)) == TEXT
    streamed = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(TEXT)
    assert compression.decompress("zstd", streamed) == TEXT
    with pytest.raises(CorruptRecordError):
        compression.decompress("zstd", b"\x28\xb5\x2f\xfd garbage")


def test_zstd_is_not_allowed_below_magic_2() -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        compression.decompress("zstd", compression.compress("zstd", b"x"), magic=1)


def test_codec_ids_and_names() -> None:
    assert [compression.codec_id(n) for n in compression.CODEC_NAMES] == [0, 1, 2, 3, 4]
    assert compression.codec_id("UNCOMPRESSED") == 0
    for bad in (5, 7, -1, "lzma"):
        with pytest.raises(UnsupportedCompressionTypeError):
            compression.codec_id(bad)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_round_trip_random_sizes(codec: str) -> None:
    for size in (0, 1, 100, 65535, 65536, 65537, 200_000):
        data = os.urandom(size // 2) + b"z" * (size - size // 2)
        assert compression.decompress(codec, compression.compress(codec, data)) == data


def test_lz4_decodes_into_a_scratch_buffer_large_enough_and_ignores_a_small_one() -> None:
    """The log's validation passes a per-thread scratch buffer (no fresh pages per batch): a frame decodes to
    the same bytes into it, or into a buffer of its own when the scratch is too small."""
    import numpy as np

    framed = bytes(kafka_lz4.compress(TEXT))
    assert lz4.frame.decompress(framed) == TEXT  # the reference decoder agrees on the input
    scratch = np.empty(1 << 20, np.uint8)
    into = kafka_lz4.decompress(framed, into=scratch)
    assert bytes(into) == TEXT and np.shares_memory(np.asarray(into), scratch)
    small = np.empty(1024, np.uint8)
    own = kafka_lz4.decompress(framed, into=small)
    assert bytes(own) == TEXT and not np.shares_memory(np.asarray(own), small)
    # the limit still holds with a scratch buffer larger than it
    with pytest.raises(CorruptRecordError, match="limit"):
        compression.decompress("lz4", framed, max_size=len(TEXT) // 2, into=scratch)
