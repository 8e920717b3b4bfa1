"""Real Redis topologies on loopback for the tests: a Redis Cluster and a Sentinel group.

``ManagedCluster``: six ``redis-server --cluster-enabled yes`` processes (three masters,
three replicas) joined by ``redis-cli --cluster create … --cluster-replicas 1``, each with
AOF ``appendfsync always`` in a directory of its own, so a killed node restarts with its
data and its ``nodes.conf``. ``ManagedSentinel``: a master, one replica and three
sentinels (``redis-server sentinel.conf --sentinel``: Debian's ``redis-sentinel`` is the
same binary) watching the master ``opsloop`` with quorum 2 and short timeouts, so a
failover takes seconds. Every wait is bounded; ``stop()`` kills every process it started
(call it from a finalizer, so a failing test leaves no orphans). Nodes are driven over
plain sockets (RESP), so this module needs no Redis client of its own.
"""

from __future__ import annotations

import binascii
import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.emulator.redis_server import INSTALL_HINT, ManagedRedis, free_port
from bot.errors import ConfigError, StoreError

CLUSTER_NODES = 6
CLUSTER_SLOTS = 16384
CLUSTER_NODE_TIMEOUT_MS = 2000  # how long a master may be silent before its replica takes over
CLUSTER_READY_TIMEOUT_S = 30.0
FAILOVER_TIMEOUT_S = 30.0
SENTINELS = 3
SENTINEL_MASTER = "opsloop"
SENTINEL_QUORUM = 2
SENTINEL_DOWN_AFTER_MS = 1000
SENTINEL_FAILOVER_TIMEOUT_MS = 3000
SENTINEL_READY_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 2.0
POLL_S = 0.05


# -- a tiny RESP client (admin commands only) -------------------------------------------------
Reply = str | int | list["Reply"] | None


def _encode(args: Sequence[str]) -> bytes:
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        raw = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""

    def _line(self) -> bytes:
        while b"\r\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self._buf) < n + 2:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n + 2 :]
        return data

    def reply(self) -> Reply:
        line = self._line()
        kind, rest = line[:1], line[1:].decode()
        if kind == b"+":
            return rest
        if kind == b"-":
            raise StoreError(rest)
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise StoreError(f"unexpected reply {line[:40]!r}")


def command(port: int, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> Reply:
    """One command to ``127.0.0.1:port``; ``StoreError`` for an error reply, ``OSError``
    when nothing answers within ``timeout``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(_encode(args))
        return _Reader(sock).reply()


def _info(port: int, section: str) -> dict[str, str]:
    raw = command(port, "INFO", section)
    text = raw if isinstance(raw, str) else ""
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k: v.strip() for k, v in pairs}


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    """Poll ``check`` (exceptions count as not yet) until it holds, or ``StoreError``."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, StoreError) as exc:
            last = exc
        time.sleep(POLL_S)
    raise StoreError(
        f"timed out after {timeout:g}s waiting for {what}" + (f" ({last})" if last else "")
    )


def key_slot(key: str) -> int:
    """Redis Cluster's slot of ``key`` (CRC16/XMODEM of its hash tag, mod 16384)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key.encode(), 0) % CLUSTER_SLOTS


# -- a server process with extra arguments --------------------------------------------------
class _Node(ManagedRedis):
    """A ``ManagedRedis`` (AOF ``appendfsync always``, its own dir) with extra arguments."""

    def __init__(self, data_dir: Path, extra: Sequence[str], *, port: int | None = None) -> None:
        super().__init__(data_dir, port=port)
        self.extra = list(extra)

    loglevel = "notice"  # role changes and failovers, in the node's redis.log

    def start(self) -> _Node:
        self._launch([*self.server_args(), *self.extra])
        return self

    def _launch(self, args: list[str]) -> None:
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait(f"redis-server on port {self.port}", self._answers, 10.0)
        except StoreError:
            err = b""
            if self._proc is not None and self._proc.poll() is not None and self._proc.stderr:
                err = self._proc.stderr.read()
            self.stop()
            raise StoreError(
                f"redis-server on port {self.port} did not start: {err.decode()[:300]}"
            ) from None

    def _answers(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise StoreError(f"exited with {self._proc.returncode}")
        try:
            return command(self.port, "PING", timeout=0.5) == "PONG"
        except StoreError:  # LOADING: up, not serving yet
            return False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


# -- Redis Cluster ------------------------------------------------------------------------
class ClusterNode(_Node):
    """One node of a ``ManagedCluster``: its server process, named in the cluster."""

    def __init__(self, name: str, data_dir: Path, extra: Sequence[str], *, port: int) -> None:
        super().__init__(data_dir, extra, port=port)
        self.name = name


@dataclass
class ManagedCluster:
    """``start()``, ``url`` (a seed node), ``nodes``, ``master_of(key)``, ``masters()``,
    ``replica_of(node)``, ``kill(node)``, ``failover(replica_of=node)``, ``restart(node)``,
    ``stop()``."""

    data_dir: Path
    size: int = CLUSTER_NODES
    node_timeout_ms: int = CLUSTER_NODE_TIMEOUT_MS
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        seed = next((n for n in self.nodes if n.running), self.nodes[0])
        return f"redis://{seed.address}/0"

    def start(self) -> ManagedCluster:
        if shutil.which("redis-cli") is None:
            raise ConfigError(
                "redis-cli not found: install it (Debian: apt-get install redis-tools)"
            )
        try:
            for i in range(self.size):
                bus = _free_port_pair()
                node_dir = Path(self.data_dir) / f"node{i}"
                extra = [
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(node_dir / "nodes.conf"),
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-port", str(bus[1]),
                    "--cluster-require-full-coverage", "yes",
                    # A replica a test just synced may always take over (the default
                    # refuses one disconnected longer than 10 node timeouts).
                    "--cluster-replica-validity-factor", "0",
                    "--repl-diskless-sync-delay", "0",
                ]  # fmt: skip
                node = ClusterNode(f"node{i}", node_dir, extra, port=bus[0])
                self.nodes.append(node)
                node.start()
            subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *(n.address for n in self.nodes),
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],  # fmt: skip
                capture_output=True,
                timeout=CLUSTER_READY_TIMEOUT_S,
                check=True,
            )
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = CLUSTER_READY_TIMEOUT_S) -> None:
        """Until every running node says ``cluster_state:ok``, agrees that every slot is
        served by a live master, and each master has its replica attached."""
        _wait("the cluster to be ready", self._ready, timeout)

    def _ready(self) -> bool:
        running = [n for n in self.nodes if n.running]
        for node in running:
            info = _cluster_info(node.port)
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(
                CLUSTER_SLOTS
            ):
                return False
        owners = self._slot_owners(running[0].port)
        if len(owners) != CLUSTER_SLOTS:
            return False
        live = {n.port for n in running}
        if not set(owners.values()) <= live:
            return False
        truth: dict[int, int | None] = {}  # port → the port of its master (None: a master)
        for node in running:
            replication = _info(node.port, "replication")
            if replication.get("role") == "slave":
                if replication.get("master_link_status") != "up":
                    return False
                truth[node.port] = int(replication["master_port"])
            else:
                truth[node.port] = None
        if {p for p, of in truth.items() if of is None} != set(owners.values()):
            return False  # a master with no slots: a restarted node not yet a replica
        for node in running:  # every node sees the same owners and roles (no stale view)
            if self._slot_owners(node.port) != owners:
                return False
            if {p: r for p, r in self._roles(node.port).items() if p in live} != truth:
                return False
        return True

    @staticmethod
    def _roles(port: int) -> dict[int, int | None]:
        """port → the port of its master (None: a master), as ``port``'s node sees it."""
        ids = _nodes(port)
        by_id = {i: p for i, (p, _, _) in ids.items()}
        return {p: by_id.get(of) if "slave" in flags else None for p, flags, of in ids.values()}

    @staticmethod
    def _slot_owners(port: int) -> dict[int, int]:
        """slot → port of the master serving it, as ``port``'s node sees it."""
        raw = command(port, "CLUSTER", "SLOTS")
        owners: dict[int, int] = {}
        for entry in raw if isinstance(raw, list) else []:
            assert isinstance(entry, list)
            first, last, master = entry[0], entry[1], entry[2]
            assert isinstance(first, int) and isinstance(last, int) and isinstance(master, list)
            master_port = master[1]
            assert isinstance(master_port, int)
            for slot in range(first, last + 1):
                owners[slot] = master_port
        return owners

    def node_at(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes if n.port == port)

    def _view(self) -> ClusterNode:
        return next(n for n in self.nodes if n.running)

    def master_of(self, key: str) -> ClusterNode:
        """The node serving ``key``'s slot now."""
        slot = key_slot(key)
        return self.node_at(self._slot_owners(self._view().port)[slot])

    def masters(self) -> list[ClusterNode]:
        return [self.node_at(p) for p in sorted(set(self._slot_owners(self._view().port).values()))]

    def _ids(self) -> dict[str, tuple[int, str, str]]:
        return _nodes(self._view().port)

    def replica_of(self, node: ClusterNode) -> ClusterNode:
        """A running replica of ``node`` (which must be a master)."""
        ids = self._ids()
        master_id = next(i for i, (port, _, _) in ids.items() if port == node.port)
        for port, flags, of in ids.values():
            if of == master_id and "slave" in flags and "fail" not in flags:
                candidate = self.node_at(port)
                if candidate.running:
                    return candidate
        raise StoreError(f"{node.name} has no running replica")

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL: the node dies as in a crash (its replica takes over after the node
        timeout; ``wait_ready()`` waits for that)."""
        node.kill()

    def failover(
        self, *, replica_of: ClusterNode, timeout: float = FAILOVER_TIMEOUT_S
    ) -> ClusterNode:
        """``CLUSTER FAILOVER`` on a replica of ``replica_of``; returns the promoted node
        once it serves the slots and every node agrees."""
        replica = self.replica_of(replica_of)
        command(replica.port, "CLUSTER", "FAILOVER")
        _wait(
            f"{replica.name} to be promoted",
            lambda: _info(replica.port, "replication").get("role") == "master",
            timeout,
        )
        self.wait_ready(timeout)
        return replica

    def restart(self, node: ClusterNode) -> None:
        """Start a killed or stopped node again on its port, data and ``nodes.conf``
        (a former master comes back as a replica of the node that took over)."""
        if node.running:
            node.kill()
        node.start()
        self.wait_ready()

    def stop(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.kill()


def _nodes(port: int) -> dict[str, tuple[int, str, str]]:
    """node id → (port, flags, master id) from ``port``'s CLUSTER NODES."""
    raw = command(port, "CLUSTER", "NODES")
    out: dict[str, tuple[int, str, str]] = {}
    for line in str(raw).splitlines():
        parts = line.split()
        node_port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
        out[parts[0]] = (node_port, parts[2], parts[3])
    return out


def _cluster_info(port: int) -> dict[str, str]:
    raw = command(port, "CLUSTER", "INFO")
    pairs = (line.split(":", 1) for line in str(raw).splitlines() if ":" in line)
    return {k: v.strip() for k, v in pairs}


def _free_port_pair() -> tuple[int, int]:
    """Two distinct free loopback ports: a node's and its cluster bus's."""
    first = free_port()
    while True:
        second = free_port()
        if second != first:
            return first, second


# -- Sentinel ----------------------------------------------------------------------------
@dataclass
class ManagedSentinel:
    """``start()``, ``sentinels`` (``host:port,…``), ``master_name``, ``master`` (the node
    the sentinels report now), ``kill_master()``, ``failover()``, ``restart(node)``,
    ``stop()``."""

    data_dir: Path
    master_name: str = SENTINEL_MASTER
    down_after_ms: int = SENTINEL_DOWN_AFTER_MS
    failover_timeout_ms: int = SENTINEL_FAILOVER_TIMEOUT_MS
    servers: list[_Node] = field(default_factory=list)
    sentinel_nodes: list[_Node] = field(default_factory=list)

    @property
    def sentinels(self) -> str:
        return ",".join(s.address for s in self.sentinel_nodes)

    @property
    def url(self) -> str:
        """The URL a bot in sentinel mode takes (no host: the sentinels name the master)."""
        return "redis://"

    def start(self) -> ManagedSentinel:
        try:
            root = Path(self.data_dir)
            first = _Node(root / "redis0", ["--repl-diskless-sync-delay", "0"]).start()
            self.servers.append(first)
            replica = _Node(
                root / "redis1",
                ["--replicaof", "127.0.0.1", str(first.port), "--repl-diskless-sync-delay", "0"],
            ).start()
            self.servers.append(replica)
            _wait(
                "the replica to sync",
                lambda: self._in_sync(first, replica),
                SENTINEL_READY_TIMEOUT_S,
            )
            for i in range(SENTINELS):
                node_dir = root / f"sentinel{i}"
                node_dir.mkdir(parents=True, exist_ok=True)
                conf = node_dir / "sentinel.conf"
                port = free_port()
                conf.write_text(self._sentinel_conf(port, node_dir, first.port))
                sentinel = _SentinelNode(node_dir, conf, port=port)
                self.sentinel_nodes.append(sentinel)
                sentinel.start()
            _wait(
                "the sentinels to know each other and the replica",
                self._sentinels_ready,
                SENTINEL_READY_TIMEOUT_S,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _sentinel_conf(self, port: int, node_dir: Path, master_port: int) -> str:
        name = self.master_name
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            "protected-mode no",
            f"dir {node_dir}",
            f"logfile {node_dir / 'sentinel.log'}",
            f"sentinel monitor {name} 127.0.0.1 {master_port} {SENTINEL_QUORUM}",
            f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
            f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 1",
        ]
        return "\n".join(lines) + "\n"

    def wait_ready(self, timeout: float = SENTINEL_READY_TIMEOUT_S) -> None:
        """Until every sentinel reports the same master, knows the others and a live
        replica, and every running replica is in sync with that master."""
        _wait("the sentinel group to settle", self._settled, timeout)

    def _settled(self) -> bool:
        if not self._sentinels_ready():
            return False
        master = self.master
        replicas = [s for s in self.servers if s is not master and s.running]
        return bool(replicas) and all(self._in_sync(master, r) for r in replicas)

    @staticmethod
    def _in_sync(master: _Node, replica: _Node) -> bool:
        info = _info(replica.port, "replication")
        return (
            info.get("master_link_status") == "up"
            and info.get("master_port") == str(master.port)
            and _info(master.port, "replication").get("connected_slaves") == "1"
        )

    def _sentinels_ready(self) -> bool:
        master = self.master
        for sentinel in self.sentinel_nodes:
            others = command(sentinel.port, "SENTINEL", "SENTINELS", self.master_name)
            replicas = command(sentinel.port, "SENTINEL", "REPLICAS", self.master_name)
            if not isinstance(others, list) or len(others) != SENTINELS - 1:
                return False
            if not isinstance(replicas, list) or not any(
                "s_down" not in _fields(r).get("flags", "")
                and "disconnected" not in _fields(r).get("flags", "")
                for r in replicas
            ):
                return False
            if self._reported(sentinel) != master.port:
                return False
        return True

    def _reported(self, sentinel: _Node) -> int:
        raw = command(sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
        assert isinstance(raw, list) and isinstance(raw[1], str)
        return int(raw[1])

    @property
    def master(self) -> _Node:
        """The server the (first live) sentinel reports as master now."""
        sentinel = next(s for s in self.sentinel_nodes if s.running)
        port = self._reported(sentinel)
        return next(s for s in self.servers if s.port == port)

    def replica(self) -> _Node:
        master = self.master
        return next(s for s in self.servers if s is not master)

    def kill_master(self, *, timeout: float = FAILOVER_TIMEOUT_S) -> _Node:
        """SIGKILL the master; returns the new master once every sentinel reports it and
        it takes writes."""
        old = self.master
        old.kill()
        return self._wait_new_master(old, timeout)

    def failover(self, *, timeout: float = FAILOVER_TIMEOUT_S) -> _Node:
        """``SENTINEL FAILOVER``: the replica is promoted; returns it once every sentinel
        reports it and it takes writes (the old master is made its replica)."""
        old = self.master
        sentinel = next(s for s in self.sentinel_nodes if s.running)
        command(sentinel.port, "SENTINEL", "FAILOVER", self.master_name)
        return self._wait_new_master(old, timeout)

    def _wait_new_master(self, old: _Node, timeout: float) -> _Node:
        def moved() -> bool:
            ports = {self._reported(s) for s in self.sentinel_nodes if s.running}
            if ports == {old.port} or len(ports) != 1:
                return False
            (port,) = ports
            if _info(port, "replication").get("role") != "master":
                return False
            return command(port, "SET", "opsloop:sentinel:probe", "1") == "OK"

        _wait("a new master", moved, timeout)
        return self.master

    def restart(self, node: _Node) -> None:
        """Start a killed server again (the sentinels make it a replica of the master)."""
        if not node.running:
            node.start()

    def stop(self) -> None:
        for proc in [*self.sentinel_nodes, *self.servers]:
            with contextlib.suppress(Exception):
                proc.kill()


class _SentinelNode(_Node):
    def __init__(self, data_dir: Path, conf: Path, *, port: int) -> None:
        super().__init__(data_dir, [], port=port)
        self.conf = conf

    def start(self) -> _SentinelNode:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ConfigError(INSTALL_HINT)
        self._launch([binary, str(self.conf), "--sentinel"])
        return self


def _fields(raw: Reply) -> dict[str, str]:
    """A flat ``[k, v, k, v…]`` reply as a dict."""
    items = raw if isinstance(raw, list) else []
    return {str(k): str(v) for k, v in zip(items[::2], items[1::2], strict=False)}
