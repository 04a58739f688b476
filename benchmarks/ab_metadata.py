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
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> int:
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
    args = parser.parse_args(argv)
    scratch = common.Scratch("ab-metadata")
    result: dict[str, Any] = {"A": args.old, "B": args.new or "work tree", "rounds": args.rounds, "sizes": {}}
    try:
        a_tree = _export(args.old, scratch.root, "A-")
        b_tree = _export(args.new, scratch.root, "B-") if args.new else common.REPO
        for partitions in (int(x) for x in args.partitions.split(",")):
            log_dir = scratch.root / f"logs-{partitions}"
            expected = make_log_dir(b_tree, log_dir, partitions, args.per_topic)
            figures: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
            for i in range(args.rounds):
                for side, tree in (("A", a_tree), ("B", b_tree)) if i % 2 == 0 else (("B", b_tree), ("A", a_tree)):
                    figures[side].append(measure(tree, log_dir, expected, args))
                    print(
                        f"{partitions} round {i} {side}: "
                        + ", ".join(f"{k} {v:.1f}" for k, v in figures[side][-1].items())
                    )
            rows = {}
            print(f"\n{partitions} partitions: A = {args.old}, B = {result['B']}; medians of {args.rounds} rounds")
            for key in figures["A"][0]:
                a = statistics.median(r[key] for r in figures["A"])
                b = statistics.median(r[key] for r in figures["B"])
                rows[key] = {"A": a, "B": b, "B/A": b / a if a else float("nan")}
                print(f"  {key:28s} A {a:9.1f}  B {b:9.1f}  B/A {rows[key]['B/A']:.3f}")
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
