"""The broker's event loop kept free for requests (issue 23's latency work): what must not stop it.

No timing assertion here (the machine is shared): each test checks the mechanism, e.g. that the heap is frozen
after startup, or that another client is answered while a slow topic creation is still running.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import weakref

from kafkalog.broker import server as server_module
from kafkalog.broker.config import KafkaConfig
from kafkalog.broker.server import KafkaServer, settle_heap


def _config(tmp_path) -> KafkaConfig:
    return KafkaConfig.load(None, ["listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={tmp_path / 'logs'}"])


class _Node:
    """An object that can be part of a reference cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settle_heap_freezes_what_is_alive_and_still_collects_later_cycles():
    before = _Node()
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle made after the freeze: only the collector can free it
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
        assert gc.get_freeze_count() == frozen  # a later collection does not thaw anything
        assert before.other is None
    finally:
        gc.unfreeze()


def test_serve_forever_settles_the_heap_once_started(tmp_path, monkeypatch):
    calls: list[bool] = []

    def settle() -> None:
        calls.append(server.socket_server is not None)  # after startup: the listeners are up
        # then stop, through serve_forever's own signal handler (installed before the loop runs this)
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(server_module, "settle_heap", settle)
    server = KafkaServer(_config(tmp_path))
    asyncio.run(asyncio.wait_for(server.serve_forever(), 120))
    assert calls == [True]
    assert server.stopping
