"""
One daemon of two cut off from PostgreSQL by a network partition, and the partition
healed: the fleet ends in the state a user expects.

PostgreSQL (a throw-away cluster of this test's own, L{tests.support.postgres}) runs in
the machine's network namespace and listens on loopback and on one end of a veth pair;
daemon A (C{mcpx daemon}, started with C{ip netns exec}) runs in a network namespace of
its own holding the other end, and reaches the database only through it; daemon B runs
beside the database, on loopback.  The test reaches both daemons through their unix
sockets, which no network namespace separates.  The partition takes the link down on
the database's side, and routes A's address nowhere there: A's packets vanish, with no
error for A to see, as in a cut cable or a dead switch.

This needs root (network namespaces), as the CI machine runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psycopg
import treq
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SkipTest, TestCase
from twisted.web.http_headers import Headers

from mcpx.store.heartbeat import EVERY, TIMEOUT
from tests.questions.support import Daemon, demo_server
from tests.support.http import TestClient
from tests.support.postgres import PASSWORD, PostgresCluster
from tests.support.processes import REPO, kill_on_cleanup, reactor, spawn

ALICE = Headers({"Mcpx-Client": ["alice"]})


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Network:
    """
    A network namespace joined to this one by a veth pair, a /30 of C{10.231/16} picked
    from the test's process id: L{server} on this side, L{daemon} inside.
    """

    def __init__(self) -> None:
        pid = os.getpid()
        self.namespace = f"mcpx-part-{pid}"
        self.outside = f"mpo{pid % 10**9}"[:15]
        self.inside = f"mpi{pid % 10**9}"[:15]
        third, fourth = (pid >> 6) % 256, (pid % 64) * 4
        self.server = f"10.231.{third}.{fourth + 1}"
        self.daemon = f"10.231.{third}.{fourth + 2}"
        self.cut = False

    def make(self) -> None:
        _ip("netns", "add", self.namespace)
        _ip("link", "add", self.outside, "type", "veth", "peer", "name", self.inside)
        _ip("link", "set", self.inside, "netns", self.namespace)
        _ip("addr", "add", f"{self.server}/30", "dev", self.outside)
        _ip("link", "set", self.outside, "up")
        _ip("-n", self.namespace, "addr", "add", f"{self.daemon}/30", "dev", self.inside)
        _ip("-n", self.namespace, "link", "set", self.inside, "up")
        _ip("-n", self.namespace, "link", "set", "lo", "up")

    def remove(self) -> None:
        for args in (
            ("route", "del", "blackhole", f"{self.daemon}/32"),
            ("link", "del", self.outside),
            ("netns", "del", self.namespace),
        ):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(*args)

    def partition(self) -> None:
        """Packets between the namespace and the database are dropped, both ways."""
        self.cut = True
        _ip("link", "set", self.outside, "down")
        # Without it, the database's replies to A would leave by the default route.
        _ip("route", "add", "blackhole", f"{self.daemon}/32")

    def heal(self) -> None:
        _ip("route", "del", "blackhole", f"{self.daemon}/32")
        _ip("link", "set", self.outside, "up")
        self.cut = False


class NamespacedDaemon(Daemon):
    """A L{Daemon} started inside a network namespace."""

    def __init__(
        self,
        test: TestCase,
        servers: Mapping[str, Mapping[str, Any]],
        *,
        namespace: str,
        settings: Mapping[str, str],
    ) -> None:
        super().__init__(test, servers, settings=settings)
        ip = shutil.which("ip")
        assert ip is not None
        self._argv = [ip, "netns", "exec", namespace, *self._argv]


async def until(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float, every: float = 0.25
) -> None:
    deadline = reactor.seconds() + timeout
    while not await check():
        if reactor.seconds() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await deferLater(reactor, every, lambda: None)


class PartitionTests(TestCase):
    timeout = 180

    def setUp(self) -> None:
        if os.geteuid() != 0:
            raise SkipTest("a network namespace needs root (the CI machine's case)")
        if shutil.which("ip") is None:
            self.fail("ip is missing: run `make test`, which installs iproute2")
        self.network = Network()
        self.addCleanup(self.network.remove)
        self.network.make()
        self.cluster = PostgresCluster()
        self.cluster.listen.append(self.network.server)
        self.cluster.clients.append(f"{self.network.daemon}/32")
        self.addCleanup(self.cluster.remove)
        self.cluster.start()
        self.database = self.cluster.database()
        self.url = self.cluster.url(self.database)

    def settings(self, host: str) -> dict[str, str]:
        return {
            "MCPX_STORE_URL": self.url.replace("@127.0.0.1:", f"@{host}:"),
            "MCPX_STORE_PASSWORD_FILE": str(self.cluster.password_file),
        }

    def row(self, table: str, row_id: str) -> dict[str, Any]:
        with psycopg.connect(self.url, password=PASSWORD) as connection:
            found = connection.execute(
                f"SELECT state, record FROM {table} WHERE id = %s", (row_id,)
            ).fetchone()
        assert found is not None, (table, row_id)
        record: dict[str, Any] = json.loads(found[1])
        record["_state"] = found[0]
        return record

    def drop_connections_from(self, address: str) -> None:
        """
        The database's machine forgets every connection from C{address}, with nothing
        sent to it (the kernel destroys the sockets: C{ss -K}), as after a reboot or a
        failover to another machine, or a middlebox dropping its state.
        """
        killed = subprocess.run(
            ["ss", "-K", "-t", "-n", "dst", address],
            check=True,
            capture_output=True,
            text=True,
        )
        assert address in killed.stdout, f"A had no connection to drop: {killed}"

    def client(self, daemon: Daemon) -> TestClient:
        client = TestClient(reactor, unix_socket=daemon.socket)
        self.addCleanup(client.close)
        return client

    async def send(
        self, client: TestClient, method: str, path: str, timeout: float = 10.0, **given: Any
    ) -> tuple[int, Any]:
        """One request through C{client}; it must be answered within C{timeout} seconds."""
        requested = client.http.request(method, f"http://mcpx{path}", headers=ALICE, **given)
        requested.addTimeout(timeout, reactor)
        response = await requested
        body = await treq.content(response)
        return response.code, json.loads(body) if body else None

    async def serves_without_store(self, client: TestClient, who: str) -> None:
        """C{/health} and an C{echo} through C{who}, each answered within seconds."""
        code, health = await self.send(client, "GET", "/health", timeout=5)
        self.assertEqual(code, 200, (who, health))
        code, echoed = await self.send(
            client,
            "POST",
            "/v1/call",
            timeout=10,
            json={"server": "demo", "tool": "echo", "arguments": {"text": who}},
        )
        self.assertEqual(code, 200, (who, echoed))
        self.assertIn(who, json.dumps(echoed))

    async def test_partitioned_daemon_ends_clean(self) -> None:
        """
        A runs a long C{countdown} task and owns a pending question (C{mcpx call demo
        ask} on it); A is cut off from PostgreSQL.  Both daemons keep answering what
        needs no shared state.  B takes A for dead: it fails A's task with
        C{daemon_lost}, readable through B, and adopts A's question, which is answered
        through B.  The database's machine then forgets A's connections, and A runs
        one more task and asks one more question while still cut off.  Once the
        partition heals, A's call gets B's answer and ends with it, A reads its task
        failed with C{daemon_lost} (its countdown stopped, never written back as
        running), what A lists agrees with the store, B reads the task A ran while cut
        off, and lists the question A asked while cut off, whose answer through B
        reaches A's call.
        """
        network = self.network
        first = NamespacedDaemon(
            self,
            {"demo": demo_server()},
            namespace=network.namespace,
            settings=self.settings(network.server),
        )
        await first.start()
        second = await Daemon(
            self, {"demo": demo_server()}, settings=self.settings("127.0.0.1")
        ).start()
        a, b = self.client(first), self.client(second)
        self.addCleanup(self.heal_quietly)

        code, body = await self.send(
            a,
            "POST",
            "/v1/call",
            json={
                "server": "demo",
                "tool": "countdown",
                "arguments": {"steps": 100, "interval": 10},
                "task": True,
            },
        )
        self.assertEqual(code, 202, body)
        task_id = body["task"]["id"]
        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=first.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, call)
        asked = await second.wait_for_question("demo")
        self.assertFalse(asked["orphaned"], asked)

        async def b_reads_working() -> bool:
            code, shown = await self.send(b, "GET", f"/v1/tasks/{task_id}")
            return code == 200 and shown["status"] == "working"

        await until(b_reads_working, "B reads A's task working", 10)

        network.partition()
        await self.serves_without_store(a, "a-cut")
        await self.serves_without_store(b, "b-alone")

        lost: dict[str, Any] = {}

        async def b_reads_lost() -> bool:
            code, shown = await self.send(b, "GET", f"/v1/tasks/{task_id}")
            lost.update(shown)
            return code == 200 and shown["status"] != "working"

        await until(b_reads_lost, "B fails A's task", TIMEOUT + 3 * EVERY)
        self.assertEqual((lost["status"], lost["error"]["code"]), ("failed", "daemon_lost"), lost)

        async def b_adopted() -> bool:
            listed = await second.api("/v1/questions?all=true")
            return any(q["id"] == asked["id"] and q["orphaned"] for q in listed["questions"])

        await until(b_adopted, "B adopts A's question", 2 * EVERY)
        answered = await second.mcpx("elicit", asked["id"], "--answer", '{"answer": "Ada"}')
        self.assertEqual(answered.code, 0, answered)

        # The server gives up on A's connections while A cannot hear it (as it does
        # once unacknowledged data has waited long enough, or when it restarts).
        await deferToThread(self.drop_connections_from, network.daemon)
        # Well into the partition, with A's store queries stuck: A still serves.
        await self.serves_without_store(a, "a-still-cut")
        await self.serves_without_store(b, "b-still-alone")
        code, body = await self.send(
            a,
            "POST",
            "/v1/call",
            json={"server": "demo", "tool": "echo", "arguments": {"text": "cut"}, "task": True},
        )
        self.assertEqual(code, 202, body)
        cut_task = body["task"]["id"]
        # And a question asked on A while it is cut off.
        second_call = spawn(
            [sys.executable, "-m", "mcpx", "call", "demo", "ask"], env=first.env, cwd=str(REPO)
        )
        self.addCleanup(kill_on_cleanup, second_call)
        later: dict[str, Any] = {}

        async def a_asks_again() -> bool:
            listed = await first.api("/v1/questions?all=true")
            for q in listed["questions"]:
                if q["id"] != asked["id"] and q["state"] == "pending":
                    later.update(q)
            return bool(later)

        await until(a_asks_again, "A asks a question while cut off", 20)

        async def a_could_not_write() -> bool:
            log = first.log()
            return f"save task {cut_task}" in log and f"save question {later['id']}" in log

        # Until A has given up writing both (it cannot connect), not merely begun.
        await until(a_could_not_write, "A's writes of both fail", 30)

        network.heal()
        self.assertEqual(await call.ended(timeout=60), 0, call.text() + first.log()[-6000:])
        self.assertIn("Ada", call.text(1))

        async def a_reads_lost() -> bool:
            code, shown = await self.send(a, "GET", f"/v1/tasks/{task_id}")
            return code == 200 and shown["status"] != "working"

        await until(a_reads_lost, "A hears its task was failed", 60)
        code, there = await self.send(a, "GET", f"/v1/tasks/{task_id}")
        self.assertEqual((there["status"], there["error"]["code"]), ("failed", "daemon_lost"))
        # A few beats later nothing of A's has written the task back as running.
        await deferLater(reactor, 2 * EVERY, lambda: None)
        stored = await deferToThread(self.row, "mcpx_tasks", task_id)
        self.assertEqual((stored["_state"], stored["error"]["code"]), ("failed", "daemon_lost"))
        question = await deferToThread(self.row, "mcpx_questions", asked["id"])
        self.assertEqual(
            (question["_state"], question["answer"]),
            ("answered", {"action": "accept", "content": {"answer": "Ada"}}),
        )
        listed = await first.api("/v1/questions?all=true")
        [shown] = [q for q in listed["questions"] if q["id"] == asked["id"]]
        self.assertEqual(shown["state"], "answered", shown)
        await self.serves_without_store(a, "a-healed")

        async def b_reads_cut_task() -> bool:
            code, shown = await self.send(b, "GET", f"/v1/tasks/{cut_task}")
            return code == 200 and shown["status"] == "completed"

        await until(b_reads_cut_task, "B reads the task A ran while cut off", 30, every=2)

        async def b_lists_later() -> bool:
            listed = await second.api("/v1/questions?all=true")
            return any(q["id"] == later["id"] for q in listed["questions"])

        await until(b_lists_later, "B lists the question A asked while cut off", 30)
        answered = await second.mcpx("elicit", later["id"], "--answer", '{"answer": "Cy"}')
        self.assertEqual(answered.code, 0, answered)
        self.assertEqual(await second_call.ended(timeout=30), 0, second_call.text())
        self.assertIn("Cy", second_call.text(1))
        self.assertEqual(await first.stop(), 0, first.log()[-4000:])
        self.assertEqual(await second.stop(), 0, second.log()[-4000:])
        self.assertIn(f"task {task_id} was failed through another daemon", first.log())
        # A found its listening connection dead and listened again by itself.
        a_url = self.settings(network.server)["MCPX_STORE_URL"]
        self.assertIn(f"lost the connection listening to {a_url}", first.log())
        self.assertIn(f"listening to {a_url} again", first.log())

    def heal_quietly(self) -> None:
        if self.network.cut:
            with contextlib.suppress(subprocess.CalledProcessError):
                self.network.heal()
