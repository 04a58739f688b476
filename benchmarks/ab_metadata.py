"""A/B of all-topics Metadata answers of ``kafkalog serve`` at thousands of partitions, two source trees in one run.

Run: ``python -m benchmarks.ab_metadata OLD [NEW] [--partitions 2000,10000] [--rounds N] [--repeats R]
[--storm C] [--storms S]`` (OLD and NEW are commits, exported with ``git archive``; NEW defaults to the work tree).

For each partition count, a log dir is made once (topics of ``--per-topic`` partitions created by confluent-kafka's
AdminClient against the NEW tree's broker, which is then stopped cleanly). Each round then starts a broker from
one tree on that log dir (the trees alternate A, B / B, A, so drift in the shared machine's load falls on both),
and measures, on the otherwise idle broker:

- ``one conn``: ``--repeats`` all-topics Metadata v12 requests one after another on one connection (the time from
  the send to the whole answer read), p50 and max;
- ``storm``: ``--storm`` connections (each first answered ApiVersions and the Metadata of one topic) send an
  all-topics Metadata request at once; the time until the last answer is in, ``--storms`` times, p50 and max.

Every answer is checked: the first of each round is decoded in full (every partition of every topic, this broker
its leader), and every answer of a round must have the first one's size. The figures are wall-clock times of a
shared 2-core machine: read the ratios B/A of the medians, not the absolute values.

``--cluster-view``: the ZooKeeper-mode handler instead, in a child process of each tree, on a synthetic view of
3 live brokers and the partitions (``--per-topic`` per topic, replication factor 3, every state led by its first
replica) set on the tree's own ClusterNode as its reconcile pass sets a view read from ZooKeeper. Per round,
``--repeats`` times each, the handler's time for (as Metadata v12):

- ``all, same view``: all topics, the view not set again;
- ``all, re-read unchanged``: all topics right after an equal view (new objects) was set, as after each reconcile
  pass that found nothing changed; ``set view`` is the time of setting it (the stamp's comparison);
- ``all, one epoch moved``: all topics right after a view with one partition's leader epoch moved was set;
- ``one topic``: one topic named.

The answers of A and B must be byte for byte the same (their digests are compared), and are decoded once in full.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import common
from .ab_broker import _export
from .bench_scale import _api_versions, _decode, _metadata, _receive, check_metadata, create_topics, open_connections


def make_log_dir(tree: Path, log_dir: Path, partitions: int, per_topic: int) -> dict[str, int]:
    """``partitions // per_topic`` topics of ``per_topic`` partitions in ``log_dir`` (a broker of ``tree``,
    stopped cleanly after); the topics and their partition counts."""
    import tests.brokertools as brokertools

    brokertools.REPO = tree
    names = [f"meta-{i:04d}" for i in range(partitions // per_topic)]
    server = brokertools.BrokerProcess(log_dir, {"num.partitions": "1"}).start(timeout=600)
    try:
        create_topics(server.bootstrap, names, per_topic, max(1, 2000 // per_topic))
    finally:
        server.stop(timeout=600)
    return {name: per_topic for name in names}


def _one_connection(host: str, port: int, expected: dict[str, int], repeats: int) -> list[float]:
    request = _metadata(None)
    times, sizes, first = [], set(), b""
    with socket.create_connection((host, port), timeout=600) as sock:
        for _ in range(repeats):
            t0 = time.perf_counter()
            sock.sendall(request)
            body = _receive(sock)
            times.append(time.perf_counter() - t0)
            sizes.add(len(body))
            first = first or body
    check_metadata(_decode(3, 12, first), expected)
    if len(sizes) != 1:
        raise AssertionError(f"all-topics Metadata answers of different sizes: {sorted(sizes)}")
    return times


def _storms(conns: list[socket.socket], storms: int) -> list[float]:
    request = _metadata(None)
    times, sizes = [], set()
    for _ in range(storms):
        t0 = time.perf_counter()
        for sock in conns:
            sock.sendall(request)
        for sock in conns:
            sizes.add(len(_receive(sock)))
        times.append(time.perf_counter() - t0)
    if len(sizes) != 1:
        raise AssertionError(f"all-topics Metadata answers of different sizes: {sorted(sizes)}")
    return times


def measure(tree: Path, log_dir: Path, expected: dict[str, int], args: argparse.Namespace) -> dict[str, float]:
    """One round: a broker of ``tree`` on ``log_dir``; the one-connection and storm figures in ms."""
    import tests.brokertools as brokertools

    brokertools.REPO = tree
    names = sorted(expected)
    server = brokertools.BrokerProcess(log_dir, {"num.partitions": "1"}).start(timeout=600)
    try:
        host, port = server.host, server.port
        _one_connection(host, port, expected, 2)  # warm-up: the broker's first answers (imports, caches)
        single = _one_connection(host, port, expected, args.repeats)
        conns = open_connections(host, port, args.storm, lambda i: names[i % len(names)])
        try:
            storm = _storms(conns, args.storms)
            for sock in conns:  # still answering after the storms
                sock.sendall(_api_versions())
                _receive(sock)
        finally:
            for sock in conns:
                sock.close()
    finally:
        server.stop(timeout=600)
    return {
        "one conn p50 ms": statistics.median(single) * 1e3,
        "one conn max ms": max(single) * 1e3,
        f"storm of {args.storm} p50 ms": statistics.median(storm) * 1e3,
        f"storm of {args.storm} max ms": max(storm) * 1e3,
    }


# ----- --cluster-view: the ZooKeeper-mode handler over a synthetic view, in a child process per tree -----------
def cluster_view_figures(partitions: int, per_topic: int, repeats: int) -> dict[str, Any]:
    """In this process's kafkalog (the tree under test): the handler's times (ms, medians of ``repeats``) and the
    answers' digests over a view of ``partitions`` partitions (see the module's docstring)."""
    import asyncio
    import dataclasses
    import hashlib
    import types

    from kafka.protocol.metadata import MetadataRequest

    from kafkalog.broker.cluster import zkdata as zk
    from kafkalog.broker.cluster.node import ClusterNode
    from kafkalog.broker.cluster.state import ClusterView
    from kafkalog.broker.handlers import metadata as handler
    from kafkalog.broker.protocol import MetadataResponse
    from kafkalog.broker.security.context import CURRENT
    from kafkalog.manager import TopicPartition

    names = [f"meta-{i:04d}" for i in range(partitions // per_topic)]
    ids = {name: f"{i:022d}" for i, name in enumerate(names)}

    def view(moved: int = 0) -> ClusterView:
        """A fresh view (every object new, as a ZooKeeper read makes them); partition 0 of the first topic at
        leader epoch ``moved``."""
        v = ClusterView()
        v.brokers = {b: zk.BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)}
        for t, name in enumerate(names):
            replicas = {p: [1 + (t + p + k) % 3 for k in range(3)] for p in range(per_topic)}
            v.topics[name] = zk.TopicAssignment(replicas, ids[name])
            for p, r in replicas.items():
                epoch = moved if (t, p) == (0, 0) else 0
                v.states[TopicPartition(name, p)] = zk.LeaderAndIsr(r[0], epoch, list(r), 1, zk_version=epoch)
        v.controller_id = 1
        return v

    node = object.__new__(ClusterNode)  # its view and readiness only: no server, no ZooKeeper
    node.ready = asyncio.Event()
    node.ready.set()
    node.view = view()
    broker = types.SimpleNamespace(
        cluster=node,
        node_id=1,
        cluster_id="cid",
        config=types.SimpleNamespace(auto_create_topics_enable=False),
        advertised_endpoint=lambda: ("127.0.0.1", 9001),
    )
    header = types.SimpleNamespace(api_version=12)
    every = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    one = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=names[-1])], allow_auto_topic_creation=False
    )
    base = [view() for _ in range(repeats)]
    unchanged = [view() for _ in range(repeats)]
    moved = [view(moved=1 + i) for i in range(repeats)]

    async def answer(request) -> tuple[float, bytes]:
        t0 = time.perf_counter()
        response = await handler.handle(broker, header, request)
        body = b"".join(bytes(part) for part in response.parts)
        return time.perf_counter() - t0, body

    async def run() -> dict[str, Any]:
        CURRENT.set(dataclasses.replace(CURRENT.get(), listener="PLAINTEXT"))
        for _ in range(2):  # warm-up
            await answer(every)
        times: dict[str, list[float]] = {k: [] for k in ("all, same view", "all, re-read unchanged", "set view")}
        times.update({"all, one epoch moved": [], "one topic": []})
        digests: dict[str, set[str]] = {"unchanged": set(), "moved": set()}
        first = b""
        for i in range(repeats):
            node.view = base[i]  # back from the last iteration's moved epoch: a change
            await answer(every)
            elapsed, body = await answer(every)
            times["all, same view"].append(elapsed)
            digests["unchanged"].add(hashlib.sha256(body).hexdigest())
            first = first or body
            t0 = time.perf_counter()
            node.view = unchanged[i]
            times["set view"].append(time.perf_counter() - t0)
            elapsed, body = await answer(every)
            times["all, re-read unchanged"].append(elapsed)
            digests["unchanged"].add(hashlib.sha256(body).hexdigest())
            node.view = moved[i]
            elapsed, body = await answer(every)
            times["all, one epoch moved"].append(elapsed)
            if i == 0:
                digests["moved"].add(hashlib.sha256(body).hexdigest())
            times["one topic"].append((await answer(one))[0])
        decoded = MetadataResponse.decode(first, version=12)
        if [(t.name, len(t.partitions)) for t in decoded.topics] != [(n, per_topic) for n in names]:
            raise AssertionError("the all-topics answer does not list every topic with every partition")
        if len(digests["unchanged"]) != 1:
            raise AssertionError("answers of one unchanged view differ")
        figures: dict[str, Any] = {f"{k} ms": statistics.median(v) * 1e3 for k, v in times.items()}
        figures["digests"] = {k: sorted(v)[0] for k, v in digests.items()}
        return figures

    return asyncio.run(run())


def measure_cluster_view(tree: Path, partitions: int, args: argparse.Namespace) -> dict[str, Any]:
    """One round of ``--cluster-view``: a child process on ``tree``'s kafkalog; its figures and digests."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "src"), str(common.REPO)]))
    child = json.dumps({"partitions": partitions, "per_topic": args.per_topic, "repeats": args.repeats})
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.ab_metadata", "--cluster-view-child", child],
        cwd=common.REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the cluster-view child of {tree} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--cluster-view-child"]:
        spec = json.loads(argv[1])
        print(json.dumps(cluster_view_figures(spec["partitions"], spec["per_topic"], spec["repeats"])))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab_metadata", description=__doc__.splitlines()[0])
    parser.add_argument("old", help="commit A")
    parser.add_argument("new", nargs="?", help="commit B (default: the work tree)")
    parser.add_argument("--partitions", default="2000,10000", help="comma-separated partition counts")
    parser.add_argument("--per-topic", type=int, default=100, help="partitions per topic")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20, help="all-topics requests on one connection per round")
    parser.add_argument("--storm", type=int, default=100, help="connections asking at once")
    parser.add_argument("--storms", type=int, default=3, help="storms per round")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--cluster-view", action="store_true", help="the ZooKeeper-mode handler on a synthetic view (in-process)"
    )
    args = parser.parse_args(argv)
    scratch = common.Scratch("ab-metadata")
    result: dict[str, Any] = {"A": args.old, "B": args.new or "work tree", "rounds": args.rounds, "sizes": {}}
    fmt = ".3f" if args.cluster_view else ".1f"  # the in-process handler's times are fractions of a millisecond
    try:
        a_tree = _export(args.old, scratch.root, "A-")
        b_tree = _export(args.new, scratch.root, "B-") if args.new else common.REPO
        for partitions in (int(x) for x in args.partitions.split(",")):
            log_dir = scratch.root / f"logs-{partitions}"
            if args.cluster_view:
                result["shape"] = "cluster view"
                digests: dict[str, set[str]] = {}
            else:
                expected = make_log_dir(b_tree, log_dir, partitions, args.per_topic)
            figures: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
            for i in range(args.rounds):
                for side, tree in (("A", a_tree), ("B", b_tree)) if i % 2 == 0 else (("B", b_tree), ("A", a_tree)):
                    if args.cluster_view:
                        measured = measure_cluster_view(tree, partitions, args)
                        for kind, digest in measured.pop("digests").items():
                            digests.setdefault(kind, set()).add(digest)
                        figures[side].append(measured)
                    else:
                        figures[side].append(measure(tree, log_dir, expected, args))
                    print(
                        f"{partitions} round {i} {side}: "
                        + ", ".join(f"{k} {v:{fmt}}" for k, v in figures[side][-1].items())
                    )
            if args.cluster_view and any(len(d) != 1 for d in digests.values()):
                raise AssertionError(f"A's and B's answers differ: {digests}")
            rows = {}
            print(f"\n{partitions} partitions: A = {args.old}, B = {result['B']}; medians of {args.rounds} rounds")
            for key in figures["A"][0]:
                a = statistics.median(r[key] for r in figures["A"])
                b = statistics.median(r[key] for r in figures["B"])
                rows[key] = {"A": a, "B": b, "B/A": b / a if a else float("nan")}
                print(f"  {key:28s} A {a:9{fmt}}  B {b:9{fmt}}  B/A {rows[key]['B/A']:.3f}")
            result["sizes"][str(partitions)] = {"figures": rows, "each_round": figures}
            subprocess.run(["rm", "-rf", str(log_dir)], check=False)
        result["platform"] = common.platform_info()
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
