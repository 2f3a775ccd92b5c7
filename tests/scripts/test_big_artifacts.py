"""
Big artifacts on a real daemon: a host reads a 5 MB file back through the
C{resource_link} C{mcpx_exec} returned; a file over the message cap is refused by
C{resources/read} with an error that says how to read it, and C{mcpx artifacts read}
gets it, or any range of it, in C{exec.artifactChunk} pieces.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError
from twisted.trial.unittest import TestCase

from tests.questions.support import MODERN, Daemon, demo_server, in_thread
from tests.questions.test_end_to_end import wire

#: 5,000,000 bytes, each position telling where it is.
FIVE_MB = "".join(f"{i:09d}\n" for i in range(500_000))

WRITE_FIVE_MB = (
    'open("/out/big.txt", "w").write("".join(f"{i:09d}\\n" for i in range(500000)))\n"written"'
)


def resource_links(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [block for block in result["content"] if block["type"] == "resource_link"]


class BigArtifactTests(TestCase):
    timeout = 120

    async def test_host_reads_five_mb_back_through_its_resource_link(self) -> None:
        daemon = await Daemon(self, {"demo": demo_server()}).start()

        async def conversation(mode: str) -> tuple[dict[str, Any], str]:
            async with Client(daemon.mcp_url, mode=mode, cache=None) as client:
                result = wire(await client.call_tool("mcpx_exec", {"program": WRITE_FIVE_MB}))
                [link] = resource_links(result)
                read = wire(await client.read_resource(link["uri"]))
                [content] = read["contents"]
                return link, content["text"]

        for mode in ("legacy", MODERN):
            link, text = await in_thread(functools.partial(conversation, mode))
            self.assertEqual(link["size"], 5_000_000, mode)
            self.assertEqual(link["mimeType"], "text/plain", mode)
            self.assertTrue(link["uri"].endswith("/big.txt"), mode)
            self.assertEqual(len(text), len(FIVE_MB), mode)
            self.assertEqual(text, FIVE_MB, mode)

    async def test_over_the_cap_refused_then_read_in_ranges(self) -> None:
        daemon = await Daemon(
            self,
            {"demo": demo_server()},
            settings={
                "MCPX_TRANSPORT_MAX_MESSAGE_SIZE": str(1024 * 1024),
                "MCPX_EXEC_ARTIFACT_CHUNK": str(256 * 1024),
            },
        ).start()

        async def conversation() -> str:
            async with Client(daemon.mcp_url, mode=MODERN, cache=None) as client:
                result = wire(await client.call_tool("mcpx_exec", {"program": WRITE_FIVE_MB}))
                [link] = resource_links(result)
                try:
                    await client.read_resource(link["uri"])
                except MCPError as e:
                    return str(e)
                return "read whole"

        refusal = await in_thread(conversation)
        self.assertIn("5000000 bytes", refusal)
        self.assertIn("transport.maxMessageSize", refusal)
        self.assertIn("mcpx artifacts read", refusal)

        program = Path(self.mktemp())
        program.write_text(WRITE_FIVE_MB)
        ran = await daemon.mcpx("exec", str(program.resolve()))
        self.assertEqual(ran.code, 0, ran)
        [uri] = [line.split()[0] for line in ran.err.splitlines() if line.endswith(" bytes")]

        whole = Path(self.mktemp()).resolve()
        whole.parent.mkdir(parents=True, exist_ok=True)
        read = await daemon.mcpx("artifacts", "read", uri, "--output", str(whole))
        self.assertEqual(read.code, 0, read)
        self.assertEqual(whole.read_text(), FIVE_MB)

        # Across a chunk boundary: bytes 262,140 to 262,159 are lines 26,214 and 26,215.
        piece = await daemon.mcpx("artifacts", "read", uri, "--offset", "262140", "--length", "20")
        self.assertEqual(piece.code, 0, piece)
        self.assertEqual(piece.out, "000026214\n000026215\n")

        ranged = await daemon.mcpx("artifacts", "read", uri, "--offset", "4999990", "--json")
        answer = ranged.json()
        self.assertEqual(
            (answer["offset"], answer["length"], answer["size"], "next" in answer),
            (4_999_990, 10, 5_000_000, False),
        )
        first = (await daemon.mcpx("artifacts", "read", uri, "--json")).json()
        self.assertEqual((first["length"], first["next"]), (256 * 1024, 256 * 1024))
