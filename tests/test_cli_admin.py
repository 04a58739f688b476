"""The admin commands as a Kafka operator uses them (issue 24): verify and dump on input that is not Kafka's,
kafka-topics.sh's checks and messages, the log dir lock's holder, UTF-8 as Java prints it, errors as one line.

Each format or message is Kafka's; the Kafka source it follows is named next to the assertion."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kafkalog.cli import main
from kafkalog.record.java_text import java_utf8
from test_cli_dump import _build_log


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


# ----- verify and dump: what is not a log dir, and garbage files ----------------------------------------------


def test_verify_refuses_a_directory_that_is_not_a_kafka_log_dir(tmp_path: Path) -> None:
    """/etc-like folders: 'dbus-1' and 'polkit-1' are named like partitions (<topic>-<n>) but hold no segment;
    Kafka's rules (LogManager: a log dir has meta.properties or checkpoints; a partition dir holds .log segments)
    say this is not a log dir. Refused with one line, exit status 1, nothing written."""
    etc = tmp_path / "etc"
    (etc / "dbus-1" / "system.d").mkdir(parents=True)
    (etc / "dbus-1" / "session.conf").write_text("<busconfig/>")
    (etc / "polkit-1").mkdir()
    (etc / "hostname").write_text("box\n")
    before = tree_state(etc)
    result = run("verify", str(etc))
    assert result.exit_code == 1, result.output
    assert f"{etc} is not a Kafka log dir" in result.output and "clean" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert tree_state(etc) == before
    # the real /etc too, where the machine has one
    if Path("/etc/passwd").exists() and not Path("/etc/meta.properties").exists():
        real = run("verify", "/etc")
        assert real.exit_code == 1 and "is not a Kafka log dir" in real.output


GARBAGE = bytes((i * 73 + 41) % 256 for i in range(120))  # deterministic bytes that are no Kafka structure


@pytest.mark.parametrize("suffix", [".snapshot", ".timeindex", ".txnindex", ".index", ".log"])
def test_dump_exits_1_on_a_garbage_file_of_every_kind(tmp_path: Path, suffix: str) -> None:
    """The same input class (a damaged file) gives the same exit status whatever the file kind: 1. The text Kafka's
    DumpLogSegments prints (core/src/main/scala/kafka/tools/DumpLogSegments.scala) comes first, unchanged."""
    log = _build_log(tmp_path, [(b"k", b"v")])  # a valid segment next to the garbage index files
    target = log.with_suffix(suffix)
    target.write_bytes(GARBAGE)
    result = run("dump", "--files", str(target))
    assert result.exit_code == 1, (suffix, result.output)
    assert result.stdout.startswith(f"Dumping {target}\n")
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and "Traceback" not in result.output


def test_dump_of_an_intact_segment_still_exits_0(tmp_path: Path) -> None:
    log = _build_log(tmp_path, [(b"k", b"v")])
    assert run("dump", "--files", str(log), "--print-data-log").exit_code == 0


# ----- topics -------------------------------------------------------------------------------------------------


def test_topics_requires_exactly_one_action(tmp_path: Path) -> None:
    """TopicCommand.java (TopicCommandOptions.checkArgs): 'Command must include exactly one action: --list,
    --describe, --create, --alter or --delete'; a usage error (2)."""
    run("topics", "--log-dir", str(tmp_path), "--create", "--topic", "t")
    for args in (["--list", "--describe"], ["--create", "--delete"], []):
        result = run("topics", "--log-dir", str(tmp_path), *args, "--topic", "t")
        assert result.exit_code == 2, (args, result.output)
        assert "Command must include exactly one action: --list, --describe, --create, --alter or --delete" in (
            result.output
        )
    # an option with an action it does not belong to (TopicCommandOptions.checkInvalidArgs)
    wrong = run("topics", "--log-dir", str(tmp_path), "--list", "--if-not-exists")
    assert wrong.exit_code == 2 and 'Option "[if-not-exists]" can\'t be used with option "[list]"' in wrong.output


def test_topics_alter_delete_config_of_an_unset_config_fails(tmp_path: Path) -> None:
    """ConfigCommand.scala (alterResourceConfig): deleting a config the topic does not set fails with
    'Invalid config(s): nope', and nothing changes."""
    d = str(tmp_path)
    run("topics", "--log-dir", d, "--create", "--topic", "t", "--config", "retention.ms=60000")
    result = run("topics", "--log-dir", d, "--alter", "--topic", "t", "--delete-config", "nope")
    assert result.exit_code == 1 and result.output == "Error: Invalid config(s): nope\n"
    both = run(
        "topics", "--log-dir", d, "--alter", "--topic", "t", "--delete-config", "retention.ms",
        "--delete-config", "segment.ms", "--delete-config", "nope",
    )  # fmt: skip
    assert both.exit_code == 1 and both.output == "Error: Invalid config(s): segment.ms,nope\n"
    described = run("topics", "--log-dir", d, "--describe", "--topic", "t").output
    assert "Configs: retention.ms=60000" in described  # untouched
    ok = run("topics", "--log-dir", d, "--alter", "--topic", "t", "--delete-config", "retention.ms")
    assert ok.exit_code == 0 and "Completed updating config for topic t." in ok.output


def test_topics_create_creates_a_missing_log_dir_as_a_broker_does(tmp_path: Path) -> None:
    """A broker creates missing log.dirs at startup (LogManager.createAndValidateLogDirs); `topics --create`, the
    command that starts a log dir, does the same and says so on stderr. Reading commands never create one."""
    d = tmp_path / "new" / "logs"
    listed = run("topics", "--log-dir", str(d), "--list")
    assert listed.exit_code == 1 and "does not exist" in listed.output and not d.exists()
    result = run("topics", "--log-dir", str(d), "--create", "--topic", "t")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Created topic t.\n" and f"Created log dir {d}" in result.stderr
    assert (d / "t-0").is_dir() and (d / "meta.properties").is_file()
    assert run("topics", "--log-dir", str(d), "--list").output == "t\n"


def test_topics_refuses_a_name_that_collides_with_an_existing_topic(tmp_path: Path) -> None:
    """ReplicationControlManager.java (validateNewTopicNames): InvalidTopicException "Topic 'a_b' collides with
    existing topic: a.b" ('.' and '_' give the same metric names)."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "a.b").exit_code == 0
    result = run("topics", "--log-dir", d, "--create", "--topic", "a_b")
    assert result.exit_code == 1 and result.output == "Error: Topic 'a_b' collides with existing topic: a.b\n"
    assert run("topics", "--log-dir", d, "--list").output == "a.b\n"


def test_topics_refuses_to_create_internal_topics_offline(tmp_path: Path) -> None:
    d = str(tmp_path)
    for name in ("__consumer_offsets", "__transaction_state"):
        result = run("topics", "--log-dir", d, "--create", "--topic", name)
        assert result.exit_code == 1 and f"Topic '{name}' is internal" in result.output
    # KafkaApis.scala / ControllerApis.scala: "Creation of internal topic __cluster_metadata is prohibited."
    meta = run("topics", "--log-dir", d, "--create", "--topic", "__cluster_metadata")
    assert meta.output == "Error: Creation of internal topic __cluster_metadata is prohibited.\n"
    assert not any(tmp_path.glob("__*"))


def test_topics_data_errors_exit_1_and_usage_errors_exit_2(tmp_path: Path) -> None:
    d = str(tmp_path)
    run("topics", "--log-dir", d, "--create", "--topic", "t")
    data_errors = [
        ["--create", "--topic", "t"],  # exists
        ["--describe", "--topic", "missing"],
        ["--delete", "--topic", "missing"],
        ["--alter", "--topic", "t", "--partitions", "1"],  # not a growth
        ["--alter", "--topic", "t", "--config", "retention.ms=abc"],
    ]
    for args in data_errors:
        result = run("topics", "--log-dir", d, *args)
        assert result.exit_code == 1, (args, result.output)
        assert result.output.startswith("Error: ") and len(result.output.splitlines()) == 1, result.output
    # TopicCommand.java (ensureTopicExists): "Topic 'missing' does not exist as expected"
    assert "Topic 'missing' does not exist as expected" in run("topics", "--log-dir", d, "--describe", "--topic",
                                                               "missing").output  # fmt: skip
    usage_errors = [["--create"], ["--list", "--partitions", "3"], ["--create", "--topic", "u", "--if-exists"]]
    for args in usage_errors:
        assert run("topics", "--log-dir", d, *args).exit_code == 2, args


def test_topics_if_exists_if_not_exists_exclude_internal_and_overrides(tmp_path: Path) -> None:
    """TopicCommand.java: --if-not-exists (create: an existing topic is no error), --if-exists (alter, delete,
    describe: a missing topic is no error), --exclude-internal (Topic.isInternal names left out),
    --topics-with-overrides (only topics with overrides, their summary line only)."""
    d = str(tmp_path)
    assert run("topics", "--log-dir", d, "--create", "--topic", "plain").exit_code == 0
    assert run("topics", "--log-dir", d, "--create", "--topic", "tuned", "--config", "retention.ms=1000").exit_code == 0
    again = run("topics", "--log-dir", d, "--create", "--topic", "plain", "--if-not-exists")
    assert (again.exit_code, again.output) == (0, "")
    for action in (["--describe"], ["--delete"], ["--alter", "--partitions", "3"]):
        quiet = run("topics", "--log-dir", d, *action, "--topic", "ghost", "--if-exists")
        assert (quiet.exit_code, quiet.output) == (0, ""), action
    # an internal topic as the group coordinator creates it (kafkalog's LogManager, as a broker would)
    from kafkalog.manager import LogManager

    with LogManager(tmp_path) as manager:
        manager.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    assert run("topics", "--log-dir", d, "--list").output.split() == ["__consumer_offsets", "plain", "tuned"]
    assert run("topics", "--log-dir", d, "--list", "--exclude-internal").output.split() == ["plain", "tuned"]
    described = run("topics", "--log-dir", d, "--describe", "--exclude-internal").output
    assert "__consumer_offsets" not in described and "Topic: plain" in described
    overrides = run("topics", "--log-dir", d, "--describe", "--topics-with-overrides").output.splitlines()
    assert len(overrides) == 2  # __consumer_offsets (cleanup.policy) and tuned, summary lines only
    assert overrides[1].startswith("Topic: tuned\tTopicId: ") and overrides[1].endswith("Configs: retention.ms=1000")


def test_the_lock_error_names_the_process_holding_it(tmp_path: Path) -> None:
    """Kafka's .lock is empty (LogManager.lockLogDirs, FileLock) and stays so; the holder is read from the kernel's
    lock table (/proc/locks): a kafkalog process's flock, or a Kafka broker's POSIX lock."""
    run("topics", "--log-dir", str(tmp_path), "--create", "--topic", "t")
    for kind in ("flock", "lockf"):  # kafkalog's LogManager / Java's FileLock
        holder = subprocess.Popen(
            [sys.executable, "-c",
             f"import fcntl, os, sys, time; fd = os.open({str(tmp_path / '.lock')!r}, os.O_RDWR); "
             f"fcntl.{kind}(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
            result = run("topics", "--log-dir", str(tmp_path), "--delete", "--topic", "t")
            assert result.exit_code == 1, result.output
            assert f"Failed to acquire lock on file .lock in {tmp_path}" in result.output
            assert f"Held by process {holder.pid} (" in result.output and "Traceback" not in result.output
        finally:
            holder.kill()
            holder.wait()
    assert (tmp_path / ".lock").read_bytes() == b""  # still Kafka's empty lock file
    fd = os.open(tmp_path / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # and free again
    finally:
        os.close(fd)


# ----- dump: UTF-8 as Java decodes it ------------------------------------------------------------------------

# Java's own output, obtained with OpenJDK 17.0.15 (and identical with Temurin 25): a program that prints
# new String(bytes, StandardCharsets.UTF_8) with every char outside printable ASCII as \uXXXX, run on these bytes.
JAVA_UTF8 = [
    ("6beda0807a", "k\ufffdz"),  # an encoded surrogate: one replacement for three bytes (Python: three)
    ("6bff7a", "k\ufffdz"),
    ("6bc07a", "k\ufffdz"),
    ("6bc0807a", "k\ufffd\ufffdz"),  # overlong lead C0, then a lone continuation byte
    ("6be2827a", "k\ufffdz"),  # a 3-byte sequence cut by 'z': one replacement for e2 82
    ("6be282", "k\ufffd"),  # truncated at the end
    ("6bf09f987a", "k\ufffdz"),
    ("6bf09f98", "k\ufffd"),
    ("6bf4908080", "k\ufffd\ufffd\ufffd\ufffd"),  # above U+10FFFF: each byte
    ("6bf8888080807a", "k\ufffd\ufffd\ufffd\ufffd\ufffdz"),  # a 5-byte form
    ("6bc3", "k\ufffd"),
    ("e0808061", "\ufffd\ufffd\ufffda"),  # an overlong 3-byte form
    ("eda080edb080", "\ufffd\ufffd"),  # a surrogate pair encoded as two 3-byte sequences (CESU-8)
    ("f09f9880", "\U0001f600"),
    ("efbfbd", "\ufffd"),
    ("61808062", "a\ufffd\ufffdb"),
    ("c2", "\ufffd"),
    ("fe", "\ufffd"),
    ("ed9fbf", "\ud7ff"),
    ("eda0", "\ufffd"),
    ("f08f8080", "\ufffd\ufffd\ufffd\ufffd"),  # an overlong 4-byte form
    ("f48f8080", "\U0010f000"),  # Java: \udbfc\udc00
    ("f0908080", "\U00010000"),
    ("61e0a07a", "a\ufffdz"),
]


@pytest.mark.parametrize(("hexed", "java"), JAVA_UTF8)
def test_utf8_is_decoded_as_java_decodes_it(hexed: str, java: str) -> None:
    assert java_utf8(bytes.fromhex(hexed)) == java


def test_dump_print_data_log_replaces_malformed_utf8_as_kafka(tmp_path: Path) -> None:
    """DumpLogSegments.scala prints keys and payloads with StringDecoder, i.e. new String(bytes, UTF_8): key bytes
    6b ed a0 80 7a print as 'k\ufffdz' (one replacement), not three."""
    log = _build_log(tmp_path, [(bytes.fromhex("6beda0807a"), bytes.fromhex("61808062")), (b"ok", b"fine")])
    result = run("dump", "--files", str(log), "--print-data-log")
    assert result.exit_code == 0, result.output
    records = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    assert records[0].endswith(" key: k\ufffdz payload: a\ufffd\ufffdb")
    assert records[1].endswith(" key: ok payload: fine")


# ----- spark jobs: one line, and only real commands recommended ----------------------------------------------


def test_spark_ingest_into_a_missing_topic_is_one_line_naming_the_real_command(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    logs = tmp_path / "logs"
    run("topics", "--log-dir", str(logs), "--create", "--topic", "other")
    (tmp_path / "in.json").write_text('{"a": 1}\n')
    result = run("spark", "ingest", str(tmp_path / "in.json"), "--log-dir", str(logs), "--topic", "nope")
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("Error: Topic 'nope' does not exist in ")
    assert f"kafkalog topics --log-dir {logs} --create --topic nope" in lines[0]
    assert "topics create" not in result.output
    # the command it recommends is a real one: run it, then the ingest's topic check passes
    assert run("topics", "--log-dir", str(logs), "--create", "--topic", "nope").exit_code == 0


def test_spark_errors_from_a_worker_or_from_spark_become_one_line() -> None:
    from kafkalog.cli.spark_jobs import spark_error_line

    class JavaError(Exception):  # what py4j raises: the JVM's exception, whose text carries the worker's traceback
        def __init__(self, text: str) -> None:
            super().__init__("An error occurred while calling o51.save.")
            self.java_exception = type("J", (), {"toString": lambda _self: text})()

    worker = JavaError(
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times\n"
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/x/kafkalog/spark/writer.py", line 470, in _load\n'
        "kafkalog.errors.UnknownTopicOrPartitionError: Topic nope not present in the log dirs /d\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)\n"
    )
    assert spark_error_line(worker) == "UnknownTopicOrPartitionError: Topic nope not present in the log dirs /d"
    analysis = Exception("[PATH_NOT_FOUND] Path does not exist: file:/nowhere. SQLSTATE: 42K03\n\nJVM stacktrace:\n...")
    assert spark_error_line(analysis) == "[PATH_NOT_FOUND] Path does not exist: file:/nowhere. SQLSTATE: 42K03"


def test_a_spark_job_error_is_one_line_unless_debug(spark, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    run("topics", "--log-dir", str(logs), "--create", "--topic", "t")
    args = ["spark", "ingest", str(tmp_path / "missing.json"), "--log-dir", str(logs), "--topic", "t"]
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert (
        result.output.startswith("Error: [PATH_NOT_FOUND] Path does not exist")
        and len(result.output.strip().splitlines()) == 1
    ), result.output
    debug = run("--debug", *args)
    assert debug.exit_code == 1 and debug.exception is not None and "PATH_NOT_FOUND" in str(debug.exception)


# ----- explain retention --html: a chart read at a glance ------------------------------------------------------


def _figures(page: str) -> list[dict]:
    """The plotly figures the page draws: each chart is drawn from its <script type=application/json> block (no
    headless browser here: the figure JSON that Plotly.newPlot receives is read instead)."""
    import json
    import re

    return [json.loads(m) for m in re.findall(r"<script type='application/json' id='figure-\d+'>(.*?)</script>", page,
                                             re.S)]  # fmt: skip


DAY_MS = 86_400_000


def _retention_page(tmp_path: Path) -> tuple[int, str, str]:
    """A topic whose segments' timestamps are a month and minutes apart, and its `explain retention --html` page:
    (the time it was made, the CLI's output, the page)."""
    import time

    from kafkalog.manager import LogManager

    now = int(time.time() * 1000)
    with LogManager([tmp_path], {"log.cleaner.enable": "false"}) as manager:
        manager.create_topic("t", 1, {"segment.bytes": "200", "retention.ms": str(3 * DAY_MS)})
        for i, age in enumerate([30 * DAY_MS, 2 * DAY_MS, DAY_MS, 0]):
            manager.produce("t", b"record %d" % i, partition=0, timestamp=now - age)
    page_file = tmp_path.parent / "timeline.html"
    result = run("explain", "retention", str(tmp_path), "--topic", "t", "--html", str(page_file))
    assert result.exit_code == 0, result.output
    return now, result.output, page_file.read_text()


def test_explain_retention_html_is_a_timeline_from_the_first_segment_to_the_files_gone_time(tmp_path: Path) -> None:
    import datetime as dt
    import re

    now, output, page = _retention_page(tmp_path)
    assert "<script src=" not in page and "Plotly.newPlot" in page  # self-contained: plotly.js inline
    (figure,) = _figures(page)
    layout = figure["layout"]

    def ms(text: str) -> int:
        return int(dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp() * 1000)

    bars = [t for t in figure["data"] if t["type"] == "bar"]
    rows = [row for t in bars for row in t["customdata"]]
    assert len(rows) == len(list((tmp_path / "t-0").glob("*.log"))) >= 3  # every segment has its bar
    # the axis: from the first segment's largest timestamp to the last files-gone time (padded), not to "now"
    lo, hi = (ms(x) for x in layout["xaxis"]["range"])
    first = min(ms(b) for t in bars for b in t["base"])
    gone = max(ms(r[6]) for r in rows if r[6] != "-")
    assert lo < first and first - lo <= (hi - lo) * 0.1
    assert gone < hi and hi - gone <= (hi - lo) * 0.1 and gone > now  # the newest records go in ~3 days
    # a labelled "now" line
    texts = [a["text"] for a in layout["annotations"]]
    assert any(text.startswith("now<br>") for text in texts)
    assert any(s["type"] == "line" and abs(ms(s["x0"]) - now) < 120_000 for s in layout["shapes"])
    # every column of the CLI table, in its hover text and in the HTML table, with one time format
    from kafkalog.cli.explain import RETENTION_COLUMNS

    assert "deleted at (UTC)" in RETENTION_COLUMNS and len(RETENTION_COLUMNS) == 8
    assert all(len(row) == 8 for row in rows)
    assert all(f"{c}: %{{customdata[{i}]}}" in bars[0]["hovertemplate"] for i, c in enumerate(RETENTION_COLUMNS))
    for column in RETENTION_COLUMNS:
        assert f"<th>{column}</th>" in page
        assert column in output or column.split(" (")[0] in output  # the CLI table's own columns
    when = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|-)$")
    assert all(when.match(row[i].removesuffix(" (mtime)")) for row in rows for i in (3, 5, 6)), rows
    cells = re.findall(r"<td>([^<]*)</td>", page) + re.findall(r"<p>([^<]*)</p>", page)
    assert not any(re.search(r"\b1[6-9]\d{11}\b", c) for c in cells)  # no epoch milliseconds: one time format
    assert not any(re.search(r"\d{4}-\d\d-\d\dT\d\d:", c) for c in cells)  # and no ISO-8601 either


def test_the_retention_page_in_a_headless_browser(tmp_path: Path) -> None:
    """The page loaded in a real headless Chromium: what it renders (its SVG) has one bar per segment, the
    labelled now line, date tick labels in the table's format, the legend and the table."""
    import re
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless Chromium here (`make test` installs Debian's chromium, as it does kcat)")
    _, _, page = _retention_page(tmp_path)
    page_file = tmp_path.parent / "page.html"
    page_file.write_text(page)
    shown = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--dump-dom",
         page_file.as_uri()],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert 'class="main-svg"' in shown, "plotly drew nothing"
    bars = shown[shown.index('class="barlayer') : shown.index('class="scatterlayer')]
    assert bars.count('<g class="point"><path d="M') == len(list((tmp_path / "t-0").glob("*.log")))
    labels = re.findall(r'class="annotation-text"[^>]*data-unformatted="([^"]*)"', shown)
    assert any(re.fullmatch(r"now&lt;br&gt;\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", label) for label in labels), labels
    ticks = re.findall(r'class="xtick"><text[^>]*>([^<]*)<', shown)
    assert ticks and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", t) for t in ticks), ticks
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', shown)
    assert "deleted at the next check" in legend and "renamed .deleted (retention check)" in legend
    assert "<th>deleted at (UTC)</th>" in shown


# ----- any other error: one line, exit 1, the traceback only with --debug --------------------------------------


def test_an_unexpected_error_is_one_line_unless_debug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kafkalog.cli.offsets as offsets

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the client library failed in an unforeseen way")

    monkeypatch.setattr(offsets, "_offsets_offline", broken)
    run("topics", "--log-dir", str(tmp_path), "--create", "--topic", "t")
    result = run("get-offsets", "--log-dir", str(tmp_path), "--topic", "t")
    assert result.exit_code == 1
    assert result.output == (
        "Error: RuntimeError: the client library failed in an unforeseen way (run with --debug for the traceback)\n"
    )
    debug = run("--debug", "get-offsets", "--log-dir", str(tmp_path), "--topic", "t")
    assert debug.exit_code == 1 and isinstance(debug.exception, RuntimeError)


@pytest.mark.parametrize("suffix", [".snapshot", ".timeindex", ".txnindex", ".index"])
def test_verify_exits_1_on_a_garbage_file_of_every_kind(tmp_path: Path, suffix: str) -> None:
    """verify, like dump: a damaged file beside a valid segment is a problem (exit 1) whatever its kind."""
    import shutil

    d = tmp_path / "d"
    run("topics", "--log-dir", str(d), "--create", "--topic", "t")
    log = _build_log(tmp_path, [(b"k", b"v")])
    for old in (d / "t-0").glob("00000000000000000000.*"):
        old.unlink()
    shutil.copy(log, d / "t-0" / log.name)
    (d / "t-0" / log.name).with_suffix(suffix).write_bytes(GARBAGE)
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint"):
        (d / name).unlink(missing_ok=True)
    result = run("verify", str(d))
    assert result.exit_code == 1, (suffix, result.output)
    assert f"PROBLEM t-0/00000000000000000000{suffix}" in result.output


# ----- every command a message or the README recommends exists ------------------------------------------------


def _command_exists(words: list[str]) -> bool:
    import click

    command: click.Command = main
    for word in words:
        if not isinstance(command, click.Group):
            return True  # the rest are arguments
        sub = command.commands.get(word)
        if sub is None:
            return False
        command = sub
    return True


def test_every_recommended_command_is_a_real_one() -> None:
    """Messages and the README name commands as `kafkalog <command> [<subcommand>] --option`: each must exist
    (the Spark sink once recommended `kafkalog topics create`)."""
    import re

    root = Path(__file__).resolve().parents[1]
    texts = [p.read_text(encoding="utf-8") for p in (root / "src" / "kafkalog").rglob("*.py")]
    texts.append((root / "README.md").read_text(encoding="utf-8"))
    found = set()
    for text in texts:
        for m in re.finditer(r"(?<!from )\bkafkalog ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)(?= --| [A-Z/.])", text):
            found.add(m.group(1))
    prose = {"source", "sink", "demo", "writes", "reads", "then", "knows", "extension", "did", "may", "does"}
    candidates = {words for words in found if words.split()[0] not in prose}
    assert {"topics", "dump", "spark"} <= {c.split()[0] for c in candidates}  # the scan finds them
    missing = sorted(c for c in candidates if not _command_exists(c.split()))
    assert missing == [], missing
    # an option written as a sub-command ("kafkalog topics create" for "kafkalog topics --create")
    import click

    wrong = []
    for text in texts:
        for m in re.finditer(r"(?<![\w.])kafkalog ([a-z][a-z-]*) ([a-z][a-z-]*)\b", text):
            command = main.commands.get(m.group(1))
            if command is not None and not isinstance(command, click.Group):
                options = {o for p in command.params for o in getattr(p, "opts", [])}
                if f"--{m.group(2)}" in options:
                    wrong.append(m.group(0))
    assert wrong == [], wrong


def test_a_refused_create_does_not_leave_a_new_log_dir_behind(tmp_path: Path) -> None:
    d = tmp_path / "new"
    bad_name = run("topics", "--log-dir", str(d), "--create", "--topic", "bad/name")
    bad_config = run("topics", "--log-dir", str(d), "--create", "--topic", "t", "--config", "segment.bytes=13")
    assert bad_name.exit_code == 1 and bad_config.exit_code == 1 and "segment.bytes" in bad_config.output
    assert not d.exists()


@pytest.mark.parametrize("job", [["export", "--topic", "t", "--output", "out"], ["report"]])
def test_spark_jobs_refuse_a_folder_that_is_not_a_log_dir_before_spark_starts(tmp_path: Path, job: list[str]) -> None:
    pytest.importorskip("pyspark")
    missing = tmp_path / "nowhere"
    result = run("spark", job[0], "--log-dir", str(missing), *job[1:])
    assert result.exit_code == 1 and result.output == f"Error: Log dir {missing} does not exist\n"


# ----- dump --cluster-metadata-decoder on a real KRaft broker's snapshot ----------------------------------------


def test_cluster_metadata_decoder_prints_kafkas_lines_for_a_real_kraft_snapshot() -> None:
    """core/src/main/scala/kafka/tools/DumpLogSegments.scala, ClusterMetadataLogMessageParser: no key ("No keys
    for metadata records"), and the payload is a JSON object {"type": MetadataRecordType name, "version": n,
    "data": MetadataJsonConverters.writeJson(...)}, whose fields follow the record's schema
    (metadata/src/main/resources/common/metadata/PartitionRecord.json: partitionId, topicId, replicas, isr,
    removingReplicas, addingReplicas, leader, leaderEpoch, partitionEpoch, directories; the tagged
    leaderRecoveryState only when it is not its default 0)."""
    import json

    from conftest import fixture_path

    snapshot = fixture_path(
        "broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "__cluster_metadata-0",
        "00000000000000021265-0000000006.checkpoint",
    )  # fmt: skip
    result = run("dump", "--files", str(snapshot), "--cluster-metadata-decoder")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {snapshot}", "Snapshot end offset: 21265, epoch: 6"]
    records = [line for line in lines if line.startswith("| offset: ")]
    assert records and all(" key: " not in line for line in records)
    partitions = [json.loads(line.split(" payload: ", 1)[1]) for line in records if "PARTITION_RECORD" in line]
    assert partitions and all(list(p) == ["type", "version", "data"] for p in partitions)
    assert list(partitions[0]["data"])[:10] == [
        "partitionId", "topicId", "replicas", "isr", "removingReplicas", "addingReplicas", "leader", "leaderEpoch",
        "partitionEpoch", "directories",
    ]  # fmt: skip
