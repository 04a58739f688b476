"""What several commands share: opening log dirs (read-only, or through the LogManager), and config options."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..layout import CLEAN_SHUTDOWN_FILE, LOG_DIR_ROOT_FILES, METADATA_PARTITION_DIR, METADATA_TOPIC
from ..manager import LogManager
from ..partition.readonly import ReadOnlyLogDir, log_dir_problem
from ..storage.properties import load_properties


def log_dirs_option(help: str, required: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--log-dir, repeatable (Kafka's log.dirs), as the ``log_dirs`` tuple of paths."""
    return click.option(
        "--log-dir",
        "log_dirs",
        required=required,
        multiple=True,
        type=click.Path(file_okay=False, path_type=Path),
        help=help,
    )


def log_dir_or_broker_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--log-dir (offline) or --bootstrap-server with --command-config (a running broker), as Kafka's tools take;
    exactly one of the two is checked by :func:`online_or_offline`."""
    command = click.option(
        "--command-config",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="Client properties for --bootstrap-server (security.protocol, sasl.*, ssl.*), as Kafka's tools take.",
    )(command)
    command = click.option(
        "--bootstrap-server", default=None, metavar="HOST:PORT", help="A running broker (instead of --log-dir)."
    )(command)
    return log_dirs_option(
        "A Kafka log dir, offline (repeat for several, as log.dirs); or use --bootstrap-server.", required=False
    )(command)


def online_or_offline(log_dirs: tuple[Path, ...], bootstrap_server: str | None, command_config: Path | None) -> bool:
    """True for a broker (--bootstrap-server), False for log dirs; a usage error unless exactly one was given."""
    if log_dirs and bootstrap_server:
        raise click.UsageError("--log-dir and --bootstrap-server cannot be used together: give exactly one")
    if not log_dirs and not bootstrap_server:
        raise click.UsageError(
            "Exactly one of --log-dir (offline) or --bootstrap-server (a running broker) is required"
        )
    if command_config is not None and not bootstrap_server:
        raise click.UsageError("--command-config applies to --bootstrap-server only")
    return bootstrap_server is not None


broker_config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A broker server.properties (log.* settings: retention check interval, defaults for topics).",
)


@dataclass(frozen=True)
class Location:
    """Where a command that works on log dirs or on a running broker works: the --log-dir values (offline), or
    --bootstrap-server with its --command-config (online), and the broker's server.properties (--config, offline
    only). Exactly one of the first two is given (checked when it is made)."""

    log_dirs: tuple[Path, ...]
    bootstrap_server: str | None
    command_config: Path | None
    config_file: Path | None
    online: bool  # a running broker (--bootstrap-server), not log dirs

    @property
    def bootstrap(self) -> str:
        """--bootstrap-server of an online location."""
        assert self.bootstrap_server is not None
        return self.bootstrap_server


def location_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--log-dir or --bootstrap-server (with --command-config), and --config, given to the command as one
    ``location`` (:class:`Location`), after the checks of :func:`online_or_offline` and of --config (a log dir's
    broker settings: refused with --bootstrap-server)."""

    @functools.wraps(command)
    def run(
        log_dirs: tuple[Path, ...],
        bootstrap_server: str | None,
        command_config: Path | None,
        config_file: Path | None,
        **kwargs: Any,
    ) -> Any:
        online = online_or_offline(log_dirs, bootstrap_server, command_config)
        if online and config_file is not None:
            raise click.UsageError("--config (a broker's server.properties) applies to --log-dir only")
        return command(location=Location(log_dirs, bootstrap_server, command_config, config_file, online), **kwargs)

    return log_dir_or_broker_options(broker_config_option(run))


def open_manager(
    log_dirs: tuple[Path, ...], config_file: Path | None = None, topic_configs: dict[str, str] | None = None
) -> LogManager:
    """A started LogManager over existing log dirs (a missing dir is an error, not created: a data error, exit
    status 1, as every problem with what is on disk)."""
    for directory in log_dirs:
        if not directory.is_dir():
            what = "is not a directory" if directory.exists() else "does not exist"
            raise click.ClickException(f"Log dir {directory} {what}")
    broker = dict(load_properties(config_file)) if config_file else {}
    broker.pop("log.dirs", None)
    broker.pop("log.dir", None)
    # A command never compacts behind the user's back: `kafkalog clean` runs the cleaner explicitly.
    broker["log.cleaner.enable"] = "false"
    manager = LogManager(list(log_dirs), broker)
    manager.startup()
    return manager


def open_readonly(log_dirs: tuple[Path, ...]) -> ReadOnlyLogDir:
    """The read-only view of existing log dirs, for a command that only reads: no lock, nothing written, and
    a folder that is missing or is not a log dir refused with one line that says why (exit status 1: the
    command line was well formed, what is at the path is not a log dir)."""
    for directory in log_dirs:
        problem = log_dir_problem(directory)
        if problem is not None:
            raise click.ClickException(problem)
    return ReadOnlyLogDir(list(log_dirs))


@contextlib.contextmanager
def private_copy_manager(
    log_dir: Path, config_file: Path | None, topic: str, partition: int | None = None
) -> Iterator[LogManager]:
    """A started LogManager over a private copy of ``topic``'s partitions (or of one), for commands that need Kafka's
    whole log machinery (the retention rules, a dry-run clean) but must not write into the log dir.

    Loading a log writes (indexes, snapshots, checkpoints, the lock, the clean-shutdown marker), so the
    topic's partition directories, the KRaft metadata partition and the dir's root files are copied, with
    their mtimes, into a temporary directory (under TMPDIR) that is removed afterwards; the copy loads as the
    original would, and the log dir itself is only read. The copy needs as much free space as those files."""
    view = open_readonly((log_dir,))
    partitions = [view.partition(topic, partition)] if partition is not None else view.partitions_of(topic)
    with tempfile.TemporaryDirectory(prefix="kafkalog-readonly-") as scratch:
        copy = Path(scratch) / "log-dir"
        copy.mkdir()
        for name in (*LOG_DIR_ROOT_FILES, CLEAN_SHUTDOWN_FILE):
            if (log_dir / name).is_file():
                shutil.copy2(log_dir / name, copy / name)
        # The KRaft metadata partition travels too: a KRaft broker's topic configs live there.
        metadata = [log_dir / METADATA_PARTITION_DIR] if (log_dir / METADATA_PARTITION_DIR).is_dir() else []
        for directory in [*(Path(p.directory) for p in partitions if p.topic != METADATA_TOPIC), *metadata]:
            shutil.copytree(directory, copy / directory.name)
        manager = open_manager((copy,), config_file)
        try:
            yield manager
        finally:
            manager.shutdown()


def parse_key_values(items: tuple[str, ...], what: str) -> dict[str, str]:
    """``k=v`` pairs into a dict, with a clear error for anything else."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=what)
        out[key.strip()] = value.strip()
    return out


# ----- signals and a closed stdout, for every command (the group's invoke wraps each command in process_guard) --
EXIT_OK = 0
EXIT_SIGNAL_BASE = 128  # a command stopped by signal N exits 128 + N, as the JVM running Kafka's tools does


class Interrupted(BaseException):
    """SIGTERM (or SIGINT where a command defers it) as an exception, so that ``finally`` blocks run: a producer
    flushes what it read, a consumer closes and prints its total. A BaseException, as KeyboardInterrupt, so that
    ``except Exception`` does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def quiet_closed_stdout() -> None:
    """After a BrokenPipeError on stdout (``| head``): point fd 1 at /dev/null, so that the interpreter's last
    flush of what is still buffered does not fail again and print "Exception ignored ... Broken pipe"."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


@contextlib.contextmanager
def process_guard() -> Iterator[None]:
    """Runs one command: SIGTERM raises :class:`Interrupted` (Python's default would kill the process without
    running ``finally``); a reader that went away (``kafkalog consume ... | head -1``) ends the command quietly with
    exit code 0, as Kafka's tools (Java's PrintStream swallows the error) instead of ``Error: [Errno 32] Broken
    pipe``; Ctrl-C and SIGTERM exit 130 and 143 without a traceback, after the command's own clean-up ran."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        yield
        with contextlib.suppress(ValueError):  # stdout already closed
            sys.stdout.flush()  # what is still buffered: a closed pipe shows here when nothing failed before
    except BrokenPipeError:
        quiet_closed_stdout()
        sys.exit(EXIT_OK)
    except KeyboardInterrupt:
        sys.exit(EXIT_SIGNAL_BASE + signal.SIGINT)
    except Interrupted as e:
        sys.exit(EXIT_SIGNAL_BASE + e.signum)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
