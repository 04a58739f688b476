"""Issue 16 item 1: a torn tail after a clean shutdown (the clean-shutdown marker present).

Kafka trusts the marker and takes the next offset from the complete batches after the last index entry;
when that entry points at the torn batch it falls back to the segment's base offset, and its next append
lands where no reader reaches it. kafkalog recovers such a segment instead (see loader._recover_torn_tail):
the log ends after the last complete batch, and the next append is readable.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kafkalog.cli import main
from kafkalog.storage.log import Log


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def _describe_field(output: str, name: str) -> int:
    for part in output.split("\t"):
        if part.startswith(name + ": "):
            return int(part.split(": ", 1)[1].split()[0])
    raise AssertionError(f"{name} not in {output!r}")


def test_torn_tail_after_clean_shutdown_keeps_the_complete_batches_and_the_next_produce(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "t").exit_code == 0
    produced = run("produce", "--log-dir", d, "--topic", "t", input="".join(f"{i}\n" for i in range(1, 3001)))
    assert produced.exit_code == 0, produced.output
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    data = segment.read_bytes()
    position, last_base = 0, 0
    while position < len(data):  # the producer's batches: base offset (int64), then the batch length (int32)
        last_base = int.from_bytes(data[position : position + 8], "big")
        position += 12 + int.from_bytes(data[position + 8 : position + 12], "big")
    assert 0 < last_base < 2999, "the input fits in one batch: nothing to tear"
    with open(segment, "r+b") as f:  # truncate -s -100: the last batch is torn
        f.truncate(segment.stat().st_size - 100)

    described = run("topics", "--log-dir", d, "--describe", "--topic", "t")
    assert described.exit_code == 0, described.output
    assert _describe_field(described.output, "LogEndOffset") == last_base

    result = run("produce", "--log-dir", d, "--topic", "t", input="x\n")
    assert result.exit_code == 0, result.output
    consumed = run("consume", "--log-dir", d, "--topic", "t", "--partition", "0", "--offset", str(last_base - 10))
    assert consumed.exit_code == 0, consumed.output
    lines = consumed.stdout.splitlines()
    assert lines == [str(i) for i in range(last_base - 9, last_base + 1)] + ["x"]
    with Log.open(tmp_path / "t-0", had_clean_shutdown=True) as reopened:
        assert reopened.log_end_offset == last_base + 1
        assert [r.offset for r in reopened.records(last_base - 1, "log_end")] == [last_base - 1, last_base]


def test_whole_tail_after_clean_shutdown_is_not_recovered(tmp_path: Path) -> None:
    """A log whose last batch ends at the end of its file loads without recovery, as in Kafka."""
    with Log.open(tmp_path / "t-0") as lg:
        for _ in range(5):
            lg.append([(None, b"v" * 3000)])
    assert Log.open(tmp_path / "t-0", had_clean_shutdown=True).active_segment.has_whole_tail()


def test_index_entry_past_the_end_of_a_truncated_log_is_recovered(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0", {"index.interval.bytes": 100}) as lg:
        for _ in range(10):
            lg.append([(None, b"v" * 1000)] * 2)
    path = tmp_path / "t-0" / "00000000000000000000.log"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - size // 3)  # several index entries now point past the end
    with Log.open(tmp_path / "t-0", {"index.interval.bytes": 100}, had_clean_shutdown=True) as lg:
        complete = lg.log_end_offset
        assert 0 < complete < 20 and complete % 2 == 0
        info = lg.append([(None, b"next")])
        assert info.first_offset == complete
        assert [r.value for r in lg.records(complete, "log_end")] == [b"next"]
