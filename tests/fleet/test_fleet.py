"""
Three daemons behind HAProxy on one PostgreSQL store (L{tests.fleet.fleet}), driven by
real peers: the Python SDK's client as the host, the Python SDK fixture as every
daemon's upstream, and for tasks the TypeScript SDK 1.x client
(C{tests/peers/tasks1-host.mjs}) making 2025-11-25 tasks of C{mcpx_call} on the
fixture's C{slow} tool: a host pinned to a daemon by its port, or kept on one by the
balancer, says which daemon starts a task and which one reads, awaits or cancels it.
"""

from __future__ import annotations

import http.client as http_client
import json
import secrets
import subprocess
import sys
import time
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.fleet.fleet import (
    ADDED,
    ADDED_PREFIX,
    MODERN,
    PUBLIC_NAME,
    TOOLS_CHANGED,
    UPSTREAM,
    Answer,
    FleetDaemon,
    FleetTestCase,
    Listeners,
    Recorded,
    http,
    principal_affinity,
    texts,
    wait_until,
)
from tests.support.processes import REPO, free_tcp_port


class FleetTests(FleetTestCase):
    """The scenarios of docs/fleet.md's failures and sharing, on one fleet."""

    def test_modern_calls_spread_over_every_daemon(self) -> None:
        """
        A 2026-07-28 host's calls through HAProxy, which carry no session, are served
        by all three daemons (each has calls of its own in /v1/calls), every one
        answered.
        """
        since = time.time() - 0.001
        answers = self.host(MODERN, 9)
        self.assertEqual(answers, [f"{MODERN} {i}" for i in range(9)])
        counts = self.fleet.calls_since(since, "echo")
        self.assertEqual(sum(counts.values()), 9, counts)
        self.assertTrue(all(counts[d.name] > 0 for d in self.fleet.daemons), counts)

    def test_legacy_session_survives_its_daemon(self) -> None:
        """
        A legacy host's session stays on the daemon that minted its Mcp-Session-Id;
        that daemon killed with kill -9, the host's next request gets 404 (from another
        daemon, HAProxy having sent it on), and a new session carries on elsewhere.
        """
        since = time.time() - 0.001
        recorded = Recorded()
        owner: list[FleetDaemon] = []

        def kill_the_owner(i: int) -> None:
            if i != 2:
                return
            counts = self.fleet.calls_since(since, "echo")
            [name] = [name for name, n in counts.items() if n]
            self.assertEqual(counts[name], 3, counts)
            [daemon] = [d for d in self.fleet.daemons if d.name == name]
            owner.append(daemon)
            self.addCleanup(self.fleet.restart_daemon, daemon)
            daemon.kill()
            # HAProxy marks it down (and ends the sessions it held, the host's
            # connection among them) before the host's next request, which then goes
            # to another daemon, rather than dying with a connection being shut.
            wait_until(
                lambda: self.fleet.server_states().get(daemon.name, "").startswith("DOWN"),
                f"HAProxy sees {daemon.name} down",
            )

        with self.assertRaises(MCPError) as refused:
            self.host("legacy", 5, recorded=recorded, between=kill_the_owner)
        self.assertIn("no such session", str(refused.exception))
        [session] = {s for _, _, s in recorded.exchanges if s}
        after_kill = [
            status for method, status, s in recorded.exchanges if s == session and method == "POST"
        ]
        self.assertEqual(after_kill[-2:], [200, 404], recorded.exchanges)

        since = time.time() - 0.001
        self.assertEqual(self.host("legacy", 3), [f"legacy {i}" for i in range(3)])
        counts = self.fleet.calls_since(since, "echo")
        self.assertNotIn(owner[0].name, counts)
        self.assertEqual(sorted(counts.values()), [0, 3], counts)

    def test_question_answered_through_another_daemon(self) -> None:
        """
        The upstream asks a question during alice's call on daemon 1; daemon 3 lists it
        in /v1/questions, alice answers it there, and the call on daemon 1 ends with
        the answer.
        """
        first, _, third = self.fleet.daemons
        call, id = self.ask(first)
        asked = self.question(third, id)
        self.assertEqual(asked["server"], UPSTREAM)
        answered = self.answer(third, asked, "Ada")
        self.assertEqual(answered.status, 200, (answered, asked, self.dump()))
        done = call.result()
        self.assertEqual(done.status, 200, done)
        self.assertEqual(done.body["content"][0]["text"], "Hello, Ada")

    def test_question_answered_with_mcpx_elicit_on_another_daemon(self) -> None:
        """
        C{mcpx elicit} pointed at daemon 3 (its state directory, so its unix socket) lists
        the question alice's call on daemon 1 is waiting for and answers it; the call on
        daemon 1 ends with that answer.
        """
        first, _, third = self.fleet.daemons
        call, id = self.ask(first)
        self.question(third, id)

        def elicit(*arguments: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "mcpx", "elicit", *arguments],
                env=third.env,
                cwd=str(REPO),
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )

        listed = elicit("--json")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn(id, [q["id"] for q in json.loads(listed.stdout)["questions"]])
        answered = elicit(id, "--answer", json.dumps({"name": "Grace"}))
        self.assertEqual(answered.returncode, 0, answered.stdout + answered.stderr)
        self.assertEqual(call.result().body["content"][0]["text"], "Hello, Grace")

    def test_other_principal_refused_the_question_everywhere(self) -> None:
        """
        bob, another principal, neither lists, reads nor answers alice's question on
        any daemon; alice's answer then still ends her call.
        """
        first, second, _ = self.fleet.daemons
        call, id = self.ask(second)
        asked = self.question(first, id)
        path = f"/v1/questions/{asked['id']}"
        for daemon in self.fleet.daemons:
            listed = self.fleet.v1(daemon, "GET", "/v1/questions?all=true", "bob")
            self.assertEqual((listed.status, listed.body), (200, {"questions": []}), daemon.name)
            shown = self.fleet.v1(daemon, "GET", path, "bob")
            self.assertEqual((shown.status, shown.body["error"]["code"]), (404, "unknown_question"))
            body = {"action": "accept", "content": {"name": "Mallory"}}
            refused = self.fleet.v1(daemon, "POST", path + "/answer", "bob", body=body)
            self.assertEqual(
                (refused.status, refused.body["error"]["code"]), (404, "unknown_question")
            )
        self.assertEqual(self.answer(first, asked, "Ada").status, 200)
        self.assertEqual(call.result().body["content"][0]["text"], "Hello, Ada")

    def test_input_required_retry_answered_through_another_daemon(self) -> None:
        """
        A 2026-07-28 SDK host's call of the upstream's C{ask_name} on daemon 1 is answered
        C{input_required}; the host sends its retry, with the answer and the signed
        requestState, to daemon 2, and the call ends there with that answer, having run
        on daemon 1 alone (its upstream asked once, there); the same state sent again
        through daemon 3 is refused as used.
        """
        first, second, third = self.fleet.daemons
        since = time.time() - 0.001
        asked_the_host: list[Any] = []

        async def elicit(context: Any, params: Any) -> types.ElicitResult:
            asked_the_host.append(params)
            return types.ElicitResult(action="decline")

        async def asking(host: Client) -> Any:
            return await host.session.call_tool("ask_name", {}, allow_input_required=True)

        asked = self.sdk(first, asking, elicitation_callback=elicit)
        self.assertIsInstance(asked, types.InputRequiredResult, asked)
        [key] = asked.input_requests or {}
        answers: types.InputResponses = {
            key: types.ElicitResult(action="accept", content={"name": "Ada"})
        }

        async def retrying(host: Client) -> Any:
            return await host.session.call_tool(
                "ask_name",
                {},
                input_responses=answers,
                request_state=asked.request_state,
                allow_input_required=True,
            )

        final = self.sdk(second, retrying, elicitation_callback=elicit)
        self.assertIsInstance(final, types.CallToolResult, final)
        self.assertEqual(texts(final), "Hello, Ada", self.dump())
        self.assertEqual(asked_the_host, [], "the SDK's own driver did not answer")
        counts = self.fleet.calls_since(since, "ask_name")
        self.assertEqual(counts, {first.name: 1, second.name: 0, third.name: 0})

        with self.assertRaises(MCPError) as replayed:
            self.sdk(third, retrying, elicitation_callback=elicit)
        self.assertIn("requestState was already used", str(replayed.exception))
        self.assertEqual(self.fleet.calls_since(since, "ask_name"), counts)

    def test_listener_hears_a_change_made_on_another_daemon(self) -> None:
        """
        A 2026-07-28 SDK host listening on daemon 1 (subscriptions/listen) and a legacy
        SDK session there (its GET stream) hear tools/list_changed once a server passed
        through is removed with C{mcpx remove} against daemon 2, and daemons 1 and 3 list
        its tools no more; added back with C{mcpx add} through daemon 2, both hear it
        again, and daemons 1 and 3 list its tools again.
        """
        first, second, third = self.fleet.daemons
        added_tools = {ADDED_PREFIX + name for name in ("echo", "add", "now", "fail")}
        listeners = Listeners(f"{first.url}/mcp", self.fleet.token("alice"))
        self.addCleanup(listeners.close)
        listeners.wait_ready()
        self.assertLessEqual(added_tools, self.tool_names(first))

        def heard(count: int) -> bool:
            return all(h.count(TOOLS_CHANGED) >= count for h in listeners.heard.values())

        # Whatever happens below, the fleet's configuration is put back.
        self.addCleanup(self.added, second, "--replace")
        removed = self.mcpx(second, "remove", ADDED)
        self.assertEqual(removed.returncode, 0, removed.stdout + removed.stderr)
        wait_until(lambda: heard(1), f"the hosts on {first.name} hear the tools changed")
        for daemon in (first, third):
            self.assertTrue(added_tools.isdisjoint(self.tool_names(daemon)), daemon.name)

        added = self.added(second)
        self.assertEqual(added.returncode, 0, added.stdout + added.stderr)
        wait_until(lambda: heard(2), f"the hosts on {first.name} hear the tools changed again")
        for daemon in (first, third):
            self.assertLessEqual(added_tools, self.tool_names(daemon), daemon.name)

    def test_postgres_restart(self) -> None:
        """
        PostgreSQL stopped under the fleet: calls that need no shared state go on
        through HAProxy, on every daemon; started again, a question asked before it
        stopped is answered through another daemon and wakes its call.
        """
        first, second, _ = self.fleet.daemons
        call, id = self.ask(second)
        asked = self.question(first, id)
        with self.fleet.postgres_stopped():
            since = time.time() - 0.001
            self.assertEqual(self.host(MODERN, 6), [f"{MODERN} {i}" for i in range(6)])
            counts = self.fleet.calls_since(since, "echo")
            self.assertEqual(sum(counts.values()), 6, counts)
            self.assertTrue(all(counts.values()), counts)

        def answered() -> Answer | None:
            answer = self.answer(first, asked, "Ada")
            return answer if answer.status == 200 else None

        wait_until(answered, "the answer is taken once PostgreSQL is back")
        done = call.result()
        self.assertEqual(done.body["content"][0]["text"], "Hello, Ada", self.dump())
        # Every daemon comes to list the one answer (a daemon whose listening connection
        # is still waiting to reconnect reads every question again when it does).
        for daemon in self.fleet.daemons:
            shown = self.question(daemon, id, "answered")
            self.assertEqual(shown["answer"], {"action": "accept", "content": {"name": "Ada"}})

    def test_host_origin_and_token_checked_by_the_daemons(self) -> None:
        """
        HAProxy hands Host, Origin and Authorization to the daemons as the client sent
        them: the fleet's public name is let in, any other name or a foreign Origin is
        refused by the daemon (403), and a request without a token gets 401.
        """
        base = self.fleet.balancer
        token = self.fleet.token("alice")
        named = http("GET", base + "/v1/servers", token=token, headers={"Host": PUBLIC_NAME})
        self.assertEqual(named.status, 200, named)
        other = http("GET", base + "/v1/servers", token=token, headers={"Host": "rebind.example"})
        self.assertEqual((other.status, other.body["error"]["code"]), (403, "host_not_allowed"))
        page = http(
            "GET", base + "/v1/servers", token=token, headers={"Origin": "https://evil.example"}
        )
        self.assertEqual((page.status, page.body["error"]["code"]), (403, "origin_not_allowed"))
        self.assertEqual(http("GET", base + "/v1/servers").status, 401)

    def test_rate_limit_per_credential(self) -> None:
        """
        One credential sending more than 600 requests in 10 seconds is answered 429
        with Retry-After by HAProxy, and was never refused before its 600th; another
        credential is not held back.
        """
        connection = http_client.HTTPConnection("127.0.0.1", self.fleet.balancer_port, timeout=30)
        flood = {"Authorization": f"Bearer flood-{secrets.token_hex(8)}"}
        answered: list[int] = []
        refused: str | None = None
        try:
            while len(answered) < 3000:
                connection.request("GET", "/health", headers=flood)
                response = connection.getresponse()
                response.read()
                if response.status == 429:
                    refused = response.getheader("Retry-After")
                    break
                answered.append(response.status)
        finally:
            connection.close()
        self.assertGreaterEqual(len(answered), 600)
        self.assertEqual(set(answered), {200})
        self.assertEqual(refused, "10")
        calm = self.fleet.v1(None, "GET", "/v1/servers")
        self.assertEqual(calm.status, 200)

    def test_principal_affinity_option(self) -> None:
        """
        deploy/haproxy.cfg's documented option, balance hdr(Authorization), keeps each
        principal's 2026-07-28 calls on one daemon, where round-robin spreads them.
        """
        port = free_tcp_port()
        balancer = self.fleet.start_balancer(self.fleet.root / "affinity", port, principal_affinity)
        self.addCleanup(balancer.wait)
        self.addCleanup(balancer.terminate)
        url = f"http://127.0.0.1:{port}/mcp"
        for subject in ("alice", "bob", "carol"):
            since = time.time() - 0.001
            answers = self.host(MODERN, 6, subject, url=url)
            self.assertEqual(answers, [f"{MODERN} {i}" for i in range(6)])
            # Each subject sees its own calls on /v1/calls (docs/security.md).
            counts = self.fleet.calls_since(since, "echo", subject)
            self.assertEqual(sorted(counts.values()), [0, 0, 6], (subject, counts))

    def test_task_read_awaited_and_cancelled_on_other_daemons(self) -> None:
        """
        Two tasks started through HAProxy by a host whose session the balancer keeps
        on one daemon (the first, here): the second daemon lists both and reads the
        first working, then its tasks/result waits for the call on the first to end
        and answers its result; the third cancels the other task, and the first stops
        its upstream call (it ends there long before its time, not completed).
        """
        session = f"tasks-{secrets.token_hex(4)}"
        since = time.time() - 0.001
        starter = self.task_host(None, session)
        finishing = self.started(starter, 3)
        cancelling = self.started(starter, 120)
        owner = str(starter.ok(op="session")).partition(".")[0]
        [first] = [d for d in self.fleet.daemons if self.daemon_id(d) == owner]
        second, third = [d for d in self.fleet.daemons if d is not first]

        reader = self.task_host(second, session)
        listed = {task["taskId"]: task["status"] for task in reader.ok(op="list")["tasks"]}
        self.assertEqual(listed, {finishing: "working", cancelling: "working"}, self.dump())
        self.assertEqual(reader.ok(op="get", taskId=finishing)["status"], "working")
        result = reader.ok(op="result", taskId=finishing)
        self.assertFalse(result.get("isError"), result)
        self.assertIn("slept", json.dumps(result["content"]), result)
        self.assertEqual(reader.ok(op="get", taskId=finishing)["status"], "completed")

        canceller = self.task_host(third, session)
        cancelled = canceller.ok(op="cancel", taskId=cancelling)
        self.assertEqual(cancelled["status"], "cancelled", cancelled)

        def stopped_on_first() -> list[dict[str, Any]]:
            return [c for c in self.slow_calls(first, since) if c["outcome"] != "ok"]

        # The call of 120 seconds ends on the first, not completed, long before its time.
        [call] = wait_until(stopped_on_first, f"{first.name} stops the cancelled call")
        self.assertLess(call["seconds"], 60, call)
        self.assertEqual(starter.ok(op="get", taskId=cancelling)["status"], "cancelled")
        self.assertEqual(reader.ok(op="get", taskId=cancelling)["status"], "cancelled")

    def test_killed_daemons_task_fails_daemon_lost(self) -> None:
        """
        Daemon 2 killed with kill -9 while it runs a task: a tasks/result already
        waiting on daemon 3 answers the daemon_lost error naming daemon 2 (once its
        heartbeat is old), and daemon 1 reads the task failed, saying why; started
        again, daemon 2 says the same of it.
        """
        first, second, third = self.fleet.daemons
        session = f"lost-{secrets.token_hex(4)}"
        task_id = self.started(self.task_host(second, session), 120)
        waiting = self.task_host(third, session)
        self.assertEqual(waiting.ok(op="get", taskId=task_id)["status"], "working")
        waiting.send(op="result", taskId=task_id)
        lost = self.daemon_id(second)
        second.kill()
        answer = waiting.reply()
        self.assertIn("error", answer)
        error = answer["error"]
        self.assertEqual(error["code"], -32603, error)
        self.assertEqual(error["data"]["reason"], "daemon_lost", error)
        self.assertEqual(error["data"]["taskId"], task_id, error)
        self.assertIn(f"({lost}) stopped without finishing it", error["message"])
        shown = self.task_host(first, session).ok(op="get", taskId=task_id)
        self.assertEqual(shown["status"], "failed", shown)
        self.assertIn("stopped without finishing it", shown["statusMessage"])
        # Its task journal names the task: it does not report it failed otherwise.
        self.fleet.restart_daemon(second)
        self.assertEqual(self.task_host(second, session).ok(op="get", taskId=task_id), shown)

    def test_other_principal_finds_no_task_on_any_daemon(self) -> None:
        """
        bob, naming the very session alice's hosts name, gets for alice's task on every
        daemon what a task id that never existed gets (tasks/get, tasks/result and
        tasks/cancel refused with -32602 "no task", not in tasks/list; 404
        unknown_task on /v1/tasks); alice's task runs on and ends as hers.
        """
        first = self.fleet.daemons[0]
        session = f"private-{secrets.token_hex(4)}"
        alice = self.task_host(first, session)
        task_id = self.started(alice, 4)
        never = "t_" + secrets.token_hex(8)
        for daemon in self.fleet.daemons:
            bob = self.task_host(daemon, session, "bob")
            for op in ("get", "result", "cancel"):
                refused = bob(op=op, taskId=task_id)
                unknown = bob(op=op, taskId=never)
                self.assertIn("error", refused, (daemon.name, op, refused))
                self.assertEqual(refused["error"]["code"], -32602, (daemon.name, op, refused))
                self.assertEqual(
                    refused["error"]["message"].replace(task_id, "ID"),
                    unknown["error"]["message"].replace(never, "ID"),
                    (daemon.name, op),
                )
            self.assertEqual(bob.ok(op="list")["tasks"], [], daemon.name)
            for method, path, body in (
                ("GET", f"/v1/tasks/{task_id}", None),
                ("POST", f"/v1/tasks/{task_id}/cancel", {}),
            ):
                answer = self.fleet.v1(daemon, method, path, "bob", body=body)
                self.assertEqual(
                    (answer.status, answer.body["error"]["code"]),
                    (404, "unknown_task"),
                    (daemon.name, method, path),
                )
            listed = self.fleet.v1(daemon, "GET", "/v1/tasks", "bob")
            self.assertEqual(listed.status, 200, listed)
            self.assertNotIn(task_id, json.dumps(listed.body), daemon.name)
        self.assertEqual(alice.ok(op="get", taskId=task_id)["status"], "working")
        result = alice.ok(op="result", taskId=task_id)
        self.assertIn("slept 4", json.dumps(result["content"]), result)
