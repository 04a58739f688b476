"""pyspark is an extra (``kafkalog[spark]``): the core works without it, and Spark used without it names the extra.

Each test runs a fresh interpreter in which pyspark (and its py4j) cannot be imported: a meta path finder,
installed before kafkalog is imported, answers every ``pyspark`` / ``py4j`` import with the
``ModuleNotFoundError`` an interpreter without them raises. The paths are the ones users take: the CLI through
click's runner, ``python -m kafkalog.demo``, and the public ``kafkalog.spark`` names.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HINT = "pip install 'kafkalog[spark]'"

WITHOUT_PYSPARK = textwrap.dedent(
    """
    import sys

    class _NoPySpark:
        '''Behave as an interpreter where pyspark and py4j are not installed.'''

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyspark", "py4j"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoPySpark())
    """
)


def run_without_pyspark(code: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (after the blocker) in a fresh interpreter; the caller checks its exit code and output."""
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PYSPARK + textwrap.dedent(code), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_blocker_really_hides_pyspark():
    proc = run_without_pyspark(
        """
        try:
            import pyspark.sql
        except ModuleNotFoundError as e:
            print("missing", e.name)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "missing pyspark"


def test_core_and_the_log_commands_work_without_pyspark(tmp_path):
    (tmp_path / "logs").mkdir()
    proc = run_without_pyspark(
        """
        import sys
        from click.testing import CliRunner

        import kafkalog, kafkalog.manager, kafkalog.storage, kafkalog.record, kafkalog.cli
        import kafkalog.spark, kafkalog.spark.logfiles, kafkalog.testing.fuzz
        from kafkalog.cli import main

        d = sys.argv[1]
        runner = CliRunner()
        for args, stdin in (
            (["topics", "--log-dir", d, "--create", "--topic", "t"], None),
            (["produce", "--log-dir", d, "--topic", "t"], "one\\ntwo\\n"),
            (["consume", "--log-dir", d, "--topic", "t", "--from-beginning"], None),
            (["spark", "--help"], None),
        ):
            result = runner.invoke(main, args, input=stdin)
            assert result.exit_code == 0, (args, result.output, result.exception)
            print(result.output.strip().replace("\\n", "|"))
        assert not [m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j")]
        """,
        str(tmp_path / "logs"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Created topic t."
    assert lines[2].startswith("one|two|Processed a total of 2 messages")
    assert "needs the kafkalog[spark] extra" in " ".join(lines[3].replace("|", " ").split())


def test_the_spark_api_without_pyspark_names_the_extra():
    proc = run_without_pyspark(
        """
        import kafkalog.spark
        from kafkalog.spark import PySparkMissingError
        from kafkalog.spark.session import local_session as direct

        attempts = {
            "from kafkalog.spark import local_session": lambda: __import__("kafkalog.spark", fromlist=["local_session"])
            .local_session,
            "kafkalog.spark.KafkaLogDataSource": lambda: kafkalog.spark.KafkaLogDataSource,
            "kafkalog.spark.register": lambda: kafkalog.spark.register(None),
            "kafkalog.spark.session.local_session()": direct,
        }
        for label, attempt in attempts.items():
            try:
                attempt()
            except PySparkMissingError as e:
                assert isinstance(e, ModuleNotFoundError) and e.name == "pyspark", (label, e.name)
                print(label, "->", e)
            else:
                raise AssertionError(f"{label} worked without pyspark")
        """
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4
    for line in lines:
        assert line.endswith(f"Install the Spark extra: {HINT}"), line
        assert "needs pyspark, which is not installed (No module named 'pyspark')" in line


def test_kafkalog_spark_commands_without_pyspark_fail_with_one_line_naming_the_extra(tmp_path):
    proc = run_without_pyspark(
        """
        import sys
        from click.testing import CliRunner
        from kafkalog.cli import main

        for job in (["report"], ["export", "--topic", "t", "--output", sys.argv[1] + "/out"]):
            result = CliRunner().invoke(main, ["spark", *job, "--log-dir", sys.argv[1]])
            print(result.exit_code, result.output.strip())
        """,
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    for line in lines:
        assert line.startswith("1 Error: kafkalog's Spark support"), line
        assert line.endswith(HINT), line
        assert "Traceback" not in line


def test_the_demo_without_pyspark_stops_at_once_naming_the_extra(tmp_path):
    out = tmp_path / "demo-output"
    proc = run_without_pyspark(
        """
        import sys
        from kafkalog.demo import main

        sys.exit(main(["--out", sys.argv[1]]))
        """,
        str(out),
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("kafkalog demo: kafkalog's Spark support"), proc.stderr
    assert proc.stderr.strip().endswith(HINT)
    assert not out.exists()  # it said so before writing anything


def test_pyspark_is_declared_as_the_spark_extra_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.lower().startswith("pyspark")]
    assert [d for d in project["optional-dependencies"]["spark"] if d.startswith("pyspark")] == ["pyspark>=4.2"]
