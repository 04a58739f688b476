"""A log dir that fills up under ``kafkalog serve`` (tools.reliability.broker_disk_full, also a row of ``make
reliability``): an 8 MiB tmpfs as one of two log.dirs, filled by librdkafka. Produces to its partition get
KAFKA_STORAGE_ERROR, the dir goes offline (Metadata, metrics), the other dir keeps serving, and after a restart
every acknowledged record is there and nothing else. Mounting needs root (CI runs as root): the test skips only
when the mount itself is refused."""

from __future__ import annotations

import pytest

from tools.reliability.broker_disk_full import MountNotPermitted, disk_full


@pytest.mark.slow
def test_a_full_log_dir_goes_offline_and_the_other_keeps_serving(tmp_path):
    try:
        row = disk_full(tmp_path)
    except MountNotPermitted as e:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {e}")
    assert row.failures == [], row.failures
    assert row.runs >= 4, "the produce that hit ENOSPC and the raw produces after it: KAFKA_STORAGE_ERROR"
    assert row.acked > 7000, row.note  # 8 MiB of 1 KB records, and the healthy partition's
    assert row.lost == 0 and row.corrupt == 0
