"""The kafkalog command's topic, produce/consume and explain commands, and its error handling."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kafkalog import LogManager
from kafkalog.cli import main
from kafkalog.record import default_partition
from kafkalog.testing import MockTime


def run(*args: str, input: str | None = None):
    result = CliRunner().invoke(main, list(args), input=input)
    return result


def test_topics_create_list_describe_alter_delete(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert (
        run(
            "topics",
            "--log-dir",
            d,
            "--create",
            "--topic",
            "orders",
            "--partitions",
            "3",
            "--config",
            "retention.ms=60000",
        ).output
        == "Created topic orders.\n"
    )
    assert run("topics", "--log-dir", d, "--list").output == "orders\n"
    described = run("topics", "--log-dir", d, "--describe", "--topic", "orders").output.splitlines()
    assert described[0].startswith("Topic: orders\tTopicId: ")
    assert described[0].endswith("PartitionCount: 3\tReplicationFactor: 1\tConfigs: retention.ms=60000")
    assert [line.split("\t")[2] for line in described[1:]] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    assert "LogEndOffset: 0" in described[1]
    result = run(
        "topics",
        "--log-dir",
        d,
        "--alter",
        "--topic",
        "orders",
        "--config",
        "segment.bytes=4096",
        "--delete-config",
        "retention.ms",
    )
    assert result.exit_code == 0, result.output
    with LogManager(tmp_path, clock=MockTime()) as manager:
        assert manager.describe_topic("orders").config_overrides == {"segment.bytes": "4096"}
    assert run("topics", "--log-dir", d, "--delete", "--topic", "orders").exit_code == 0
    assert run("topics", "--log-dir", d, "--list").output == ""


def test_topics_errors_are_one_clear_line(tmp_path: Path) -> None:
    d = str(tmp_path)
    result = run("topics", "--log-dir", d, "--create", "--topic", "bad/name")
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and "Traceback" not in result.output
    result = run("topics", "--log-dir", d, "--create", "--topic", "t", "--config", "segment.bytes=13")
    assert result.exit_code == 1 and "segment.bytes" in result.output
    # a missing log dir is a data error (exit 1), not a usage error: the command line itself is well formed
    assert run("topics", "--log-dir", str(tmp_path / "missing"), "--list").exit_code == 1
    assert run("topics", "--log-dir", d).exit_code == 2  # no action


def test_produce_and_consume_lines_keys_headers_and_json(tmp_path: Path) -> None:
    d = str(tmp_path)
    run("topics", "--log-dir", d, "--create", "--topic", "t", "--partitions", "4")
    lines = "".join(f"user-{i}:event {i}\n" for i in range(40))
    result = run(
        "produce",
        "--log-dir",
        d,
        "--topic",
        "t",
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        "--compression-codec",
        "lz4",
        input=lines,
    )
    assert result.exit_code == 0, result.output
    with LogManager(tmp_path, clock=MockTime()) as manager:
        for i in range(40):
            key = b"user-%d" % i
            records = [r for r in manager.consume("t", default_partition(key, 4)) if r.key == key]
            assert [r.value for r in records] == [b"event %d" % i]
            assert records[0].headers == (("source", b"cli"),)
    out = run("consume", "--log-dir", d, "--topic", "t", "--from-beginning", "--json").output
    objects = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(objects) == 40 and {o["headers"][0]["value"] for o in objects} == {"cli"}
    assert (
        run(
            "consume",
            "--log-dir",
            d,
            "--topic",
            "t",
            "--partition",
            "0",
            "--offset",
            "1",
            "--max-messages",
            "1",
            "--print-key",
        ).output.count("\t")
        == 1
    )
    assert run("consume", "--log-dir", d, "--topic", "t").output.startswith("Processed a total of 0")  # the end


def test_produce_json_lines_with_partitions_and_timestamps(tmp_path: Path) -> None:
    d = str(tmp_path)
    run("topics", "--log-dir", d, "--create", "--topic", "t", "--partitions", "2")
    lines = "\n".join(
        json.dumps({"value": f"v{i}", "key": None, "partition": 1, "timestamp": 1000 + i}) for i in range(5)
    )
    assert run("produce", "--log-dir", d, "--topic", "t", "--json", input=lines + "\n").exit_code == 0
    out = run("consume", "--log-dir", d, "--topic", "t", "--partition", "1", "--timestamp", "1003").output
    assert out.splitlines()[:2] == ["v3", "v4"]
    bad = run("produce", "--log-dir", d, "--topic", "t", "--json", input="not json\n")
    assert bad.exit_code != 0 and "line 1" in bad.output


def test_explain_retention_table_and_html(tmp_path: Path) -> None:
    d = str(tmp_path)
    run(
        "topics",
        "--log-dir",
        d,
        "--create",
        "--topic",
        "t",
        "--config",
        "segment.bytes=200",
        "--config",
        "retention.ms=60000",
    )
    for i in range(3):
        run("produce", "--log-dir", d, "--topic", "t", input=f"record {i}\n")
    html_file = tmp_path / "timeline.html"
    result = run("explain", "retention", d, "--topic", "t", "--html", str(html_file))
    assert result.exit_code == 0, result.output
    assert "retention.ms 60000" in result.output and "active" in result.output
    page = html_file.read_text()
    # Each "record i" batch is 61 + 15 bytes (length, attributes, deltas, null key, 8-byte value, no headers);
    # a segment rolls once its size exceeds segment.bytes - 76 = 124, so after two batches: two segments.
    figure = json.loads(re.search(r"<script type='application/json' id='figure-0'>(.*?)</script>", page, re.S)[1])
    segments = {y for trace in figure["data"] if trace["type"] == "bar" for y in trace["y"]}
    assert len(segments) == 2 and any(a["text"].startswith("now<br>") for a in figure["layout"]["annotations"])


def test_console_script_and_debug_flag(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("kafkalog")
    ok = subprocess.run(
        [str(script), "topics", "--log-dir", str(tmp_path), "--create", "--topic", "t"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0 and ok.stdout == "Created topic t.\n"
    locked = LogManager(tmp_path, clock=MockTime())
    locked.startup()
    try:
        quiet = subprocess.run(
            # A command that writes (--create) locks the dir; reading ones (--list) take no lock, so they run.
            [str(script), "topics", "--log-dir", str(tmp_path), "--create", "--topic", "u"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert quiet.returncode == 1 and "Failed to acquire lock" in quiet.stderr and "Traceback" not in quiet.stderr
        loud = subprocess.run(
            [str(script), "--debug", "topics", "--log-dir", str(tmp_path), "--create", "--topic", "u"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert loud.returncode == 1 and "Traceback" in loud.stderr
    finally:
        locked.shutdown()
