"""kill -9 of ``kafkalog serve`` under real clients, the quick form of tools.reliability.broker_kill9 (``make
reliability`` runs 200 rounds per flush policy): an idempotent acks=all librdkafka producer and a consumer group
carry on through broker SIGKILLs and restarts on the same log dir; afterwards nothing acknowledged is lost,
nothing is in the log twice, and the group resumed at its committed offsets."""

from __future__ import annotations

import pytest

from tools.reliability.broker_kill9 import broker_kill9


@pytest.mark.slow
@pytest.mark.parametrize("flush_messages", [1, None], ids=["flush.messages=1", "default-flush-policy"])
def test_kill9_of_the_broker_loses_and_duplicates_nothing_acknowledged(tmp_path, flush_messages):
    row = broker_kill9(4, flush_messages, tmp_path, seed=11 if flush_messages else 12)
    assert row.runs == 4
    assert row.acked > 500, row.note
    assert row.failures == [], row.failures
    assert row.lost == 0 and row.corrupt == 0
