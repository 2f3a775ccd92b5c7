"""
Reloading the config file: what is refused and kept, what is applied at once, what waits
for a restart, and that reloads never overlap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops.events import Event
from mcpx.ops.reloading import server_changes
from mcpx.pool.status import ReloadReport
from mcpx.settings.config import reread_config
from mcpx.settings.errors import SettingsError
from mcpx.settings.servers import ServersConfig, StdioServer
from tests.daemon.fake_pool import FakePool, Harness, default_servers, servers_config
from tests.policy.fakes import configured


class HeldPool(FakePool):
    """A pool whose reloads wait until the test lets each one finish."""

    def __init__(self) -> None:
        super().__init__(default_servers())
        self.gates: list[Deferred[None]] = []

    async def reload(self, servers: ServersConfig) -> ReloadReport:
        gate: Deferred[None] = Deferred()
        self.gates.append(gate)
        self.reloaded.append(servers)
        self.servers = {
            name: self.servers.get(name) or default_servers()["files"] for name in servers
        }
        await gate
        return ReloadReport(added=tuple(servers))


class ReloadTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.harness = Harness()
        self.heard: list[Event] = []
        self.harness.http.host.events.subscribe(self.heard.append)

    def test_refused_reload_keeps_configuration(self) -> None:
        """A file that cannot be read is a 400 with its reason; servers and pool stay."""
        before = self.harness.http.host.servers

        def missing() -> Any:
            raise SettingsError("/etc/mcpx.json: no such file (the daemon was started with it)")

        self.harness.http.host.reloads.read = missing
        answer = self.harness.post("/v1/reload")
        self.assertEqual((answer.code, answer.json["error"]["code"]), (400, "invalid_config"))
        self.assertIn("no such file", answer.json["error"]["message"])
        self.assertIn("running configuration is kept", answer.json["error"]["message"])
        self.assertIs(self.harness.http.host.servers, before)
        self.assertEqual(self.harness.pool.reloaded, [])

    def test_refusal_is_published_and_shown_by_health(self) -> None:
        """The reason goes on /v1/events and /health keeps it until a reload succeeds."""

        def broken() -> Any:
            raise SettingsError(
                "config.json: not valid JSON: Unterminated string at line 3 column 12"
            )

        self.harness.http.host.reloads.read = broken
        self.harness.post("/v1/reload")
        [failed] = [event for event in self.heard if event.kind == "config.reload_failed"]
        self.assertIn("line 3 column 12", failed.data["error"])
        health = self.harness.get("/health").json
        self.assertFalse(health["last_reload"]["ok"])
        self.assertIn("Unterminated string", health["last_reload"]["error"])

        self.harness.http.host.reloads.read = self.harness.read_config
        self.assertEqual(self.harness.post("/v1/reload").code, 200)
        self.assertEqual(self.harness.get("/health").json["last_reload"]["error"], None)
        self.assertEqual(
            [e.kind for e in self.heard if e.kind.startswith("config.")][-1], "config.reloaded"
        )

    def test_same_server_passed_through_twice_is_refused(self) -> None:
        """
        A file passing the same server through under two names without a toolPrefix is
        refused naming both; the running configuration is kept.
        """
        before = self.harness.http.host.servers
        self.harness.read = ServersConfig(
            {name: StdioServer(name, "notes-mcp") for name in ("work", "home")}, "config.json"
        )
        self.harness.file_settings = {"mcp.passthrough": ("work", "home")}
        answer = self.harness.post("/v1/reload")
        self.assertEqual((answer.code, answer.json["error"]["code"]), (400, "invalid_config"))
        self.assertIn("'work' and 'home'", answer.json["error"]["message"])
        self.assertIn("toolPrefix", answer.json["error"]["message"])
        self.assertIs(self.harness.http.host.servers, before)
        self.assertEqual(self.harness.pool.reloaded, [])

    def test_live_settings_applied_others_named(self) -> None:
        """pool.callTimeout from the file is applied; a setting that needs a restart is named."""
        self.harness.file_settings = {"pool.callTimeout": 2.0, "daemon.logLevel": "debug"}
        answer = self.harness.post("/v1/reload")
        self.assertEqual(
            answer.json["settings"],
            {"applied": ["pool.callTimeout"], "restart_needed": ["daemon.logLevel"]},
        )
        [retuned] = self.harness.pool.retuned
        self.assertEqual(retuned.duration("pool.callTimeout"), 2.0)
        settings = self.harness.http.host.settings
        assert settings is not None
        self.assertEqual(settings.duration("pool.callTimeout"), 2.0)
        # What waits for a restart is shown as it still is.
        self.assertEqual(settings.string("daemon.logLevel"), "info")

    def test_flag_outranks_file_on_reload(self) -> None:
        """A setting a flag decided is not changed by the file."""
        harness = Harness(settings=default_settings_with_flag())
        harness.file_settings = {"pool.callTimeout": 2.0}
        answer = harness.post("/v1/reload")
        self.assertEqual(answer.json["settings"], {"applied": [], "restart_needed": []})

    def test_overlapping_reloads_are_serialized(self) -> None:
        """A reload waits for the one before it: the view and the pool end on the same file."""
        pool = HeldPool()
        harness = Harness(pool=pool)
        first, second = servers_config("files"), servers_config("files", "xnew")
        harness.read = first
        a = harness.start("POST", "/v1/reload")
        harness.stub.flush()
        harness.read = second
        b = harness.start("POST", "/v1/reload")
        harness.stub.flush()
        self.assertEqual(pool.reloaded, [first])
        pool.gates[0].callback(None)
        self.assertEqual(harness.finish(a).code, 200)
        self.assertEqual(pool.reloaded, [first, second])
        pool.gates[1].callback(None)
        self.assertEqual(harness.finish(b).code, 200)
        self.assertIs(harness.http.host.servers, second)
        self.assertIn("xnew", harness.get("/v1/settings").json["servers"])


def default_settings_with_flag() -> Any:
    from tests.daemon.fake_pool import default_settings

    return default_settings(**{"pool.callTimeout": "30s"})


class RereadTests(SynchronousTestCase):
    def test_missing_file_is_refused(self) -> None:
        """The file the daemon started with being gone never brings in the shipped config."""
        path = Path(self.mktemp())
        with self.assertRaises(SettingsError) as caught:
            reread_config(str(path), {})
        self.assertIn("no such file", str(caught.exception))

    def test_invalid_file_says_where(self) -> None:
        path = Path(self.mktemp())
        path.write_text('{\n  "servers": {\n    "a": {"command": "x\n', encoding="utf-8")
        with self.assertRaises(SettingsError) as caught:
            reread_config(str(path), {})
        self.assertIn("line 3 column", str(caught.exception))

    def test_reads_the_same_file(self) -> None:
        path = Path(self.mktemp())
        path.write_text('{"servers": {"b": {"command": "b"}}}', encoding="utf-8")
        self.assertEqual(list(reread_config(str(path), {}).servers), ["b"])


class ServerChangesTests(SynchronousTestCase):
    """What a reload changes, as the hosts are told of it before the pool is done."""

    def test_policy_alone_changed(self) -> None:
        """
        A server whose entry is the same but whose policy hides a tool now runs on
        unchanged, and is named among the policy changes, so hosts are told their tool
        lists changed.
        """
        old = configured(notes={}, other={})
        new = configured(notes={"tools": {"deny": ["delete_*"]}}, other={})
        changes = server_changes(old, new)
        self.assertEqual(
            (changes.changed, changes.unchanged, changes.policy_changed),
            ((), ("notes", "other"), ("notes",)),
        )

    def test_same_policy_is_no_change(self) -> None:
        old = configured(notes={"confirmDestructive": True})
        new = configured(notes={"confirmDestructive": True})
        self.assertEqual(server_changes(old, new).policy_changed, ())
