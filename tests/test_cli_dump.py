"""``kafkalog dump``: Kafka's DumpLogSegments output (spec section 14), line for line.

Every expected line is built here from the fixture bytes (struct-unpacked headers, a small record decoder
written in this file, the ``crc32c`` package) or from Kafka's own printout (``kafka-written/*/expected-*.txt``),
in the format the spec gives; never from kafkalog's own output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import crc32c
from click.testing import CliRunner

from conftest import fixture_path
from kafkalog.cli import main

YANG = ("broker-logs", "yangxuhao-kafka270", "kafka-logs", "test_topic-0")
TXN = ("kafka-written", "transactional-commit")
WILLIAM = ("broker-logs", "william0423-kafka", "kafka-logs", "__consumer_offsets-28")
DONALDY39 = ("broker-logs", "donaldy-kafka271", "kafka-logs", "__consumer_offsets-39")
SEG0 = "00000000000000000000"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def run(*args: str):
    return CliRunner().invoke(main, ["dump", *args])


# ----------------------------------------------------------------------------- an independent little reader


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


def read_v2_file(path: Path) -> list[dict]:
    """Batches of an uncompressed v2 file: header fields (spec 1.2) and their records (spec 1.3)."""
    data = path.read_bytes()
    out, pos = [], 0
    while len(data) - pos >= 17:
        base, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break
        (ple, magic, crc, attrs, lod, base_ts, max_ts, pid, epoch, base_seq, count) = struct.unpack_from(
            ">ibIhiqqqhii", data, pos + 12
        )
        assert magic == 2
        end = pos + 12 + length
        b = dict(
            position=pos,
            size=12 + length,
            base=base,
            last=base + lod,
            ple=ple,
            crc=crc,
            valid=crc == crc32c.crc32c(data[pos + 21 : end]),
            attrs=attrs,
            count=count,
            base_ts=base_ts,
            max_ts=max_ts,
            pid=pid,
            epoch=epoch,
            base_seq=base_seq,
            last_seq=-1 if base_seq == -1 else base_seq + lod,
            records=[],
        )
        assert attrs & 7 == 0, "this reader only handles uncompressed batches"
        rpos = pos + 61
        for _ in range(count):
            _, rpos = varint(data, rpos)
            rpos += 1
            ts_delta, rpos = varint(data, rpos)
            off_delta, rpos = varint(data, rpos)
            klen, rpos = varint(data, rpos)
            key = None if klen < 0 else data[rpos : rpos + klen]
            rpos += max(klen, 0)
            vlen, rpos = varint(data, rpos)
            value = None if vlen < 0 else data[rpos : rpos + vlen]
            rpos += max(vlen, 0)
            nh, rpos = varint(data, rpos)
            hkeys = []
            for _ in range(nh):
                hk, rpos = varint(data, rpos)
                hkeys.append(data[rpos : rpos + hk].decode())
                rpos += hk
                hv, rpos = varint(data, rpos)
                rpos += max(hv, 0)
            b["records"].append(
                dict(
                    offset=base + off_delta,
                    ts=max_ts if attrs & 8 else base_ts + ts_delta,
                    key=key,
                    value=value,
                    seq=-1 if base_seq < 0 else base_seq + off_delta,
                    hkeys=hkeys,
                )
            )
        out.append(b)
        pos = end
    return out


def batch_line(b: dict, position: int | None = None) -> str:
    """The spec's v2 batch line."""
    ts_type = "LogAppendTime" if b["attrs"] & 8 else "CreateTime"
    horizon = f"OptionalLong[{b['base_ts']}]" if b["attrs"] & 0x40 else "OptionalLong.empty"
    return (
        f"baseOffset: {b['base']} lastOffset: {b['last']} count: {b['count']} baseSequence: {b['base_seq']} "
        f"lastSequence: {b['last_seq']} producerId: {b['pid']} producerEpoch: {b['epoch']} "
        f"partitionLeaderEpoch: {b['ple']} isTransactional: {str(bool(b['attrs'] & 0x10)).lower()} "
        f"isControl: {str(bool(b['attrs'] & 0x20)).lower()} deleteHorizonMs: {horizon} "
        f"position: {b['position'] if position is None else position} {ts_type}: {b['max_ts']} size: {b['size']} "
        f"magic: 2 compresscodec: {CODECS[b['attrs'] & 7]} crc: {b['crc']} isvalid: {str(b['valid']).lower()}"
    )


def record_line(b: dict, r: dict) -> str:
    ts_type = "LogAppendTime" if b["attrs"] & 8 else "CreateTime"
    ks = -1 if r["key"] is None else len(r["key"])
    vs = -1 if r["value"] is None else len(r["value"])
    return (
        f"| offset: {r['offset']} {ts_type}: {r['ts']} keySize: {ks} valueSize: {vs} "
        f"sequence: {r['seq']} headerKeys: [{','.join(r['hkeys'])}]"
    )


def kv_fields(line: str) -> dict[str, str]:
    """The key=value fields of a kafka-written expected-*.txt line (quoted values kept whole)."""
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))


def kafka_written(folder: str) -> tuple[list[dict], list[dict]]:
    """(batches, records) as Kafka's reader printed them in expected-records.txt."""
    batches, records = [], []
    for line in fixture_path(*TXN[:1], folder, "expected-records.txt").read_text().splitlines():
        if line.startswith("batch "):
            f = kv_fields(line)
            batches.append(f)
        elif line.startswith("  record "):
            f = kv_fields(line)
            f["hkeys"] = re.findall(r"h\[(\w+)\]=", line)
            f["batch"] = batches[-1]
            records.append(f)
    return batches, records


# ------------------------------------------------------------------------------------------- .log, golden


def test_log_golden_yangxuhao_with_payloads() -> None:
    log = fixture_path(*YANG, f"{SEG0}.log")
    batches = read_v2_file(log)
    assert len(batches) == 4
    expected = [f"Dumping {log}", "Log starting offset: 0"]
    for b in batches:
        expected.append(batch_line(b))
        for r in b["records"]:
            assert r["key"] is None
            expected.append(record_line(b, r) + f" payload: {r['value'].decode()}")
    result = run("--files", str(log), "--print-data-log")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == expected
    assert result.stderr == ""
    # Shallow: batch lines only.
    shallow = run("--files", str(log)).stdout.splitlines()
    assert shallow == [f"Dumping {log}", "Log starting offset: 0"] + [batch_line(b) for b in batches]


def test_log_golden_transactional_commit_with_control_records() -> None:
    log = fixture_path(*TXN, f"{SEG0}.log")
    batches, records = kafka_written("transactional-commit")
    data = log.read_bytes()
    expected = [f"Dumping {log}", "Log starting offset: 0"]
    by_batch: dict[int, list[dict]] = {}
    for r in records:
        by_batch.setdefault(int(r["batch"]["position"]), []).append(r)
    n_control = 0
    for f in batches:
        pos = int(f["position"])
        attrs = struct.unpack_from(">h", data, pos + 21)[0]
        base_seq = int(f["baseSequence"])
        last_delta = int(f["lastOffset"]) - int(f["baseOffset"])
        b = dict(
            position=pos,
            size=int(f["size"]),
            base=int(f["baseOffset"]),
            last=int(f["lastOffset"]),
            count=int(f["count"]),
            base_seq=base_seq,
            last_seq=-1 if base_seq < 0 else base_seq + last_delta,
            pid=int(f["producerId"]),
            epoch=int(f["producerEpoch"]),
            ple=int(f["partitionLeaderEpoch"]),
            attrs=attrs,
            base_ts=struct.unpack_from(">q", data, pos + 27)[0],
            max_ts=int(f["maxTimestamp"]),
            crc=int(f["crc"]),
            valid=True,
        )
        assert CODECS[attrs & 7] == f["compression"]
        assert str(bool(attrs & 0x20)).lower() == f["isControl"]
        expected.append(batch_line(b))
        for r in by_batch.get(pos, []):
            line = (
                f"| offset: {r['offset']} CreateTime: {r['timestamp']} keySize: {r['keySize']} "
                f"valueSize: {r['valueSize']} sequence: {r['sequence']} headerKeys: [{','.join(r['hkeys'])}]"
            )
            if f["isControl"] == "true":
                # The marker record's key and value, read from the bytes: spec 1.6 (record at pos + 61).
                rec = data[pos + 61 : pos + b["size"]]
                # length 1, attributes 1, tsDelta 1, offsetDelta 1, keyLen 1, key 4, valueLen 1, value 6
                version, type_id = struct.unpack_from(">hh", rec, 5)
                _, coordinator_epoch = struct.unpack_from(">hi", rec, 10)
                assert (version, type_id) == (0, 1)
                line += f" endTxnMarker: COMMIT coordinatorEpoch: {coordinator_epoch}"
                n_control += 1
            expected.append(line)
    assert n_control > 0
    result = run("--files", str(log), "--deep-iteration")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == expected
    assert result.stderr == ""  # the markers take offsets, so the offsets stay consecutive


def test_legacy_messages_print_isvalid_and_crc(tmp_path: Path) -> None:
    src = fixture_path("vectors", "kafka-python-vectors", "records_v1_kafka0.10_broker.bin")
    log = tmp_path / "00000000000000000007.log"
    shutil.copy(src, log)
    data = log.read_bytes()
    expected = [f"Dumping {log}", "Log starting offset: 7"]
    pos = 0
    while pos < len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        crc, magic, attrs, ts, klen = struct.unpack_from(">IbbqI", data, pos + 12)
        (vlen,) = struct.unpack_from(">i", data, pos + 12 + 18)
        assert magic == 1 and attrs == 0 and klen == 0xFFFFFFFF
        value = data[pos + 34 : pos + 34 + vlen].decode()
        valid = "true" if crc == (zlib.crc32(data[pos + 16 : pos + 12 + size])) else "false"
        expected.append(
            f"offset: {offset} position: {pos} CreateTime: {ts} size: {12 + size} magic: 1 compresscodec: none "
            f"crc: {crc} isvalid: {valid}"
        )
        expected.append(
            f"| offset: {offset} CreateTime: {ts} keySize: -1 valueSize: {vlen} isValid: {valid} crc: {crc}}} "
            f"payload: {value}"
        )
        pos += 12 + size
    result = run("--files", str(log), "--print-data-log")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == expected


def test_compacted_segment_reports_non_consecutive_offsets() -> None:
    log = fixture_path(*DONALDY39, f"{SEG0}.log")
    batches = read_v2_file(log)
    offsets = [r["offset"] for b in batches for r in b["records"]]
    assert offsets == [4, 16, 17]
    result = run("--files", str(log), "--deep-iteration")
    assert result.exit_code == 0
    expected = [f"Dumping {log}", "Log starting offset: 0"]
    for b in batches:
        expected += [batch_line(b)] + [record_line(b, r) for r in b["records"]]
    assert result.stdout.splitlines() == expected
    assert result.stderr.splitlines() == [f"Non-consecutive offsets in {log}", "  4 is followed by 16"]
    # Shallow iteration does not look at record offsets.
    assert run("--files", str(log)).stderr == ""


# ---------------------------------------------------------------------------------------- damaged logs


def test_trailing_bytes_are_reported(tmp_path: Path) -> None:
    src = fixture_path(*YANG, f"{SEG0}.log")
    data = src.read_bytes()
    batches = read_v2_file(src)
    log = tmp_path / f"{SEG0}.log"
    # A partial batch: the first 40 bytes of the first batch appended again.
    log.write_bytes(data + data[:40])
    result = run("--files", str(log))
    assert result.exit_code == 1  # Kafka's text, then exit 1: a damaged file (Kafka's tool exits 0)
    lines = result.stdout.splitlines()
    assert lines[2:-1] == [batch_line(b) for b in batches]
    assert lines[-1] == f"Found 40 invalid bytes at the end of {SEG0}.log"
    # Fewer than 17 bytes left: also invalid bytes.
    log.write_bytes(data + b"\x00" * 9)
    assert run("--files", str(log)).stdout.splitlines()[-1] == f"Found 9 invalid bytes at the end of {SEG0}.log"
    # No such line when --max-bytes is given.
    limited = run("--files", str(log), "--max-bytes", str(len(data) + 9)).stdout
    assert "invalid bytes" not in limited


def test_offset_gap_reports_pairs_newest_first(tmp_path: Path) -> None:
    src = fixture_path(*YANG, f"{SEG0}.log")
    data = bytearray(src.read_bytes())
    batches = read_v2_file(src)
    # baseOffset is not covered by the CRC (spec 1.2): move batch 2 (offset 2) to offset 10.
    struct.pack_into(">q", data, batches[2]["position"], 10)
    log = tmp_path / f"{SEG0}.log"
    log.write_bytes(bytes(data))
    result = run("--files", str(log), "--deep-iteration")
    assert result.exit_code == 0
    assert "baseOffset: 10 lastOffset: 10" in result.stdout
    # Kafka prepends each pair to a list, so the report lists them newest first.
    assert result.stderr.splitlines() == [
        f"Non-consecutive offsets in {log}",
        "  10 is followed by 3",
        "  1 is followed by 10",
    ]


def test_max_bytes_reads_only_whole_batches_within_the_limit() -> None:
    log = fixture_path(*YANG, f"{SEG0}.log")
    batches = read_v2_file(log)
    limit = batches[0]["size"] + batches[1]["size"] + 10
    result = run("--files", str(log), "--max-bytes", str(limit))
    assert result.stdout.splitlines() == [
        f"Dumping {log}",
        "Log starting offset: 0",
        batch_line(batches[0]),
        batch_line(batches[1]),
    ]
    assert run("--files", str(log), "--max-bytes", "-1").exit_code == 2


# ------------------------------------------------------------------------------------ record printing


def test_skip_record_metadata() -> None:
    log = fixture_path(*YANG, f"{SEG0}.log")
    batches = read_v2_file(log)
    result = run("--files", str(log), "--print-data-log", "--skip-record-metadata")
    lines = result.stdout.splitlines()
    # Null keys: Kafka's line then starts with " payload:" (the "|" only goes with the first printed field).
    expected = [f"Dumping {log}", "Log starting offset: 0"]
    for b in batches:
        expected.append(batch_line(b))
        expected += [f" payload: {r['value'].decode()}" for r in b["records"]]
    assert lines == expected

    txn_log = fixture_path(*TXN, f"{SEG0}.log")
    _, records = kafka_written("transactional-commit")
    lines = run("--files", str(txn_log), "--print-data-log", "--skip-record-metadata").stdout.splitlines()
    record_lines = [x for x in lines if not x.startswith(("baseOffset:", "Dumping", "Log starting"))]
    assert len(record_lines) == len(records)
    for line, r in zip(record_lines, records, strict=True):
        payload = "" if r["value"] == "null" else f" payload: {r['value'].strip(chr(34))}"
        if r["batch"]["isControl"] == "true":
            assert line == ""  # control records print no data and no metadata
        elif r["key"] == "null":
            assert line == payload
        else:
            assert line == f"| key: {r['key'].strip(chr(34))}{payload}"


def _build_log(tmp_path: Path, items: list[tuple[bytes | None, bytes | None]]) -> Path:
    """A one-batch v2 log with the given (key, value) records, written record by record from the spec."""
    body = b""
    for i, (key, value) in enumerate(items):

        def zz(n: int) -> bytes:
            u = (n << 1) ^ (n >> 63)
            out = b""
            while True:
                if u < 0x80:
                    return out + bytes([u])
                out += bytes([(u & 0x7F) | 0x80])
                u >>= 7

        rec = b"\x00" + zz(0) + zz(i)
        rec += zz(-1) if key is None else zz(len(key)) + key
        rec += zz(-1) if value is None else zz(len(value)) + value
        rec += zz(0)
        body += zz(len(rec)) + rec
    after_crc = struct.pack(">hiqqqhii", 0, len(items) - 1, 1000, 1000, -1, -1, -1, len(items)) + body
    crc = crc32c.crc32c(after_crc)
    batch = struct.pack(">qiibI", 0, 9 + len(after_crc), 0, 2, crc) + after_crc
    log = tmp_path / f"{SEG0}.log"
    log.write_bytes(batch)
    return log


def test_decoders(tmp_path: Path) -> None:
    log = _build_log(
        tmp_path,
        [(struct.pack(">i", -7), struct.pack(">q", 2**40)), (struct.pack(">i", 5), None), (None, b"\xff\xfeok")],
    )

    def payload_lines(*args: str) -> list[str]:
        result = run("--files", str(log), *args)
        assert result.exit_code == 0, result.output
        return [x.split("headerKeys: []", 1)[1] for x in result.stdout.splitlines() if x.startswith("| ")]

    ints = ["--key-decoder-class", "org.apache.kafka.tools.api.IntegerDecoder"]
    longs = ["--value-decoder-class", "org.apache.kafka.tools.api.LongDecoder"]
    assert payload_lines(*ints, "--value-decoder-class", "hex") == [
        " key: -7 payload: 0000010000000000",
        " key: 5",
        " payload: fffe6f6b",
    ]
    # A decoder option alone turns printing on; the default value decoder is the UTF-8 StringDecoder.
    assert payload_lines(*ints)[2] == " payload: \ufffd\ufffdok"
    longs_result = run("--files", str(log), *longs, "--key-decoder-class", "hex")
    assert "headerKeys: [] key: fffffff9 payload: 1099511627776" in longs_result.stdout
    # The third value has 4 bytes: Kafka's LongDecoder dies with BufferUnderflowException; a clear error here.
    assert longs_result.exit_code == 1
    assert longs_result.stderr.splitlines() == [
        "Error: LongDecoder needs 8 bytes but the field has 4 (BufferUnderflowException)"
    ]
    # DefaultDecoder prints the Java byte[] object, as Kafka does.
    assert re.fullmatch(
        r" key: \[B@[0-9a-f]+ payload: .*", payload_lines("--key-decoder-class", "kafka.serializer.DefaultDecoder")[0]
    )
    # The deprecated kafka.serializer names print Kafka's deprecation line (value decoder first).
    out = run(
        "--files",
        str(log),
        "--key-decoder-class",
        "kafka.serializer.StringDecoder",
        "--value-decoder-class",
        "kafka.serializer.LongDecoder",
    ).stdout.splitlines()
    assert out[1:3] == [
        "kafka.serializer.LongDecoder is deprecated. Please use org.apache.kafka.tools.api.LongDecoder instead",
        "kafka.serializer.StringDecoder is deprecated. Please use org.apache.kafka.tools.api.StringDecoder instead",
    ]
    assert out[3] == "Log starting offset: 0"
    bad = run("--files", str(log), "--key-decoder-class", "com.example.Nope")
    assert bad.exit_code == 2 and "unknown decoder class" in bad.output
    # A LongDecoder on a 4-byte field fails like Kafka's (a clear error, non-zero exit).
    short = run("--files", str(log), "--key-decoder-class", "org.apache.kafka.tools.api.LongDecoder")
    assert short.exit_code == 1 and "LongDecoder needs 8 bytes" in short.stderr


def test_offsets_decoder_on_consumer_offsets() -> None:
    log = fixture_path(*WILLIAM, f"{SEG0}.log")
    batches = read_v2_file(log)
    records = [(b, r) for b in batches for r in b["records"]]
    result = run("--files", str(log), "--offsets-decoder")
    assert result.exit_code == 0, result.output
    lines = [x for x in result.stdout.splitlines() if x.startswith("| ")]
    assert len(lines) == len(records) == 8202
    commits = groups = 0
    for line, (b, r) in zip(lines, records, strict=True):
        prefix = record_line(b, r) + " key: "
        assert line.startswith(prefix)
        key_text, payload_text = line[len(prefix) :].split(" payload: ", 1)
        key, payload = json.loads(key_text), json.loads(payload_text)
        (key_version,) = struct.unpack_from(">h", r["key"])
        (value_version,) = struct.unpack_from(">h", r["value"])
        assert key["type"] == str(key_version) and payload["version"] == str(value_version)
        if key_version == 1:  # OffsetCommitKey: group, topic, partition; OffsetCommitValue v2: offset, metadata, ts
            glen = struct.unpack_from(">h", r["key"], 2)[0]
            group = r["key"][4 : 4 + glen].decode()
            tlen = struct.unpack_from(">h", r["key"], 4 + glen)[0]
            topic = r["key"][6 + glen : 6 + glen + tlen].decode()
            (partition,) = struct.unpack_from(">i", r["key"], 6 + glen + tlen)
            assert key["data"] == {"group": group, "topic": topic, "partition": partition}
            offset, mlen = struct.unpack_from(">qh", r["value"], 2)
            (commit_ts,) = struct.unpack_from(">q", r["value"], 12 + mlen)
            assert payload["data"] == {
                "offset": offset,
                "metadata": r["value"][12 : 12 + mlen].decode(),
                "commitTimestamp": commit_ts,
            }
            commits += 1
        else:
            assert key_version == 2
            assert key["data"] == {"group": "debug-consumer-group"}
            data = payload["data"]
            assert (data["protocolType"], data["generation"], data["protocol"]) == ("consumer", 1, "range")
            (member,) = data["members"]
            assert member["clientId"] == "consumer-1" and member["clientHost"] == "/127.0.0.1"
            assert member["subscription"]["topics"] == ["debug_topic"]
            assert member["assignment"]["assignedPartitions"] == [{"topic": "debug_topic", "partitions": [0]}]
            groups += 1
    assert (commits, groups) == (8201, 1)
    first_commit = json.loads(lines[1].split(" key: ", 1)[1].split(" payload: ")[0])
    assert first_commit["data"] == {"group": "debug-consumer-group", "topic": "debug_topic", "partition": 0}


# ---------------------------------------------------------------------------------------------- indexes


def _expected_entries(folder: str, name: str) -> list[dict]:
    text = fixture_path(*TXN[:1], folder, name).read_text()
    return [kv_fields(x) for x in text.splitlines() if x.startswith("entry ")]


def test_index_and_time_index_golden() -> None:
    index = fixture_path(*TXN, f"{SEG0}.index")
    time_index = fixture_path(*TXN, f"{SEG0}.timeindex")
    offsets = _expected_entries("transactional-commit", "expected-index.txt")
    times = _expected_entries("transactional-commit", "expected-timeindex.txt")
    result = run("--files", f"{index},{time_index}")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == (
        [f"Dumping {index}"]
        + [f"offset: {e['offset']} position: {e['position']}" for e in offsets]
        + [f"Dumping {time_index}"]
        + [f"timestamp: {e['timestamp']} offset: {e['offset']}" for e in times]
    )
    assert result.stderr == ""
    # --verify-index-only prints nothing per entry when all is well.
    verify = run("--files", f"{index},{time_index}", "--verify-index-only")
    assert verify.stdout.splitlines() == [f"Dumping {index}", f"Dumping {time_index}"] and verify.stderr == ""


def test_yangxuhao_index_files_and_snapshots() -> None:
    d = fixture_path(*YANG)
    index, tindex = d / f"{SEG0}.index", d / f"{SEG0}.timeindex"
    raw = tindex.read_bytes()
    entries = [struct.unpack_from(">qi", raw, i) for i in range(0, len(raw), 12)]
    snaps = [d / "00000000000000000003.snapshot", d / "00000000000000000004.snapshot"]
    for snap in snaps:
        assert struct.unpack_from(">hIi", snap.read_bytes())[2] == 0  # no producers
    result = run("--files", ",".join(map(str, [index, tindex, *snaps])))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"Dumping {index}",
        f"{index} is empty.",
        f"Dumping {tindex}",
        *[f"timestamp: {ts} offset: {rel}" for ts, rel in entries],
        f"Dumping {snaps[0]}",
        f"Dumping {snaps[1]}",
    ]
    assert result.stderr == ""


def _copy_segment(tmp_path: Path, *suffixes: str) -> dict[str, Path]:
    out = {}
    for suffix in (".log", *suffixes):
        dst = tmp_path / f"{SEG0}{suffix}"
        shutil.copy(fixture_path(*TXN, f"{SEG0}{suffix}"), dst)
        dst.chmod(0o644)
        out[suffix] = dst
    return out


def _last_offset_of_batch_at(log: Path, position: int) -> int:
    base, _, lod = struct.unpack_from(">qi11xi", log.read_bytes(), position)
    return base + lod


def test_corrupted_index_entries_are_reported_as_mismatches(tmp_path: Path) -> None:
    files = _copy_segment(tmp_path, ".index")
    index = files[".index"]
    entries = _expected_entries("transactional-commit", "expected-index.txt")
    data = bytearray(index.read_bytes())
    struct.pack_into(">i", data, 3 * 8, 999)  # entry 3: wrong relative offset
    struct.pack_into(">i", data, 5 * 8, 5)  # entry 5: wrong relative offset
    index.write_bytes(bytes(data))
    result = run("--files", str(index))
    assert result.exit_code == 1  # Kafka's text, then exit 1: a damaged file (Kafka's tool exits 0)
    lines = result.stdout.splitlines()
    assert lines[4] == f"offset: 999 position: {entries[3]['position']}"
    log_offsets = [_last_offset_of_batch_at(files[".log"], int(entries[i]["position"])) for i in (3, 5)]
    assert log_offsets == [int(entries[3]["offset"]), int(entries[5]["offset"])]
    assert result.stderr.splitlines()[-1].startswith("Error: 1 damaged file: ")
    assert result.stderr.splitlines()[:-1] == [
        f"Mismatches in :{index}",
        f"  Index offset: 5, log offset: {log_offsets[1]}",  # newest first, as Kafka's list prepends
        f"  Index offset: 999, log offset: {log_offsets[0]}",
    ]
    verify = run("--files", str(index), "--verify-index-only")
    assert verify.stdout.splitlines() == [f"Dumping {index}"]
    assert verify.stderr == result.stderr


def test_index_dump_stops_at_a_zero_entry(tmp_path: Path) -> None:
    files = _copy_segment(tmp_path, ".index")
    index = files[".index"]
    entries = _expected_entries("transactional-commit", "expected-index.txt")
    index.write_bytes(index.read_bytes()[: 4 * 8] + b"\x00" * 8 * 100)  # a preallocated tail
    result = run("--files", str(index))
    assert result.stdout.splitlines() == [f"Dumping {index}"] + [
        f"offset: {e['offset']} position: {e['position']}" for e in entries[:4]
    ]
    assert result.stderr == ""


def test_index_sanity_check(tmp_path: Path) -> None:
    files = _copy_segment(tmp_path, ".index", ".timeindex")
    index, tindex = files[".index"], files[".timeindex"]
    result = run("--files", f"{index},{tindex}", "--index-sanity-check")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"Dumping {index}",
        f"{index} passed sanity check.",
        f"Dumping {tindex}",
        f"{tindex} passed sanity check.",
    ]
    # Last entry's offset below the base offset (spec 3.2): the check fails, the tool exits non-zero.
    data = bytearray(index.read_bytes())
    struct.pack_into(">i", data, len(data) - 8, -5)
    index.write_bytes(bytes(data))
    bad = run("--files", str(index), "--index-sanity-check")
    assert bad.exit_code == 1
    assert "Corrupt index found" in bad.stderr and "passed" not in bad.stdout
    # A length that is not whole entries.
    index.write_bytes(bytes(data[:-8]) + b"\x00\x00\x00")
    assert "neither positive nor a multiple of 8" in run("--files", str(index), "--index-sanity-check").stderr


def test_time_index_errors(tmp_path: Path) -> None:
    files = _copy_segment(tmp_path, ".index", ".timeindex")
    tindex = files[".timeindex"]
    entries = _expected_entries("transactional-commit", "expected-timeindex.txt")
    batches, records = kafka_written("transactional-commit")
    # The max record timestamp of the batch ending at each offset, from Kafka's printout.
    max_ts = {}
    for r in records:
        last = int(r["batch"]["lastOffset"])
        max_ts[last] = max(max_ts.get(last, -1), int(r["timestamp"]))
    data = bytearray(tindex.read_bytes())
    e1, e2 = entries[1], entries[2]
    struct.pack_into(">q", data, 2 * 12, int(e1["timestamp"]) - 1)  # entry 2: mismatch and out of order
    struct.pack_into(">i", data, 4 * 12 + 8, int(entries[4]["offset"]) - 1)  # entry 4: not a batch's last offset
    tindex.write_bytes(bytes(data))
    wanted = int(entries[4]["offset"]) - 1
    found = min(int(b["lastOffset"]) for b in batches if int(b["lastOffset"]) >= wanted)
    result = run("--files", str(tindex))
    assert result.exit_code == 1  # Kafka's text, then exit 1: a damaged file (Kafka's tool exits 0)
    assert result.stdout.splitlines()[3] == f"timestamp: {int(e1['timestamp']) - 1} offset: {e2['offset']}"
    assert result.stderr.splitlines()[-1].startswith("Error: 1 damaged file: ")
    assert result.stderr.splitlines()[:-1] == [
        f"Found timestamp mismatch in :{tindex}",
        f"  Index timestamp: {int(e1['timestamp']) - 1}, log timestamp: {max_ts[int(e2['offset'])]}",
        f"Found out of order timestamp in :{tindex}",
        f"  Index timestamp: {int(e1['timestamp']) - 1}, Previously indexed timestamp: {e1['timestamp']}",
        "The following indexed offsets are not found in the log.",
        f"Indexed offset: {wanted}, found log offset: {found}",
    ]


# ------------------------------------------------------------------------------ snapshots and txn index


def test_producer_snapshot_golden() -> None:
    snap = fixture_path(*TXN, "00000000000000000500.snapshot")
    raw = snap.read_bytes()
    version, _, count = struct.unpack_from(">hIi", raw)
    assert (version, count) == (1, 1)
    pid, epoch, last_seq, last_off, delta, ts, coord, txn_first = struct.unpack_from(">qhiqiqiq", raw, 10)
    expected = fixture_path(*TXN, "expected-snapshot.txt").read_text()
    assert f"id={pid} epoch={epoch} lastSeq={last_seq} lastDataOffset={last_off} coordinatorEpoch={coord}" in expected
    txn = "OptionalLong.empty" if txn_first < 0 else f"OptionalLong[{txn_first}]"
    result = run("--files", str(snap))
    assert result.stdout.splitlines() == [
        f"Dumping {snap}",
        f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coord} currentTxnFirstOffset: {txn} "
        f"lastTimestamp: {ts} firstSequence: {last_seq - delta} lastSequence: {last_seq} lastOffset: {last_off} "
        f"offsetDelta: {delta} timestamp: {ts}",
    ]


def test_snapshot_without_batch_metadata_and_corrupt_snapshot(tmp_path: Path) -> None:
    entry = struct.pack(">qhiqiqiq", 42, 3, -1, -1, 0, 1234, 9, 77)  # lastOffset -1: no batch metadata
    body = struct.pack(">i", 1) + entry
    snap = tmp_path / "00000000000000000010.snapshot"
    snap.write_bytes(struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
    result = run("--files", str(snap))
    assert result.stdout.splitlines()[1] == (
        "producerId: 42 producerEpoch: 3 coordinatorEpoch: 9 currentTxnFirstOffset: OptionalLong[77] "
        "lastTimestamp: 1234 "
    )
    # A flipped byte: Kafka prints the CorruptSnapshotException's message on stderr and goes on.
    bad = bytearray(snap.read_bytes())
    bad[20] ^= 0xFF
    snap.write_bytes(bytes(bad))
    computed = crc32c.crc32c(bytes(bad[6:]))
    result = run("--files", str(snap))
    assert result.exit_code == 1  # Kafka's text, then exit 1: a damaged file (Kafka's tool exits 0)
    assert result.stdout.splitlines() == [f"Dumping {snap}"]
    stored = struct.unpack_from(">I", bad, 2)[0]
    assert result.stderr.splitlines()[-1].startswith("Error: 1 damaged file: ")
    assert result.stderr.splitlines()[:-1] == [
        f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: {computed}"
    ]


def test_txn_index(tmp_path: Path) -> None:
    txn = tmp_path / "00000000000000000100.txnindex"
    rows = [(1000, 100, 120, 100), (1001, 130, 150, 125)]
    txn.write_bytes(b"".join(struct.pack(">hqqqq", 0, *row) for row in rows) + b"\x00" * 10)
    result = run("--files", str(txn))
    assert result.stdout.splitlines() == [f"Dumping {txn}"] + [
        f"version: 0 producerId: {p} firstOffset: {f} lastOffset: {last} lastStableOffset: {s}"
        for p, f, last, s in rows
    ]


# ------------------------------------------------------------------------------------------ misc and JSON


def test_unknown_and_missing_files(tmp_path: Path) -> None:
    epoch = fixture_path(*YANG, "leader-epoch-checkpoint")
    result = run("--files", str(epoch))
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"Dumping {epoch}"]
    assert result.stderr.splitlines() == [f"Ignoring unknown file {epoch}"]
    missing = tmp_path / f"{SEG0}.log"
    result = run("--files", str(missing))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [f"Dumping {missing}", "Log starting offset: 0"]
    assert result.stderr.splitlines() == [f"Error: No such file: {missing}"]
    # An index whose .log is missing.
    index = tmp_path / f"{SEG0}.index"
    index.write_bytes(b"")
    result = run("--files", str(index))
    assert result.exit_code == 1 and f"No such file: {missing}" in result.stderr
    assert run().exit_code == 2  # --files is required


def test_json_lines(tmp_path: Path) -> None:
    d = fixture_path(*TXN)
    files = [d / f"{SEG0}.log", d / f"{SEG0}.index", d / f"{SEG0}.timeindex", d / "00000000000000000500.snapshot"]
    result = run("--files", ",".join(map(str, files)), "--json", "--print-data-log")
    assert result.exit_code == 0, result.output
    objs = [json.loads(x) for x in result.stdout.splitlines()]
    kinds: dict[str, int] = {}
    for o in objs:
        kinds[o["type"]] = kinds.get(o["type"], 0) + 1
    batches, records = kafka_written("transactional-commit")
    n_index = len(_expected_entries("transactional-commit", "expected-index.txt"))
    n_time = len(_expected_entries("transactional-commit", "expected-timeindex.txt"))
    assert kinds == {
        "file": 4,
        "message": 1,
        "batch": len(batches),
        "record": len(records),
        "indexEntry": n_index,
        "timeIndexEntry": n_time,
        "producerSnapshotEntry": 1,
    }
    json_batches = [o for o in objs if o["type"] == "batch"]
    assert [(b["baseOffset"], b["crc"], b["compresscodec"]) for b in json_batches] == [
        (int(b["baseOffset"]), int(b["crc"]), b["compression"]) for b in batches
    ]
    json_records = [o for o in objs if o["type"] == "record"]
    for o, r in zip(json_records, records, strict=True):
        assert o["offset"] == int(r["offset"]) and o["timestamp"] == int(r["timestamp"])
        if r["batch"]["isControl"] == "true":
            assert o["endTxnMarker"] == "COMMIT" and "payload" not in o
        elif r["key"] != "null":
            assert o["key"] == r["key"].strip('"')
    # Reports come as JSON too.
    log = tmp_path / f"{SEG0}.log"
    log.write_bytes(fixture_path(*DONALDY39, f"{SEG0}.log").read_bytes() + b"\x01\x02\x03")
    objs = [json.loads(x) for x in run("--files", str(log), "--json", "--deep-iteration").stdout.splitlines()]
    assert {"type": "invalidBytes", "file": log.name, "count": 3} in objs
    assert {"type": "nonConsecutiveOffsets", "file": str(log), "pairs": [[4, 16]]} in objs


def test_console_script() -> None:
    script = Path(sys.executable).parent / "kafkalog"
    assert script.exists(), f"the kafkalog console script is not installed next to {sys.executable}"
    log = fixture_path(*YANG, f"{SEG0}.log")
    batches = read_v2_file(log)
    proc = subprocess.run(
        [str(script), "dump", "--files", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"Dumping {log}", "Log starting offset: 0"] + [batch_line(b) for b in batches]
