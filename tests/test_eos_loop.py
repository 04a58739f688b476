"""Exactly-once consume-transform-produce under kill -9 (tools/reliability/eos.py, issue 21).

The checker is tested on synthetic input and output first: each way an exactly-once pipeline can fail (a lost
output, a duplicate, a stranger, a wrong value, a reordering) must be caught, and a correct output must pass.
"""

from __future__ import annotations

import random
import re

from tools.reliability.eos import (
    InputRecord,
    OutputRecord,
    check_exactly_once,
    parse_source,
    transform,
)


def _inputs(partitions: int = 2, per_partition: int = 5) -> list[InputRecord]:
    return [InputRecord(p, o, b"in-%d-%d" % (p, o)) for p in range(partitions) for o in range(per_partition)]


def _outputs(inputs: list[InputRecord], start: int = 0) -> list[OutputRecord]:
    """Each input's output in order, at output offsets from ``start`` (a committed transaction's records)."""
    out, next_offset = [], {}
    for record in inputs:
        offset = next_offset.get(record.partition, start)
        out.append(OutputRecord(record.partition, offset, transform(record.value), (record.partition, record.offset)))
        next_offset[record.partition] = offset + 1
    return out


def test_transform_and_source_header() -> None:
    assert transform(b"abc") == b"out:abc"
    assert parse_source(b"2:17") == (2, 17)
    assert parse_source(None) is None and parse_source(b"x") is None and parse_source(b"\xff:1") is None


def test_a_correct_output_passes() -> None:
    inputs = _inputs()
    report = check_exactly_once(inputs, _outputs(inputs))
    assert report.ok and report.inputs == report.outputs == 10 and report.bad == 0


def test_outputs_with_gaps_left_by_aborted_transactions_pass() -> None:
    """read_committed hides aborted records and markers: committed outputs sit at scattered offsets."""
    inputs = _inputs(1, 4)
    outputs = [
        OutputRecord(0, off, transform(r.value), (0, r.offset)) for off, r in zip([3, 4, 9, 12], inputs, strict=True)
    ]
    assert check_exactly_once(inputs, outputs).ok


def test_a_lost_output_is_missing() -> None:
    inputs = _inputs()
    outputs = _outputs(inputs)
    del outputs[3]
    report = check_exactly_once(inputs, outputs)
    assert not report.ok and report.missing == [(0, 3)] and report.bad == 0


def test_a_replayed_transaction_is_duplicated() -> None:
    """The classic failure: offsets not committed with the output, so a restart writes a batch again."""
    inputs = _inputs(1, 6)
    outputs = _outputs(inputs[:4]) + _outputs(inputs[2:], start=4)  # inputs 2 and 3 written twice
    report = check_exactly_once(inputs, outputs)
    assert report.duplicated == {(0, 2): 2, (0, 3): 2}
    assert report.bad >= 2 and not report.ok and not report.missing


def test_strangers_wrong_values_and_reordering_are_caught() -> None:
    inputs = _inputs(1, 3)
    outputs = _outputs(inputs)
    outputs.append(OutputRecord(0, 3, b"out:whatever", None))  # no src header
    outputs.append(OutputRecord(0, 4, b"out:x", (0, 99)))  # names an input that does not exist
    report = check_exactly_once(inputs, outputs)
    assert report.unexpected == [(0, 3), (0, 4)]
    wrong = _outputs(inputs)
    wrong[1] = OutputRecord(0, 1, b"out:tampered", (0, 1))
    assert check_exactly_once(inputs, wrong).mismatched == [(0, 1)]
    swapped = _outputs(inputs)
    swapped[0], swapped[1] = (
        OutputRecord(0, 0, swapped[1].value, swapped[1].source),
        OutputRecord(0, 1, swapped[0].value, swapped[0].source),
    )
    assert check_exactly_once(inputs, swapped).out_of_order == [(0, 1)]
    elsewhere = _outputs(inputs)
    elsewhere[2] = OutputRecord(1, 0, elsewhere[2].value, elsewhere[2].source)  # right value, wrong partition
    assert check_exactly_once(inputs, elsewhere).mismatched == [(1, 0)]


def test_random_damage_is_always_detected() -> None:
    rng = random.Random(7)
    for _ in range(200):
        inputs = _inputs(3, rng.randint(1, 20))
        outputs = _outputs(inputs)
        kind = rng.choice(["drop", "dup", "stranger"])
        i = rng.randrange(len(outputs))
        if kind == "drop":
            del outputs[i]
        elif kind == "dup":
            o = outputs[i]
            outputs.append(OutputRecord(o.partition, 10_000, o.value, o.source))
        else:
            outputs.append(OutputRecord(0, 10_000, b"out:?", (5, 5)))
        assert not check_exactly_once(inputs, outputs).ok, kind


# ----- the loop itself ----------------------------------------------------------------------------------------
def test_consume_transform_produce_killed_at_random_moments_is_exactly_once(tmp_path) -> None:
    """Three runs against kafkalog serve (the second kills the broker too, with the program, and restarts it; the
    third with a subscribed, statically-membered consumer): each kills the confluent-kafka program at least once,
    then lets it finish; the checker finds every input's output exactly once in the read_committed output."""
    from tools.reliability.eos import eos_row

    row = eos_row(3, tmp_path, seed=21, records=200, subscribe_every=3, broker_kill_every=2)
    assert row.ok, row.failures
    assert (row.runs, row.acked, row.lost, row.corrupt) == (3, 600, 0, 0)
    kills, broker_kills = map(int, re.search(r"(\d+) kills \((\d+) with the broker\)", row.note).groups())
    assert kills >= 3 and broker_kills == 1, row.note
