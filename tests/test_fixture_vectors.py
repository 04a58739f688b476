"""Record bytes from independent Kafka client codecs (fixtures/vectors), plus the spec's vectors (§15, §16).

Every expected value here was read off the fixture bytes by hand (the hex is quoted in comments) or
taken from the spec / the fixtures' JSON; none comes from running our own code.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import cramjam
import pytest

from conftest import FIXTURES, fixture_path
from kafkalog.errors import CorruptRecordError, InvalidRecordError
from kafkalog.record import (
    ControlRecordType,
    LegacyBatch,
    Record,
    RecordBatch,
    default_partition,
    end_transaction_marker,
    iter_batches,
    murmur2,
    to_arrow,
)
from kafkalog.record.checksums import crc32c
from kafkalog.record.compression import snappy
from kafkalog.record.partitioner import to_positive
from kafkalog.record.varint import (
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    read_unsigned_varint,
    read_varint,
    read_varlong,
)

INT_MAX, INT_MIN = 2**31 - 1, -(2**31)
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


def vector(*parts: str) -> Path:
    """Path of a file under fixtures/vectors."""
    return fixture_path("vectors", *parts)


def read(*parts: str) -> bytes:
    """Bytes of a file under fixtures/vectors."""
    return vector(*parts).read_bytes()


def records_of(batches: list) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of every record of ``batches``."""
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for b in batches for r in b]


def arrow_rows(buf: bytes, include_control: bool = False) -> list[tuple]:
    """The same tuples from ``to_arrow``."""
    t = to_arrow(buf, include_control=include_control)
    headers = [tuple((h["key"], h["value"]) for h in hs) for hs in t.column("headers").to_pylist()]
    return list(
        zip(
            t.column("offset").to_pylist(),
            t.column("timestamp").cast("int64").to_pylist(),
            t.column("key").to_pylist(),
            t.column("value").to_pylist(),
            headers,
            strict=True,
        )
    )


# =====================================================================================================
# (a) kafka-python-vectors
# =====================================================================================================
# records_v2_kafka0.11_broker.bin, 299 bytes, four v2 batches read field by field:
#   @0   baseOffset 0, length 0x3b (71 bytes), PLE 1, crc 0318a270, attrs 0, lastOffsetDelta 0,
#        ts 0x15dff7b063c, producer -1/-1/-1, count 1; record 12 00 00 00 01 06 "123" 00
#   @71  baseOffset 1, length 0x40 (76), PLE 2, crc c85cbd23, lastOffsetDelta 1, baseTs 0x15dff7cdd6c,
#        maxTs 0x15dff7cde14, count 2; records 0c 00 00 00 01 00 00 / 0e 00 d0 02 02 01 00 00
#        (tsDelta d0 02 = zigzag 336 = 168, offsetDelta 1, key null, value empty)
#   @147 baseOffset 3, length 0x3b (71), PLE 2, crc 2e0b85b7, ts 0x15dff7ce79d, count 1; value "123"
#   @218 baseOffset 0, length 0x45 (81), PLE 0, crc 5cd8ef52, ts 0x16585b6f3c1, count 1;
#        record 26 00 00 00 01 06 "hdr" 02 08 "hkey" 08 "hval"
V2_BATCHES = [
    # position, size, baseOffset, lastOffset, PLE, crc, count, maxTimestamp
    (0, 71, 0, 0, 1, 0x0318A270, 1, 0x15DFF7B063C),
    (71, 76, 1, 2, 2, 0xC85CBD23, 2, 0x15DFF7CDE14),
    (147, 71, 3, 3, 2, 0x2E0B85B7, 1, 0x15DFF7CE79D),
    (218, 81, 0, 0, 0, 0x5CD8EF52, 1, 0x16585B6F3C1),
]
V2_RECORDS = [
    (0, 0x15DFF7B063C, None, b"123", ()),
    (1, 0x15DFF7CDD6C, None, b"", ()),
    (2, 0x15DFF7CDD6C + 168, None, b"", ()),
    (3, 0x15DFF7CE79D, None, b"123", ()),
    (0, 0x16585B6F3C1, None, b"hdr", (("hkey", b"hval"),)),
]
# records_v1_kafka0.10_broker.bin: four magic-1 messages (offset, size, crc, magic 1, attrs 0, ts, key, value)
V1_MESSAGES = [
    # position, size, crc, record
    (0, 37, 0x478628C2, (0, 0x15E1867ABAE, None, b"123", ())),
    (37, 34, 0xEF98C920, (1, 0x15E1867AFC0, None, b"", ())),
    (71, 34, 0x5FAFFB5E, (2, 0x15E1867B072, None, b"", ())),
    (105, 37, 0xA8125720, (3, 0x15E1867B803, None, b"123", ())),
]
# records_v0_kafka0.10_broker.bin: four magic-0 messages, no timestamps
V0_MESSAGES = [
    (0, 29, 0xFEB01DBF, (0, -1, None, b"123", ())),
    (29, 26, 0x795748E0, (1, -1, None, b"", ())),
    (55, 26, 0x795748E0, (2, -1, None, b"", ())),
    (81, 29, 0xFEB01DBF, (3, -1, None, b"123", ())),
]


def test_kafka_python_v2_broker_capture() -> None:
    buf = read("kafka-python-vectors", "records_v2_kafka0.11_broker.bin")
    assert len(buf) == 299
    batches = list(iter_batches(buf))
    assert all(isinstance(b, RecordBatch) for b in batches)
    got = [
        (
            b.position,
            b.size_in_bytes,
            b.base_offset,
            b.last_offset,
            b.partition_leader_epoch,
            b.crc,
            b.record_count,
            b.max_timestamp,
        )
        for b in batches
    ]
    assert got == V2_BATCHES
    for b in batches:
        b.ensure_valid()
        assert b.is_valid()
        assert b.magic == 2 and b.compression == "none" and b.timestamp_type == "CreateTime"
        assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
        assert not b.is_transactional and not b.is_control
    assert records_of(batches) == V2_RECORDS
    assert all(r.sequence == -1 for b in batches for r in b)
    assert arrow_rows(buf) == V2_RECORDS


def test_kafka_python_v2_header_on_fourth_batch() -> None:
    batches = list(iter_batches(read("kafka-python-vectors", "records_v2_kafka0.11_broker.bin")))
    assert [len(r.headers) for b in batches for r in b] == [0, 0, 0, 0, 1]
    (record,) = batches[3]
    assert record.headers == (("hkey", b"hval"),)


@pytest.mark.parametrize(
    ("name", "magic", "messages", "ts_type"),
    [
        ("records_v1_kafka0.10_broker.bin", 1, V1_MESSAGES, "CreateTime"),
        ("records_v0_kafka0.10_broker.bin", 0, V0_MESSAGES, "NoTimestampType"),
    ],
    ids=["v1", "v0"],
)
def test_kafka_python_legacy_broker_capture(name: str, magic: int, messages: list, ts_type: str) -> None:
    buf = read("kafka-python-vectors", name)
    batches = list(iter_batches(buf))
    assert all(isinstance(b, LegacyBatch) for b in batches)
    assert [(b.position, b.size_in_bytes, b.crc) for b in batches] == [m[:3] for m in messages]
    assert sum(b.size_in_bytes for b in batches) == len(buf)
    for b in batches:
        b.ensure_valid()
        assert b.crc == zlib.crc32(buf[b.position + 16 : b.position + b.size_in_bytes])
        assert b.magic == magic and b.compression == "none" and b.timestamp_type == ts_type
        assert b.record_count == 1 and b.base_offset == b.last_offset
    assert records_of(batches) == [m[3] for m in messages]
    assert arrow_rows(buf) == [m[3] for m in messages]


def test_kafka_python_control_batch_with_bad_crc_is_invalid() -> None:
    # 94 bytes: baseOffset 0, length 0x52, PLE 0, magic 2, crc 6597ffd0, attrs 0x0020 (control),
    # base/max timestamp 00000000 0098967f (9999999); one record 40 00 00 00 08 00000000 2c "opaque-control-message" 00
    buf = read("kafka-python-vectors", "control_batch_abort_v2.bin")
    (batch,) = list(iter_batches(buf))
    assert isinstance(batch, RecordBatch)
    assert batch.size_in_bytes == len(buf) == 94
    assert batch.crc == 0x6597FFD0
    assert batch.crc != crc32c(buf[21:])
    assert batch.is_control and not batch.is_transactional and batch.record_count == 1
    assert batch.partition_leader_epoch == 0 and batch.max_timestamp == 0x98967F
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError):
        batch.ensure_valid()
    with pytest.raises(CorruptRecordError):
        to_arrow(buf, include_control=True)
    # The structure still decodes (Kafka's iterator does not check the CRC).
    assert records_of([batch]) == [(0, 9_999_999, b"\0\0\0\0", b"opaque-control-message", ())]


# =====================================================================================================
# (b) sarama-vectors
# =====================================================================================================
SARAMA_TS = 0x1588DCD5938  # baseTimestamp bytes 00 00 01 58 8d cd 59 38
# One record, 21 bytes: 28 00 0a 00 08 01020304 06 050607 02 06 08090a 04 0b0c
# (length 20, tsDelta 5, offsetDelta 0, key 01020304, value 050607, one header 08090a -> 0b0c)
SARAMA_RECORD_BYTES = bytes.fromhex("28000a00080102030406050607020608090a040b0c")
SARAMA_RECORD = (0, SARAMA_TS + 5, b"\x01\x02\x03\x04", b"\x05\x06\x07", (("\x08\t\n", b"\x0b\x0c"),))


def sarama_batch(name: str) -> tuple[bytes, RecordBatch]:
    """The single v2 batch of a sarama record_batches_v2 file."""
    buf = read("sarama-vectors", "record_batches_v2", name)
    batches = list(iter_batches(buf))
    assert len(batches) == 1 and isinstance(batches[0], RecordBatch)
    assert batches[0].size_in_bytes == len(buf)
    return buf, batches[0]


@pytest.mark.parametrize(
    ("name", "is_control"), [("empty_record.bin", False), ("control_batch.bin", True)], ids=["empty", "control"]
)
def test_sarama_batch_without_records(name: str, is_control: bool) -> None:
    # 61 bytes: length 0x31, attrs 0x0000 / 0x0020, every other field 0, recordsCount 0
    buf, batch = sarama_batch(name)
    assert len(buf) == 61
    batch.ensure_valid()
    assert batch.is_control is is_control and not batch.is_transactional
    assert batch.record_count == 0 and batch.base_offset == 0 and batch.last_offset == 0
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (0, 0, 0)
    assert batch.base_timestamp == 0 and batch.max_timestamp == 0
    assert list(batch) == []
    assert to_arrow(buf, include_control=True).num_rows == 0


@pytest.mark.parametrize(
    ("name", "codec", "size"),
    [
        ("uncompressed_record.bin", "none", 82),
        ("gzipped_record.bin", "gzip", 107),
        ("snappy_compressed_record.bin", "snappy", 104),
        ("lz4_compressed_record.bin", "lz4", 101),
    ],
    ids=["none", "gzip", "snappy-xerial", "lz4-frame"],
)
def test_sarama_batch_with_one_record(name: str, codec: str, size: int) -> None:
    buf, batch = sarama_batch(name)
    assert len(buf) == size
    batch.ensure_valid()
    assert batch.compression == codec and batch.timestamp_type == "CreateTime"
    assert batch.record_count == 1 and batch.last_offset == 0
    assert batch.base_timestamp == SARAMA_TS and batch.max_timestamp == 0  # sarama writes maxTimestamp 0
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (0, 0, 0)
    assert bytes(batch.records_section()) == SARAMA_RECORD_BYTES
    (record,) = list(batch)
    assert (record.offset, record.timestamp, record.key, record.value, record.headers) == SARAMA_RECORD
    assert record.sequence == 0  # baseSequence 0 + offsetDelta 0
    assert arrow_rows(buf) == [SARAMA_RECORD]


def test_sarama_compressed_sections_by_independent_codecs() -> None:
    """The compressed record sections hold the same 21 bytes, by zlib, cramjam and the lz4 frame layout."""
    gz = read("sarama-vectors", "record_batches_v2", "gzipped_record.bin")[61:]
    assert zlib.decompress(gz, wbits=31) == SARAMA_RECORD_BYTES
    sn = read("sarama-vectors", "record_batches_v2", "snappy_compressed_record.bin")[61:]
    assert sn[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (block_len,) = struct.unpack_from(">i", sn, 16)
    assert bytes(cramjam.snappy.decompress_raw(sn[20 : 20 + block_len])) == SARAMA_RECORD_BYTES
    lz = read("sarama-vectors", "record_batches_v2", "lz4_compressed_record.bin")[61:]
    # magic 04224d18, FLG 0x64, BD 0x40, HC, block length 0x80000015 LE (stored, 21 bytes), end mark
    assert lz[:7] == bytes.fromhex("04224d186440a7")
    (block,) = struct.unpack_from("<I", lz, 7)
    assert block == 0x80000000 | 21
    assert lz[11:32] == SARAMA_RECORD_BYTES and lz[32:36] == bytes(4)


def legacy_body(name: str) -> bytes:
    """A sarama legacy message body (starting at its CRC) behind a 12-byte offset-0/size prefix."""
    body = read("sarama-vectors", "legacy_message_bodies", name)
    return struct.pack(">qi", 0, len(body)) + body


def legacy_message(name: str) -> LegacyBatch:
    """The single legacy message of a prefixed sarama body, via iter_batches."""
    buf = legacy_body(name)
    batches = list(iter_batches(buf))
    assert len(batches) == 1 and isinstance(batches[0], LegacyBatch), batches
    assert batches[0].size_in_bytes == len(buf)
    return batches[0]


def _crc_ok(name: str) -> bool:
    body = read("sarama-vectors", "legacy_message_bodies", name)
    return struct.unpack_from(">I", body)[0] == zlib.crc32(body[4:])


# name -> (magic, codec, records); body bytes quoted for each
LEGACY_READABLE = {
    # a7ec6803 00 00 ffffffff ffffffff
    "emptyMessage.bin": (0, "none", [(0, -1, None, None, ())]),
    # cc2f79d9 01 00 0000000000000000 ffffffff ffffffff
    "emptyV1Message.bin": (1, "none", [(0, 0, None, None, ())]),
    # magic 0 gzip wrapper; inner: two magic-0 messages at absolute offsets 0, 1: key null, value empty
    "emptyBulkGzipMessage.bin": (0, "gzip", [(0, -1, None, b"", ()), (1, -1, None, b"", ())]),
    # magic 0 xerial-snappy wrapper; inner: offsets 0, 1, key empty (length 0), value empty
    "emptyBulkSnappyMessage.bin": (0, "snappy", [(0, -1, b"", b"", ()), (1, -1, b"", b"", ())]),
    # magic 1 lz4 wrapper (offset 0: inner offsets taken as-is) holding two *magic 0* messages, offsets 0, 1,
    # key null, value empty. Kafka's reading iterator (DeepRecordsIterator, ensureMatchingMagic=false)
    # accepts inner messages of another magic; only append validation rejects them. Magic 0 has no timestamp.
    "emptyBulkLZ4Message.bin": (1, "lz4", [(0, -1, None, b"", ()), (1, -1, None, b"", ())]),
}
# Wrappers Kafka refuses to read (spec 1.7: an empty wrapper, or zstd below magic 2 -> InvalidRecordException)
LEGACY_REFUSED = {
    "emptyGzipMessage.bin": (0, "gzip"),  # gzip of nothing
    "emptyLZ4Message.bin": (1, "lz4"),  # lz4 frame with no block
    "emptyZSTDMessage.bin": (1, "zstd"),  # zstd with magic 1
    "emptyBulkZSTDMessage.bin": (1, "zstd"),  # zstd with magic 1, even with inner messages
}


def test_every_sarama_file_is_covered() -> None:
    legacy = {p.name for p in vector("sarama-vectors", "legacy_message_bodies").iterdir()}
    assert legacy == set(LEGACY_READABLE) | set(LEGACY_REFUSED) | {"emptyV2Message.bin"}
    v2 = {p.name for p in vector("sarama-vectors", "record_batches_v2").iterdir()}
    assert v2 == {
        "empty_record.bin",
        "control_batch.bin",
        "uncompressed_record.bin",
        "gzipped_record.bin",
        "snappy_compressed_record.bin",
        "lz4_compressed_record.bin",
    }


@pytest.mark.parametrize("name", sorted(LEGACY_READABLE))
def test_sarama_legacy_message(name: str) -> None:
    magic, codec, expected = LEGACY_READABLE[name]
    message = legacy_message(name)
    assert _crc_ok(name)
    message.ensure_valid()
    assert message.is_valid()
    assert message.magic == magic and message.compression == codec
    assert records_of([message]) == expected
    assert message.record_count == len(expected)
    assert message.base_offset == expected[0][0]


@pytest.mark.parametrize("name", sorted(LEGACY_REFUSED))
def test_sarama_legacy_wrapper_kafka_refuses(name: str) -> None:
    magic, codec = LEGACY_REFUSED[name]
    message = legacy_message(name)
    assert _crc_ok(name)
    message.ensure_valid()
    assert message.magic == magic and message.compression == codec
    with pytest.raises(InvalidRecordError):
        list(message)


def test_sarama_empty_v2_message_has_bad_crc() -> None:
    # a7ec6803 02 00 ffffffff ffffffff: emptyMessage's CRC, but magic 2
    name = "emptyV2Message.bin"
    assert not _crc_ok(name)
    buf = legacy_body(name)
    (batch,) = list(iter_batches(buf))
    assert batch.magic == 2
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError):
        batch.ensure_valid()
    as_legacy = LegacyBatch(buf, 0)
    assert not as_legacy.is_valid()
    with pytest.raises(CorruptRecordError):
        as_legacy.ensure_valid()


# =====================================================================================================
# (c) kafka-rust-testdata
# =====================================================================================================
RUST = ("kafka-rust-testdata", "test-data")
# Fetch v0 response: correlationId, 1 topic "my-topic", 1 partition 0, error 0, high watermark,
# message-set size: 40 bytes before the message set.
RESPONSE_HEADER = 40


def lines(name: str) -> list[bytes]:
    """One produced message per line of fetch1.txt / fetch2.txt (the file ends with a newline)."""
    text = read(*RUST, name)
    assert text.endswith(b"\n")
    return text[:-1].split(b"\n")


MSGSETS = {
    # derived msgset -> (lines file, codec, shallow messages)
    "fetch1.mytopic.1p.nocompression.kafka.0821": ("fetch1.txt", "none", 42),
    "fetch1.mytopic.1p.gzip.kafka.0821": ("fetch1.txt", "gzip", 1),
    "fetch1.mytopic.1p.snappy.kafka.0821": ("fetch1.txt", "snappy", 1),
    "fetch1.mytopic.1p.snappy.kafka.0822": ("fetch1.txt", "snappy", 1),
    "fetch2.mytopic.nocompression.kafka.0900": ("fetch2.txt", "none", 1),
}


def msgset(response: str) -> bytes:
    """A derived message set, checked to be the tail of its fetch response after the 40-byte header."""
    data = read(*RUST, "derived", f"{response}.my-topic-0.msgset")
    whole = read(*RUST, response)
    assert whole[RESPONSE_HEADER:] == data
    assert struct.unpack_from(">i", whole, RESPONSE_HEADER - 4)[0] == len(data)
    return data


@pytest.mark.parametrize("response", sorted(MSGSETS))
def test_kafka_rust_message_set(response: str) -> None:
    text_file, codec, shallow = MSGSETS[response]
    expected_values = lines(text_file)
    data = msgset(response)
    whole = read(*RUST, response)
    high_watermark = struct.unpack_from(">q", whole, RESPONSE_HEADER - 12)[0]
    assert high_watermark == len(expected_values)  # one message per line, offsets 0..n-1
    batches = list(iter_batches(data))
    assert len(batches) == shallow
    assert sum(b.size_in_bytes for b in batches) == len(data)
    for b in batches:
        assert isinstance(b, LegacyBatch) and b.magic == 0 and b.compression == codec
        b.ensure_valid()
    expected = [(i, -1, None, v, ()) for i, v in enumerate(expected_values)]
    assert records_of(batches) == expected
    assert arrow_rows(data) == expected


@pytest.mark.parametrize("response", sorted(r for r, v in MSGSETS.items() if v[1] != "none"))
def test_kafka_rust_wrapper_holds_absolute_offsets(response: str) -> None:
    (wrapper,) = list(iter_batches(msgset(response)))
    assert wrapper.offset == 41 and wrapper.last_offset == 41  # the wrapper carries the last inner offset
    assert wrapper.base_offset == 0 and wrapper.record_count == 42
    assert [r.offset for r in wrapper] == list(range(42))


def test_kafka_rust_invalid_crc_detected() -> None:
    name = "fetch2.mytopic.nocompression.invalid_crc.kafka.0900"
    data = msgset(name)
    good = msgset("fetch2.mytopic.nocompression.kafka.0900")
    assert data[:12] == good[:12] and data[16:] == good[16:] and data[12:16] != good[12:16]
    (message,) = list(iter_batches(data))
    assert not message.is_valid()
    with pytest.raises(CorruptRecordError):
        message.ensure_valid()
    with pytest.raises(CorruptRecordError):
        to_arrow(data)


def test_kafka_rust_snappy_chunked_stream() -> None:
    framed = read(*RUST, "fetch1.snappy.chunked.4k")
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert snappy.decompress(framed) == read(*RUST, "fetch1.txt")


# =====================================================================================================
# (d) hash-vectors and the spec's vectors (§15, §16)
# =====================================================================================================
def _murmur2_vectors() -> list[dict]:
    path = FIXTURES / "vectors" / "hash-vectors" / "murmur2_vectors.json"
    return json.loads(path.read_text())["vectors"] if path.exists() else []


def _crc32c_vectors() -> list[dict]:
    path = FIXTURES / "vectors" / "hash-vectors" / "crc32c_vectors.json"
    return json.loads(path.read_text())["vectors"] if path.exists() else []


@pytest.mark.parametrize("case", _murmur2_vectors(), ids=lambda c: c["input_utf8"][:24])
def test_murmur2_vector(case: dict) -> None:
    key = case["input_utf8"].encode("utf-8")
    assert murmur2(key) == case["murmur2_int32"]
    assert to_positive(murmur2(key)) == case["toPositive"]
    assert default_partition(key, 10) == case["partition_of_10"]


def test_murmur2_vectors_file_present() -> None:
    data = json.loads(vector("hash-vectors", "murmur2_vectors.json").read_text())
    assert len(data["vectors"]) == len(_murmur2_vectors()) == 6


@pytest.mark.parametrize("case", _crc32c_vectors(), ids=lambda c: c.get("input_utf8", c.get("input_file")))
def test_crc32c_vector(case: dict) -> None:
    if "input_file" in case:
        data = read("hash-vectors", case["input_file"])
        assert not data.endswith(b"\n")
    else:
        data = case["input_utf8"].encode("utf-8")
    assert crc32c(data) == int(case["crc32c"], 16)


def test_crc32c_vectors_file_present() -> None:
    data = json.loads(vector("hash-vectors", "crc32c_vectors.json").read_text())
    assert len(data["vectors"]) == len(_crc32c_vectors()) == 4


SPEC_MURMUR2 = [
    ("21", -973932308, 0),
    ("foobar", -790332482, 0),
    ("a-little-bit-long-string", -985981536, 2),
    ("a-little-bit-longer-string", -1486304829, 2),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 2),
    ("abc", 479470107, 0),
]


@pytest.mark.parametrize(("key", "hashed", "partition"), SPEC_MURMUR2, ids=[k[:24] for k, _, _ in SPEC_MURMUR2])
def test_spec_murmur2_table(key: str, hashed: int, partition: int) -> None:
    assert murmur2(key.encode()) == hashed
    assert default_partition(key.encode(), 3) == partition


def test_spec_crc32c_vector() -> None:
    assert crc32c(b"Some String") == 608512271 == 0x2445290F


VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7E"),
    (-64, "7F"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "FE7F"),
    (-8192, "FF7F"),
    (8192, "808001"),
    (-8193, "818001"),
    (1048575, "FEFF7F"),
    (-1048576, "FFFF7F"),
    (1048576, "80808001"),
    (-1048577, "81808001"),
    (134217727, "FEFFFF7F"),
    (-134217728, "FFFFFF7F"),
    (134217728, "8080808001"),
    (-134217729, "8180808001"),
    (INT_MAX, "FEFFFFFF0F"),
    (INT_MIN, "FFFFFFFF0F"),
]
UNSIGNED_VARINTS = [
    (0, "00"),
    (-1, "FFFFFFFF0F"),
    (1, "01"),
    (63, "3F"),
    (-64, "C0FFFFFF0F"),
    (64, "40"),
    (8191, "FF3F"),
    (-8192, "80C0FFFF0F"),
    (8192, "8040"),
    (-8193, "FFBFFFFF0F"),
    (1048575, "FFFF3F"),
    (1048576, "808040"),
    (INT_MAX, "FFFFFFFF07"),
    (INT_MIN, "8080808008"),
]
_LONG_POSITIVE = [
    (17179869184, "808080808001"),
    (2199023255551, "FEFFFFFFFF7F"),
    (2199023255552, "80808080808001"),
    (281474976710655, "FEFFFFFFFFFF7F"),
    (281474976710656, "8080808080808001"),
    (36028797018963967, "FEFFFFFFFFFFFF7F"),
    (36028797018963968, "808080808080808001"),
    (4611686018427387903, "FEFFFFFFFFFFFFFF7F"),
    (4611686018427387904, "80808080808080808001"),
]


def _negative_counterpart(value: int, hexed: str) -> tuple[int, str]:
    """Spec §16: the negative counterpart -(v+1) is the same bytes with the first byte +1."""
    raw = bytearray.fromhex(hexed)
    raw[0] += 1
    return -(value + 1), raw.hex().upper()


VARLONGS = [
    *VARINTS,
    (17179869183, "FEFFFFFF7F"),
    (-17179869184, "FFFFFFFF7F"),
    *_LONG_POSITIVE,
    *(_negative_counterpart(v, h) for v, h in _LONG_POSITIVE),
    (LONG_MAX, "FEFFFFFFFFFFFFFFFF01"),
    (LONG_MIN, "FFFFFFFFFFFFFFFFFF01"),
]


@pytest.mark.parametrize(("value", "hexed"), VARINTS, ids=[str(v) for v, _ in VARINTS])
def test_spec_varint(value: int, hexed: str) -> None:
    raw = bytes.fromhex(hexed)
    assert encode_varint(value) == raw
    assert read_varint(raw, 0) == (value, len(raw))
    assert read_varint(b"\xaa" + raw + b"\x00", 1) == (value, 1 + len(raw))


@pytest.mark.parametrize(("value", "hexed"), UNSIGNED_VARINTS, ids=[str(v) for v, _ in UNSIGNED_VARINTS])
def test_spec_unsigned_varint(value: int, hexed: str) -> None:
    raw = bytes.fromhex(hexed)
    assert encode_unsigned_varint(value) == raw
    assert read_unsigned_varint(raw, 0) == (value, len(raw))


@pytest.mark.parametrize(("value", "hexed"), VARLONGS, ids=[str(v) for v, _ in VARLONGS])
def test_spec_varlong(value: int, hexed: str) -> None:
    raw = bytes.fromhex(hexed)
    assert encode_varlong(value) == raw
    assert read_varlong(raw, 0) == (value, len(raw))


def test_spec_varlong_negative_counterparts_listed() -> None:
    assert _negative_counterpart(17179869183, "FEFFFFFF7F") == (-17179869184, "FFFFFFFF7F")
    assert _negative_counterpart(LONG_MAX, "FEFFFFFFFFFFFFFFFF01") == (LONG_MIN, "FFFFFFFFFFFFFFFFFF01")


@pytest.mark.parametrize(
    ("reader", "hexed"),
    [
        (read_varint, "FFFFFFFFFF01"),
        (read_unsigned_varint, "FFFFFFFFFF01"),
        (read_varlong, "FF" * 10 + "01"),
    ],
    ids=["varint", "unsigned-varint", "varlong"],
)
def test_spec_invalid_varints(reader, hexed: str) -> None:
    with pytest.raises(InvalidRecordError):
        reader(bytes.fromhex(hexed), 0)


SPEC_BATCH = bytes.fromhex(
    "000000000000000000000040ffffffff02db5e9cdd0000000000000000018bcfe568000000018bcfe56800ffffffffffffffff"
    "ffffffffffff000000011c000000066b65790a76616c756500"
)
SPEC_COMMIT = bytes.fromhex(
    "000000000000000a00000042000000030240d514e90030000000000000018bcfe568000000018bcfe5680000000000000003e8"
    "0005ffffffff000000012000000008000000010c00000000000700"
)


def test_spec_section16_data_batch() -> None:
    (batch,) = list(iter_batches(SPEC_BATCH))
    assert isinstance(batch, RecordBatch) and batch.size_in_bytes == 76
    batch.ensure_valid()
    assert batch.crc == 0xDB5E9CDD and batch.partition_leader_epoch == -1
    assert batch.timestamp_type == "CreateTime" and batch.max_timestamp == 1700000000000
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert list(batch) == [Record(0, 1700000000000, b"key", b"value", (), -1)]
    assert arrow_rows(SPEC_BATCH) == [(0, 1700000000000, b"key", b"value", ())]


def test_spec_section16_commit_marker() -> None:
    (batch,) = list(iter_batches(SPEC_COMMIT))
    assert isinstance(batch, RecordBatch) and batch.size_in_bytes == 78
    batch.ensure_valid()
    assert batch.base_offset == 10 and batch.partition_leader_epoch == 3 and batch.attributes == 0x30
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1000, 5, -1)
    (record,) = list(batch)
    assert (record.offset, record.timestamp) == (10, 1700000000000)
    assert record.key == b"\x00\x00\x00\x01" and record.value == b"\x00\x00\x00\x00\x00\x07"
    marker = end_transaction_marker(record)
    assert marker.type == ControlRecordType.COMMIT and marker.coordinator_epoch == 7
    assert to_arrow(SPEC_COMMIT).num_rows == 0
    assert arrow_rows(SPEC_COMMIT, include_control=True) == [(10, 1700000000000, record.key, record.value, ())]
