"""Bad input at every entrance: Log.append, topic configs, topic names, checkpoint / snapshot / properties files,
CLI arguments. Each must be refused with the documented error, a message naming the field (or file), and no
byte already stored in the log dirs changed.

The catalogue lives in ``tests/bad_inputs.py`` (``bad_inputs()``), which ``make reliability`` also runs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bad_inputs import (
    BAD_TOPIC_NAMES,
    BadInput,
    _bad_config_values,
    _good_batch,
    bad_input_summary,
    bad_inputs,
    close_env,
    open_env,
    try_bad_input,
)
from kafkalog.errors import CorruptRecordError, InvalidTopicError
from kafkalog.storage.checkpoints import CheckpointError, OffsetCheckpointFile
from kafkalog.storage.config import TOPIC_KEYS

pytestmark = pytest.mark.timeout(300)

CASES = bad_inputs()


@pytest.fixture(scope="module")
def env():
    e = open_env(Path(tempfile.mkdtemp(prefix="kafkalog-bad-input-")))
    yield e
    close_env(e)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.entrance}:{c.label}" for c in CASES])
def test_bad_input_is_rejected_clearly(case: BadInput, env) -> None:
    outcome = try_bad_input(case, env)
    assert outcome.clear, f"{case.entrance} / {case.label}: {outcome.detail}"


def test_every_topic_config_has_a_wrong_type_case() -> None:
    covered = {name for name, _ in _bad_config_values()}
    assert covered == set(TOPIC_KEYS)


def test_rejected_appends_leave_the_log_usable(env) -> None:
    log = env.manager.get_log("t", 0)
    end = log.log_end_offset
    for case in CASES:
        if case.entrance == "Log.append":
            try_bad_input(case, env)
    assert log.log_end_offset == end
    info = log.append(_good_batch())
    assert info.first_offset == end
    assert log.log_end_offset == end + 2


def test_truncated_client_batch_names_the_position(env) -> None:
    good = _good_batch()
    with pytest.raises(CorruptRecordError, match=rf"do not form a complete batch \(at position {len(good)}\)"):
        env.manager.get_log("t", 1).append(good + good[:30])


@pytest.mark.parametrize("name", [n for n in BAD_TOPIC_NAMES if "/" in n or "\\" in n or ".." in n])
def test_topic_names_cannot_escape_the_log_dir(name: str, env) -> None:
    outside = sorted(p.name for p in env.root.parent.iterdir())
    with pytest.raises(InvalidTopicError, match="Topic name is invalid"):
        env.manager.create_topic(name, 1)
    assert sorted(p.name for p in env.root.parent.iterdir()) == outside


@pytest.mark.parametrize("name", ["a" * 249, "A.b_c-9", "__consumer_offsets", "x"])
def test_legal_topic_names_are_accepted(name: str, env) -> None:
    env.manager.create_topic(name, 1)
    assert (env.root / "a" / f"{name}-0").is_dir() or (env.root / "b" / f"{name}-0").is_dir()
    env.manager.delete_topic(name)


def test_checkpoint_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(b"0\n2\nt 0 3\nt 1 x\n")
    with pytest.raises(CheckpointError, match=r"Malformed line in checkpoint file: t 1 x \(line 4\)") as info:
        OffsetCheckpointFile(path, create=False).read()
    assert info.value.path == str(path)
    assert path.read_bytes() == b"0\n2\nt 0 3\nt 1 x\n"


def test_summary_counts_every_case() -> None:
    rows = bad_input_summary()
    assert sum(tried for _, tried, _ in rows) == len(CASES)
    assert all(tried == clear for _, tried, clear in rows), rows
