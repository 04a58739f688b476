"""A private ZooKeeper server (Debian's ``zookeeper`` package) on a free loopback port, with its own data dir.

Started as ``java -cp <the package's jars> org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg``: a
standalone server, the admin HTTP server off, nothing shared with a system ZooKeeper. ``stop`` kills it and
``start`` again reuses the same data dir and port (a ZooKeeper restart under load).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/zookeeper-jute.jar")
CONF_DIR = "/etc/zookeeper/conf"  # the package's log4j.properties


def available() -> str | None:
    """None when a ZooKeeper server can be started here, else why not."""
    if shutil.which("java") is None:
        return "java is not installed"
    if not Path(JARS[0]).exists():
        return "Debian's zookeeper package is not installed (apt-get install zookeeper; make test installs it)"
    try:
        import kazoo  # noqa: F401
    except ImportError:
        return "kazoo is not installed"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ZooKeeperServer:
    """One standalone ZooKeeper. ``connect`` is its host:port."""

    def __init__(self, directory: Path, port: int | None = None, tick_ms: int = 500) -> None:
        self.directory = Path(directory)
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
            f"maxSessionTimeout={60 * self.tick_ms}\n"
        )
        classpath = ":".join([*JARS, CONF_DIR, "/usr/share/java/slf4j-api.jar"])
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 (kept open by the child)
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.directory}/zookeeper.log")
            if self._ruok():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer on {self.connect} within {timeout} s")

    def _ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
