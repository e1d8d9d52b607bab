"""The ROS graph of a node test module: what conftest's ``ros_graph`` fixture gives.

One :class:`RosGraph` per test module, on the module's own domain id (``ros_domain(slot)``, the slot
being the module's name without ``test_``): the environment of its node processes, one
:class:`~vilib_ros.nodes.processes.GraphClient` (created on first use), the
:class:`~vilib_ros.nodes.processes.NodeProcess` es it started, and the waits the node tests need.
Every wait spins the client until its condition holds and fails, naming what it waited for and with
the nodes' last output, on its timeout or as soon as a node exits; none is a fixed sleep.
:meth:`RosGraph.reset` stops every node still running (SIGINT, then SIGTERM, then SIGKILL) and closes
the client: a module's fixture calls it when its scenario ends (also where it failed), the fixture
at the end of the module. rclpy is imported by the client alone.
"""
from __future__ import annotations

from pathlib import Path

from vilib_ros.nodes.processes import GraphClient, NodeProcess, node_argv, ros_env


class RosGraph:
    """A ROS domain of this machine (localhost discovery) for one test module."""

    def __init__(self, domain: int, log_dir: Path, name: str):
        self.domain = int(domain)
        self.log_dir = Path(log_dir)
        self.name = name
        #: the environment of a node process on this domain (:func:`vilib_ros.nodes.processes.ros_env`)
        self.env = ros_env(self.domain)
        #: every node started here, in order
        self.processes: list[NodeProcess] = []
        self._client: GraphClient | None = None

    # -- the client ---------------------------------------------------------------------------------
    @property
    def client(self) -> GraphClient:
        """The test's own rclpy node on this domain (created on first use)."""
        if self._client is None:
            self._client = GraphClient(self.domain, self.name)
        return self._client

    @property
    def node(self):
        """The client's rclpy node: publishers, subscriptions and parameter clients of the test."""
        return self.client.node

    def collect(self, msg_type, topic: str, qos, into: list | None = None) -> list:
        """A subscription of the client that appends every message on ``topic`` to a list; the list."""
        got = [] if into is None else into
        self.node.create_subscription(msg_type, topic, got.append, qos)
        return got

    # -- nodes --------------------------------------------------------------------------------------
    def start(self, node: str, params: dict | None = None, remaps: dict | None = None, *,
              node_name: str | None = None, params_file: str | Path | None = None, label: str | None = None,
              log: str | Path | None = None) -> NodeProcess:
        """``python -m vilib_ros.nodes.<node>`` on this domain (``node_name``: its ROS name); ``label``
        names the process in reports (default: the ROS name), ``log`` its output file (default: one per
        label in this module's log folder)."""
        argv = node_argv(node, params=params, remaps=remaps, params_file=params_file, name=node_name)
        return self.start_argv(label or node_name or node, argv, log)

    def start_argv(self, label: str, argv: list[str], log: str | Path | None = None) -> NodeProcess:
        """A node from its command line (to start one again as it was started before)."""
        if log is None:
            k = sum(1 for p in self.processes if p.name == label)
            log = self.log_dir / (f"{label}.log" if k == 0 else f"{label}_{k + 1}.log")
        proc = NodeProcess(label, argv, self.env, log)
        self.processes.append(proc)
        return proc

    def alive(self) -> dict[str, bool]:
        """{label: running} of every node started here (a later one of the same label wins)."""
        return {p.name: p.alive for p in self.processes}

    def stop_all(self) -> dict[str, int | None]:
        """Stop every node started here that still runs; {label: exit code} of all of them."""
        return {p.name: p.stop() for p in self.processes}

    def tails(self, n: int = 25) -> str:
        """The last ``n`` lines of every node's output, for failure messages."""
        return "\n".join(f"--- {p.name} (pid {p.pid}, rc {p.poll()}):\n{p.tail(n)}" for p in self.processes)

    # -- waits --------------------------------------------------------------------------------------
    def spin_for(self, seconds: float) -> None:
        self.client.spin_for(seconds)

    def spin_until(self, predicate, timeout: float, step: float = 0.05) -> bool:
        """Spin until ``predicate()`` holds (True) or ``timeout`` passes (False)."""
        return self.client.spin_until(predicate, timeout, step)

    def wait_until(self, predicate, timeout: float, what: str, step: float = 0.1) -> None:
        """Spin until ``predicate()`` holds; fails, naming ``what``, on timeout."""
        if not self.client.spin_until(predicate, timeout, step):
            raise AssertionError(f"no {what} within {timeout:.0f} s\n{self.tails()}")

    def wait_for_subscribers(self, need: dict, timeout: float) -> None:
        """Every topic of ``need`` has at least that many subscribers in the graph (the nodes'
        and the client's own); fails on timeout or as soon as a node started here (since the last
        :meth:`reset`) exits."""
        if not self.client.wait_for_subscribers(need, timeout, self.processes):
            have = {t: self.node.count_subscribers(t) for t in need}
            raise AssertionError(f"subscribers {need} not discovered within {timeout:.0f} s (have {have})\n"
                                 f"{self.tails()}")

    def wait_matched(self, publishers: dict | None = None, subscriptions=(), timeout: float = 60.0) -> None:
        """Each of the client's publishers matched to at least its number of subscriptions and each
        of its subscriptions to at least one publisher (the endpoints, not only the graph, see each
        other); fails on timeout."""
        publishers = publishers or {}

        def matched():
            return (all(p.get_subscription_count() >= n for p, n in publishers.items())
                    and all(s.get_publisher_count() >= 1 for s in subscriptions))

        if not self.client.spin_until(matched, timeout, 0.1):
            pubs = {p.topic_name: p.get_subscription_count() for p in publishers}
            subs = {s.topic_name: s.get_publisher_count() for s in subscriptions}
            raise AssertionError(f"endpoints not matched within {timeout:.0f} s: subscriptions per publisher {pubs}, "
                                 f"publishers per subscription {subs}\n{self.tails()}")

    def reset(self) -> None:
        """Stop every node and close the client: the next scenario of the module (another dataset,
        another test) starts from an empty graph, with a client of its own (made on first use)."""
        self.stop_all()
        self.processes = []
        if self._client is not None:
            self._client.close()
            self._client = None
