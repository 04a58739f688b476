"""The protocol fuzz target: arbitrary bytes as one request frame through a real broker's decode and dispatch.

``ProtocolFuzzer`` runs a ``KafkaServer`` on a temporary log dir in process, with topic ``fuzz`` (2 partitions,
records in both), topic ``fuzz-doomed``, group ``fuzz-group`` with committed offsets and a transactional id
``fuzz-txn`` already initialised, and hands each frame to its request router as the socket server would
(``RequestRouter(conn, frame)``), on a connection object that is never written to. Its oracle (``check``):

- the router answers with a response whose header echoes the correlation id in the header version of that
  API/version, and whose body decodes with that API/version's response schema to its last byte; or it
  answers nothing, only for an acks=0 Produce; or it closes the connection (``InvalidRequestError`` or
  ``CLOSE``), as Kafka does with a request it cannot parse;
- no other exception, no error record logged by the broker, no ``UNKNOWN_SERVER_ERROR`` (-1) in a response
  (a handler met an exception it did not expect and hid it behind the generic code);
- the event loop is never held for long (``HANG_SECONDS``): a case may park (a long poll), but a case that is
  still waiting after ``PARK_SECONDS`` is judged by the same rules when it completes, in a later case;
- after each case, a valid Metadata request is still answered correctly, and after each case that reached a
  handler a valid ApiVersions request too (a request refused while decoding changed nothing else).

The broker starts afresh (a new log dir) every ``reset_every`` cases, so that topics and groups the cases
create do not pile up over a million cases; a crash input therefore reproduces on a fresh broker
(``check_one``). ``frame_for(control)`` maps any bytes to a frame (raw frames, structure-aware mutations of a
valid request of every API and version from ``protocol_messages``, byte-level mutations of those, and random
bodies behind a valid header); the atheris harness is ``fuzz/fuzz_protocol.py``, the CI form
``tests/test_protocol_fuzz.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import struct
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..broker.apis import RequestRouter
from ..broker.config import KafkaConfig
from ..broker.network import CLOSE, Connection
from ..broker.protocol import APIS, FileRegion, InvalidRequestError, Response
from ..broker.server import KafkaServer
from .fuzz import UnexpectedOutcome, mutate
from .protocol_messages import (
    DOOMED_TOPIC,
    FUZZ_TOPIC,
    FUZZ_TXN,
    Choices,
    encode_frame,
    mutate_message,
    request_header,
    seed_message,
    seed_requests,
    try_encode,
    valid_request,
)

PARK_SECONDS = 0.05  # a case still running after this is parked (a long poll) and judged when it completes
HANG_SECONDS = 10.0  # a case that holds the event loop this long is a hang
MAX_PARKED = 32  # more parked cases than this: start a fresh broker (cancelling them)

BROKER_CONFIG = {
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",  # the seeds' joins settle within their 1 s session timeout
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "log.segment.bytes": "1048576",
}


class _ErrorLog(logging.Handler):
    """Keeps the error records the broker logs (an exception it caught but did not expect, usually)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class _HiddenErrors:
    """Records the exceptions the broker turns into UNKNOWN_SERVER_ERROR, so that a failure names the real cause.

    Installed in place of ``error_code`` in every broker module that imported it (same answers; it only
    remembers each exception that maps to -1, with where it was raised)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._patched: list[tuple[Any, Callable[[BaseException | None], int]]] = []

    def __enter__(self) -> _HiddenErrors:
        import sys

        from ..broker import protocol

        original = protocol.error_code

        def recording(error: BaseException | None) -> int:
            code = original(error)
            if code == -1 and error is not None:
                tb = traceback.extract_tb(error.__traceback__)[-3:]
                where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb))
                self.seen.append(f"{type(error).__name__}: {error} at {where}")
            return code

        for name, module in list(sys.modules.items()):
            if name.startswith("kafkalog.broker") and getattr(module, "error_code", None) is original:
                self._patched.append((module, original))
                module.error_code = recording  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc: object) -> None:
        for module, original in self._patched:
            module.error_code = original
        self._patched.clear()


@functools.cache
def _follow_ups() -> tuple[bytes, ...]:
    """The valid requests that must be answered after every case: Metadata v12 and ApiVersions v3."""
    return tuple(encode_frame(APIS[key], v, valid_request(APIS[key], v), 7) for key, v in ((3, 12), (18, 3)))


@functools.cache
def _setup_frames() -> tuple[bytes, ...]:
    """What a client does first, so that the cases meet a broker with state: FindCoordinator for fuzz-group
    (creates __consumer_offsets) and for fuzz-txn (creates __transaction_state), InitProducerId of fuzz-txn,
    and an offset commit of fuzz-group."""
    find_txn = valid_request(APIS[10], 4)
    find_txn.key_type, find_txn.coordinator_keys = 1, [FUZZ_TXN]
    messages = [(10, valid_request(APIS[10], 4)), (10, find_txn), (22, valid_request(APIS[22], 4))]
    messages.append((8, valid_request(APIS[8], 9)))
    return tuple(encode_frame(APIS[key], message.version, message) for key, message in messages)


def _connection(index: int) -> Connection:
    """A plaintext connection whose socket ends are never used (the router reads only its principal and state)."""
    return Connection(SimpleNamespace(get_extra_info=lambda name: None), index)  # type: ignore[arg-type]


def _response_bytes(response: Response) -> bytes:
    return b"".join(part.read() if isinstance(part, FileRegion) else bytes(part) for part in response.parts)


@functools.cache
def _error_plan(container_class: type) -> tuple[tuple[str, bool], ...]:
    """The fields of a decoded message class worth visiting for error codes: (name, is an error code)."""
    plan = []
    for name, field in container_class._struct.fields.items():  # type: ignore[attr-defined]
        if name.endswith("error_code"):
            plan.append((name, True))
        elif field.is_struct() or field.is_struct_array():
            plan.append((name, False))
    return tuple(plan)


def _unknown_server_errors(container: Any, path: str = "") -> list[str]:
    """Paths of the error codes of -1 (UNKNOWN_SERVER_ERROR) anywhere in a decoded response."""
    found = []
    message_class: type = type(container)
    for name, is_code in _error_plan(message_class):
        value = getattr(container, name, None)
        if is_code:
            if value == -1:
                found.append(f"{path}{name}")
        elif isinstance(value, list):
            for item in value:
                found.extend(_unknown_server_errors(item, f"{path}{name}[]."))
        elif value is not None:
            found.extend(_unknown_server_errors(value, f"{path}{name}."))
    return found


def decode_response(api_key: int, version: int, body: bytes) -> Any:
    """The response body decoded by its schema, which must consume every byte (else ValueError)."""
    klass: Any = APIS[api_key].response  # kafka-python's generated message class (untyped)
    flexible = klass.flexible_version_q(version)
    decode = klass._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=klass[None])
    message, end = decode(memoryview(body), 0)
    if end != len(body):
        raise ValueError(f"{len(body) - end} bytes left after the response")
    return message


def judge(frame: bytes, result: Any) -> str:
    """The outcome of one completed router call on ``frame``: "answered", "closed" or "no-response"; raises
    UnexpectedOutcome for a response that breaks the oracle (see the module docstring)."""
    if result is CLOSE:
        return "closed"
    api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
    if result is None:
        if api_key != 0:
            raise UnexpectedOutcome(f"no response to API {api_key} v{version}: {frame[:64]!r}")
        return "no-response"
    header, response = result
    try:
        body = _response_bytes(response)
    finally:
        response.close()
    spec = APIS[api_key]
    supported = spec.min_version <= version <= spec.max_version
    flexible = supported and spec.flexible(version) and api_key != 18
    expected = struct.pack(">i", correlation_id) + (b"\x00" if flexible else b"")
    if header != expected:
        raise UnexpectedOutcome(f"response header {header!r} to {spec.name} v{version}, expected {expected!r}")
    answer_version = version if supported else 0  # an unsupported ApiVersions is answered in v0 (KIP-511)
    try:
        message = decode_response(api_key, answer_version, body)
    except Exception as e:
        raise UnexpectedOutcome(f"{spec.name} v{version} response does not decode: {e!r}: {frame[:64]!r}") from e
    unknown = _unknown_server_errors(message)
    if unknown:
        raise UnexpectedOutcome(f"{spec.name} v{version} answered UNKNOWN_SERVER_ERROR at {unknown}: {frame[:96]!r}")
    return "answered"


class FuzzBroker:
    """An in-process ``KafkaServer`` on a temporary log dir, with the recorders of logged errors and hidden
    UNKNOWN_SERVER_ERRORs installed: the base of the fuzzers. Use as a context manager; subclasses set the
    broker up in ``_prepare``."""

    config: dict[str, str] = BROKER_CONFIG
    prefix = "kafkalog-protocol-fuzz-"

    def __init__(self, reset_every: int) -> None:
        self.reset_every = reset_every
        self.loop = asyncio.new_event_loop()
        self.errors = _ErrorLog()
        self.hidden = _HiddenErrors()
        self.cases = 0
        self.outcomes: dict[str, int] = {}
        self._server: KafkaServer | None = None
        self._root: str | None = None
        self._index = 0

    def __enter__(self) -> Any:
        logging.getLogger().addHandler(self.errors)
        self.hidden.__enter__()
        self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()
        self.hidden.__exit__()
        logging.getLogger().removeHandler(self.errors)
        self.loop.close()

    def _start(self) -> None:
        self._root = tempfile.mkdtemp(prefix=self.prefix)
        server = KafkaServer(KafkaConfig({**self.config, "log.dirs": self._root}))
        self.loop.run_until_complete(server.startup())
        self._server = server
        self.router = RequestRouter(server)
        self._prepare(server)
        self.errors.records.clear()

    def _prepare(self, server: KafkaServer) -> None:
        """What the cases expect to find on the broker."""

    def _stop(self) -> None:
        if self._server is not None:
            self.loop.run_until_complete(self._server.shutdown())
            self._server = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def reset(self) -> None:
        """A fresh broker on a new log dir (cases still waiting are cancelled)."""
        self._stop()
        self._start()

    def _case(self, run: Callable[[], str]) -> str:
        """One case (``run`` returns its outcome), counted; a case that breaks the oracle resets the broker, so
        that the next starts from a known state, and its report names the exceptions hidden behind
        UNKNOWN_SERVER_ERROR."""
        self.hidden.seen.clear()
        try:
            outcome = run()
        except UnexpectedOutcome as e:
            self.reset()
            if self.hidden.seen:
                raise UnexpectedOutcome(f"{e} (hidden: {'; '.join(self.hidden.seen[:3])})") from e
            raise
        except BaseException:
            self.reset()
            raise
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        return outcome


class ProtocolFuzzer(FuzzBroker):
    """One in-process broker and the oracle around its router. Use as a context manager; ``check(frame)``."""

    def __init__(self, reset_every: int = 2000) -> None:
        super().__init__(reset_every)
        self.parked: set[asyncio.Task[Any]] = set()
        self.late: list[str] = []  # parked cases that broke the oracle when they completed

    # ----- the broker ------------------------------------------------------------------------------------
    def _prepare(self, server: KafkaServer) -> None:
        self.conn = self._new_connection()
        assert server.log_manager is not None
        server.log_manager.create_topic(FUZZ_TOPIC, 2)
        server.log_manager.create_topic(DOOMED_TOPIC, 1)
        for i in range(6):
            server.log_manager.produce(FUZZ_TOPIC, b"value-%d" % i, key=b"k", partition=i % 2)
        for frame in _setup_frames():
            outcome = self._run(frame)
            if outcome == "parked":  # creating an internal topic on a busy machine: let it finish
                self.settle()
                outcome = "answered" if not self.parked else outcome
            if outcome != "answered":
                raise UnexpectedOutcome(f"setting up the fuzz broker: {frame[:40]!r} {outcome}")

    def _stop(self) -> None:
        for task in self.parked:
            task.cancel()
        if self.parked:
            self.loop.run_until_complete(asyncio.wait(self.parked))
        self.parked.clear()
        super()._stop()

    def _new_connection(self) -> Connection:
        self._index += 1
        return _connection(self._index)

    # ----- one case --------------------------------------------------------------------------------------
    def _run(self, frame: bytes) -> str:
        """Run one frame through the router; its outcome, "parked" if it is still waiting."""
        task = self.loop.create_task(self.router(self.conn, memoryview(frame)))
        started = time.monotonic()
        self.loop.run_until_complete(asyncio.wait({task}, timeout=PARK_SECONDS))
        elapsed = time.monotonic() - started
        if elapsed > HANG_SECONDS:
            raise UnexpectedOutcome(f"one request held the event loop {elapsed:.1f} s: {frame[:96]!r}")
        if not task.done():
            self.parked.add(task)
            task.add_done_callback(lambda t: self._parked_done(frame, t))
            self.conn = self._new_connection()  # the parked request holds its connection, as a socket's would
            return "parked"
        return self._outcome(frame, task)

    def _outcome(self, frame: bytes, task: asyncio.Task[Any]) -> str:
        error = task.exception()
        if isinstance(error, InvalidRequestError):
            outcome = "closed"
        elif error is not None:
            raise UnexpectedOutcome(f"{type(error).__name__}: {error} on {frame[:96]!r}") from error
        else:
            outcome = judge(frame, task.result())
        if outcome == "closed":
            self.conn = self._new_connection()
        return outcome

    def _parked_done(self, frame: bytes, task: asyncio.Task[Any]) -> None:
        self.parked.discard(task)
        if task.cancelled():
            return
        try:
            self._outcome(frame, task)
        except UnexpectedOutcome as e:
            self.late.append(f"(a parked case) {e}")

    def _still_serving(self, full: bool = True) -> None:
        """A valid Metadata (and with ``full`` an ApiVersions) request must be answered after every case."""
        for frame in _follow_ups()[: 2 if full else 1]:
            outcome = self._run(frame)
            if outcome != "answered":
                name = APIS[struct.unpack_from(">h", frame)[0]].name
                raise UnexpectedOutcome(f"after the case, a valid {name} request was {outcome}")

    def check(self, frame: bytes) -> str:
        """Run one case through the oracle; its outcome, or UnexpectedOutcome."""
        if (self.cases and self.cases % self.reset_every == 0) or len(self.parked) > MAX_PARKED:
            self.reset()
        self.cases += 1
        conn = self.conn
        conn.request_metric = None  # the router sets it once the request has decoded

        def run() -> str:
            outcome = self._run(frame)
            # A request refused before any handler ran changed nothing but its connection: Metadata then shows
            # the router still serves; after a handler, ApiVersions too.
            self._still_serving(full=conn.request_metric is not None)
            self._raise_late_failures(frame)
            return outcome

        return self._case(run)

    def settle(self, timeout: float = 60.0) -> None:
        """Run the loop until every parked case has completed (or ``timeout`` passed); raise what they broke."""
        if self.parked:
            self.loop.run_until_complete(asyncio.wait(set(self.parked), timeout=timeout))
        self._raise_late_failures(b"")

    def _raise_late_failures(self, frame: bytes) -> None:
        if self.late:
            failures, self.late = self.late, []
            raise UnexpectedOutcome("; ".join(failures))
        if self.errors.records:
            records, self.errors.records = self.errors.records, []
            text = "; ".join(f"{r.name}: {r.getMessage()}" for r in records[:3])
            raise UnexpectedOutcome(f"the broker logged an error: {text} on {frame[:96]!r}")


# ------------------------------------------------------------------------------------------------ inputs

_MODES = 4


def frame_for(control: bytes) -> bytes:
    """Any bytes -> one request frame. The first byte picks how the rest is used:

    0: the rest is the frame itself (libFuzzer mutates real frames; the corpus holds every valid request);
    1: a valid request of one API/version (next 2 bytes), fields mutated by the rest (structure-aware);
    2: as 1, then bytes flipped, cut, overwritten or spliced by ``fuzz.mutate``;
    3: a valid header of one API/version (next 2 bytes) and the rest as the body.
    """
    if not control:
        return b""
    mode, choices = control[0] % _MODES, Choices(control[1:])
    if mode == 0:
        return control[1:]
    seeds = seed_requests()
    key, version, frame = seeds[choices.below(len(seeds))]
    spec = APIS[key]
    if mode == 3:
        return request_header(key, version, 1 + choices.below(65536)) + choices.rest()
    mutated = mutate_message(seed_message(key, version), version, choices)
    encoded = try_encode(lambda: encode_frame(spec, version, mutated, 2000 + key))
    frame = encoded if encoded is not None else frame
    if mode == 2:
        frame = mutate(frame, choices.rest() or b"\0")
    return frame


def corpus() -> dict[str, bytes]:
    """Starting inputs for the atheris harness: every valid request as a raw frame (mode 0), and one input of
    each other mode per API/version (file name -> data)."""
    out = {}
    for i, (key, version, frame) in enumerate(seed_requests()):
        name = f"{APIS[key].name}-v{version}"
        out[f"{name}-raw"] = b"\0" + frame
        out[f"{name}-fields"] = bytes([1]) + i.to_bytes(2, "big") + bytes([i % 7, i % 5, 3, 1, 4])
    return out


# ------------------------------------------------------------------------------------------------ runners


@contextlib.contextmanager
def fuzzer(reset_every: int = 2000) -> Iterator[ProtocolFuzzer]:
    with ProtocolFuzzer(reset_every) as f:
        yield f


def check_one(frame: bytes) -> str:
    """One frame on a fresh broker: how a crash input is reproduced."""
    with fuzzer() as f:
        return f.check(frame)


def run_cases(cases: int, seed: int = 0, reset_every: int = 2000) -> tuple[dict[str, int], list[str]]:
    """``cases`` seeded inputs (every seed request first, then random controls): (outcome counts, failures)."""
    import random

    rng = random.Random(f"protocol-{seed}")
    failures: list[str] = []
    inputs = [frame for _, _, frame in seed_requests()]
    with fuzzer(reset_every) as f:
        for n in range(cases):
            frame = inputs[n] if n < len(inputs) else frame_for(rng.randbytes(rng.randrange(1, 200)))
            try:
                f.check(frame)
            except UnexpectedOutcome as e:
                failures.append(str(e))
        return dict(f.outcomes), failures


def atheris_entry(reset_every: int = 2000, keep_going: Path | None = None) -> Callable[[bytes], None]:
    """The function to hand to ``atheris.Setup``: raw bytes through ``frame_for`` and the oracle.

    With ``keep_going`` (a directory), a case that breaks the oracle does not stop the run: its input is saved
    there as ``failure-<sha1>`` with the report beside it (``.txt``), once per distinct report, and the run goes
    on, so that one long run finds every bug instead of the first."""
    state = ProtocolFuzzer(reset_every).__enter__()
    seen: set[str] = set()

    def one_input(data: bytes) -> None:
        if keep_going is None:
            state.check(frame_for(data))
            return
        try:
            state.check(frame_for(data))
        except UnexpectedOutcome as e:
            _save_failure(keep_going, data, str(e), seen)

    one_input.fuzzer = state  # type: ignore[attr-defined]  # libFuzzer exits without unwinding; a test closes it
    return one_input


def _save_failure(directory: Path, data: bytes, report: str, seen: set[str]) -> None:
    import hashlib
    import re

    kind = re.sub(r"b'.*", "", re.sub(r"0x[0-9a-f]+|\d+", "N", report))[:200]  # the report without its input
    if kind in seen:
        return
    seen.add(kind)
    directory.mkdir(parents=True, exist_ok=True)
    name = "failure-" + hashlib.sha1(data).hexdigest()
    (directory / name).write_bytes(data)
    (directory / f"{name}.txt").write_text(report + "\n")
