"""Shared test set-up: where the real Kafka fixtures live, read in place from ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
SPEC = SHARED / "spec" / "kafka-log-format.md"


def fixture_path(*parts: str) -> Path:
    """Path of a file under ../shared/fixtures; skip the test (saying why) only when ../shared is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the real Kafka fixtures live there (CI always has it)")
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"fixture {path} is missing from ../shared/fixtures")
    return path


@pytest.fixture
def fixtures_dir() -> Path:
    return fixture_path()


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test run (startup ~5 s, the first Python source query ~5 s)."""
    pytest.importorskip("pyspark")
    from kafkalog.spark import local_session

    session = local_session("kafkalog-tests")
    yield session
    session.stop()
