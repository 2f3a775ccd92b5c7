# -*- test-case-name: tests.cli.test_content_commands -*-
"""C{mcpx prompt} and C{mcpx read}, against the fake API and against a real daemon."""

from __future__ import annotations

import sys

from twisted.web.server import Site

from tests.cli.fake_daemon import FakeDaemon
from tests.cli.test_commands import CommandRunner
from tests.cli.test_real_daemon import RealDaemonCase
from tests.support.processes import reactor


class FakeContentTests(CommandRunner):
    """The commands' requests and output, against the fake API."""

    def setUp(self) -> None:
        super().setUp()
        self.fake = FakeDaemon()
        port = reactor.listenUNIX(self.socket, Site(self.fake.resource()))
        self.addCleanup(port.stopListening)

    async def test_prompt(self) -> None:
        """C{mcpx prompt} posts the filled-in arguments and prints each message after its role."""
        done = await self.mcpx("prompt", "demo", "greet", "name=Ada", "tone=warm=ish")
        self.assertEqual(done.code, 0, done)
        self.assertEqual(done.out, "A greeting\n\nuser: Greet Ada.\n")
        self.assertEqual(
            self.fake.last_body("/v1/prompt"),
            {"server": "demo", "name": "greet", "arguments": {"name": "Ada", "tone": "warm=ish"}},
        )

    async def test_prompt_json(self) -> None:
        """C{--json} prints the upstream's own result."""
        done = await self.mcpx("prompt", "demo", "greet", "name=Ada", "--json")
        self.assertEqual(done.code, 0, done)
        self.assertEqual(done.json()["messages"][0]["role"], "user")

    async def test_prompt_bad_argument(self) -> None:
        """An argument without C{=} is refused with exit 2, naming the command's form."""
        done = await self.mcpx("prompt", "demo", "greet", "Ada")
        self.assertEqual(done.code, 2, done)
        self.assertIn("mcpx prompt SERVER NAME key=value", done.err)
        self.assertNotIn("/v1/prompt", [uri for _, uri, _, _ in self.fake.requests])

    async def test_read(self) -> None:
        """C{mcpx read} prints text contents as text and notes binary ones."""
        done = await self.mcpx("read", "demo", "demo://readme")
        self.assertEqual(done.code, 0, done)
        text, binary = done.out.splitlines()
        self.assertEqual(text, "hello")
        self.assertIn("image/png", binary)
        self.assertIn("mcpx read --json", binary)
        self.assertEqual(
            self.fake.last_body("/v1/read"), {"server": "demo", "uri": "demo://readme"}
        )
        answer = (await self.mcpx("read", "demo", "demo://readme", "--json")).json()
        self.assertEqual(answer["contents"][1]["blob"], "AAAA")

    async def test_unknown_server(self) -> None:
        """An unknown server exits 3 and says which."""
        done = await self.mcpx("read", "nope", "demo://readme")
        self.assertEqual(done.code, 3, done)
        self.assertIn("nope", done.err)


class RealContentTests(RealDaemonCase):
    async def test_demo_prompt_and_resource(self) -> None:
        """The demo server's C{greet} prompt and C{demo://readme} resource, via a real daemon."""
        await self.start_daemon()
        done = await self.ok("prompt", "demo", "greet", "name=Ada")
        self.assertIn("user: Please write a short, friendly greeting for Ada.", done.out)
        done = await self.ok("read", "demo", "demo://readme")
        self.assertIn("demo://readme", done.out)
        answer = (await self.ok("read", "demo", "demo://readme", "--json")).json()
        self.assertEqual(answer["contents"][0]["uri"], "demo://readme")

    async def test_prompts_and_resources_lists(self) -> None:
        """C{mcpx prompts} and C{mcpx resources} list what every server offers, a server
        that cannot start named on stderr without hiding the others; one server's alone
        with its name; an unknown server is exit 3."""
        await self.start_daemon(
            {"demo": [sys.executable, "-m", "mcpx.demo"], "broken": ["/nonexistent/mcp"]}
        )
        done = await self.mcpx("prompts")
        self.assertEqual(done.code, 0, done)
        header, row = done.out.splitlines()
        self.assertEqual(header.split(), ["SERVER", "PROMPT", "ARGUMENTS", "DESCRIPTION"])
        self.assertEqual(row.split()[:3], ["demo", "greet", "name"])
        self.assertIn("the prompts of broken are missing", done.err)
        answer = (await self.mcpx("prompts", "--json")).json()
        self.assertEqual([(p["server"], p["name"]) for p in answer["prompts"]], [("demo", "greet")])
        self.assertEqual([e["server"] for e in answer["errors"]], ["broken"])

        done = await self.ok("resources", "demo")
        header, row = done.out.splitlines()
        self.assertEqual(header.split()[:3], ["SERVER", "URI", "NAME"])
        self.assertEqual(row.split()[:2], ["demo", "demo://readme"])
        self.assertIn("text/markdown", row)
        answer = (await self.ok("resources", "demo", "--json")).json()
        self.assertEqual(answer["resources"][0]["server"], "demo")
        self.assertEqual(answer["templates"], [])

        done = await self.mcpx("resources", "nope")
        self.assertEqual(done.code, 3, done)
        self.assertIn("`mcpx servers`", done.err)
        done = await self.mcpx("prompts", "broken")
        self.assertNotEqual(done.code, 0, done)
