"""``kafkalog explain compaction`` and ``kafkalog clean``: the cleaner's view of a topic, and one pass on demand."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kafkalog import LogManager
from kafkalog.cli import main
from kafkalog.record import build_batch
from kafkalog.testing import MockTime

KEYS = 10
ROUNDS = 30


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _compacted_topic(directory: Path) -> dict[bytes, bytes]:
    """A compacted topic whose every key is overwritten ROUNDS times over many small segments."""
    clock = MockTime()
    latest = {}
    with LogManager([directory], {"log.cleaner.enable": "false"}, clock=clock) as manager:
        manager.create_topic("profiles", config={"cleanup.policy": "compact", "segment.bytes": 1024})
        for r in range(ROUNDS):
            keys = [f"user-{k}".encode() for k in range(KEYS)]
            values = [f"round-{r}".encode() for _ in range(KEYS)]
            manager.get_log("profiles").append(build_batch(keys, values, [clock.milliseconds()] * KEYS))
            latest.update(zip(keys, values, strict=True))
            clock.advance(1000)
    return latest


def _read_back(directory: Path) -> tuple[dict[bytes, bytes], int]:
    with LogManager([directory], {"log.cleaner.enable": "false"}) as manager:
        records = list(manager.consume("profiles"))
    return {r.key: r.value for r in records}, len(records)


def test_explain_compaction_reports_ratio_bounds_and_estimate(tmp_path: Path) -> None:
    _compacted_topic(tmp_path)
    page = tmp_path / "map.html"
    result = run("explain", "compaction", str(tmp_path), "--topic", "profiles", "--html", str(page))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "profiles-0 will be cleaned on the next cleaner pass" in out
    assert "active segment" in out and "dirty ratio 1.000" in out and "size after one clean" in out
    # Every segment but the active one is dirty (nothing was cleaned yet); one rect per segment.
    with LogManager([tmp_path], {"log.cleaner.enable": "false"}) as manager:
        segments = len(manager.get_log("profiles").segments)
    html = page.read_text()
    assert html.count("<rect") == segments and html.count(": dirty</title>") == segments - 1
    assert html.count(": active</title>") == 1
    # Explaining is read-only: nothing was cleaned.
    _, records = _read_back(tmp_path)
    assert records == KEYS * ROUNDS


def test_clean_command_compacts_and_explain_then_sees_nothing_dirty(tmp_path: Path) -> None:
    latest = _compacted_topic(tmp_path)
    result = run("clean", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "Cleaned 1 of 1 logs" in result.output and "profiles-0" in result.output
    values, records = _read_back(tmp_path)
    assert values == latest
    assert records < KEYS * ROUNDS  # superseded values are gone (the active segment keeps its own duplicates)
    checkpoint = (tmp_path / "cleaner-offset-checkpoint").read_text().splitlines()
    assert checkpoint[:2] == ["0", "1"] and checkpoint[2].startswith("profiles 0 ")
    again = run("explain", "compaction", str(tmp_path), "--topic", "profiles", "--no-estimate")
    assert "from the cleaner-offset-checkpoint" in again.output and "is not eligible" in again.output


def test_clean_command_with_nothing_to_do(tmp_path: Path) -> None:
    with LogManager([tmp_path], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("plain")
    result = run("clean", str(tmp_path))
    assert result.exit_code == 0 and "No log is eligible" in result.output
