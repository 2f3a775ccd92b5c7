"""
Tests for L{mcpx.ops.uris}: every upstream URI round-trips through its mcpx:// name,
and a template's mcpx:// form, filled by the client, leads back to the URI the upstream
would have built itself.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops import uris

#: URIs that break naive schemes: separators of their own, ? and #, spaces, non-ASCII,
#: escapes of their own, absolute and relative paths, dot segments, the template mark.
TRICKY = (
    "file:///home/user/notes.txt",
    "/abs/doc",
    "abs/doc",
    "",
    "/",
    "test://static/resource/1",
    "https://example.com/a?b=c&d=e#frag",
    "file:///a b/c d.txt",
    "file:///r%C3%A9sum%C3%A9.pdf",
    "file:///résumé.pdf",
    "note://日本語/ページ",
    "weird://x/%2F/%25/%",
    "a/../b/./c",
    "..",
    "!not-a-template",
    "{not}/{a}/{template}",
    "mcpx://nested/inner",
    "data:text/plain;base64,SGVsbG8=",
    "urn:isbn:0451450523",
    "with\ttab\nand newline",
    "emoji://😀/🚀?q=✓",
    "//double//slashes//",
)


class RoundTripTests(SynchronousTestCase):
    def test_every_uri_round_trips(self) -> None:
        """Whatever the upstream URI, reading its mcpx:// name gives it back exactly."""
        for server in ("files", "my-server", "a_b"):
            for uri in TRICKY:
                name = uris.to_mcpx(server, uri)
                parsed = uris.parse(name)
                self.assertEqual((parsed.server, parsed.upstream()), (server, uri), name)
                self.assertFalse(parsed.from_template)

    def test_names_are_one_clean_uri(self) -> None:
        """
        The name is one path under mcpx://<server>/: no query, no fragment, no spaces,
        ASCII only, and no dot segments a URI library would remove.
        """
        for uri in TRICKY:
            name = uris.to_mcpx("files", uri)
            self.assertTrue(name.startswith("mcpx://files/"), name)
            rest = name[len("mcpx://files/") :]
            for forbidden in ("?", "#", " ", "\t", "\n"):
                self.assertNotIn(forbidden, rest, name)
            self.assertTrue(rest.isascii(), name)
            self.assertFalse(rest.startswith("/"), name)
            self.assertFalse(rest.startswith(uris.TEMPLATE_MARK), name)
            self.assertNotIn("..", rest.split("/"), name)
            self.assertNotIn(".", rest.split("/"), name)

    def test_readable(self) -> None:
        """Common URIs stay readable: slashes and colons are kept."""
        self.assertEqual(
            uris.to_mcpx("files", "file:///home/user/a.txt"), "mcpx://files/file:///home/user/a.txt"
        )
        self.assertEqual(uris.to_mcpx("docs", "/abs/doc"), "mcpx://docs/%2Fabs/doc")

    def test_distinct_uris_get_distinct_names(self) -> None:
        """Two different upstream URIs never share a name."""
        names = {uris.to_mcpx("files", uri) for uri in TRICKY}
        self.assertEqual(len(names), len(set(TRICKY)))

    def test_liberal_reading(self) -> None:
        """A client that left characters unescaped, or upper-cased the scheme, is understood."""
        self.assertEqual(uris.parse("MCPX://files/file:///a b.txt").upstream(), "file:///a b.txt")
        self.assertEqual(uris.parse("mcpx://files").upstream(), "")

    def test_not_mcpx(self) -> None:
        """Other URIs, and mcpx:// without a server, are refused."""
        for uri in ("file:///a", "mcpx:/files/a", "mcpx:///a", ""):
            self.assertRaises(uris.NotAnMcpxUri, uris.parse, uri)
        self.assertFalse(uris.is_mcpx("file:///a"))
        self.assertTrue(uris.is_mcpx("mcpx://files/a"))


def expand(template: str, values: dict[str, str]) -> str:
    """
    A small RFC 6570 expander for the operators the tests use: simple, C{+}, C{?}, C{/}.
    """
    out = []
    position = 0
    while True:
        start = template.find("{", position)
        if start < 0:
            out.append(template[position:])
            return "".join(out)
        end = template.index("}", start)
        out.append(template[position:start])
        expression = template[start + 1 : end]
        position = end + 1
        operator = expression[0] if expression[0] in "+?/" else ""
        names = expression[len(operator) :].split(",")
        if operator == "+":
            out.append(
                ",".join(quote(values[n], safe=":/?#[]@!$&'()*+,;=%") for n in names if n in values)
            )
        elif operator == "?":
            pairs = [f"{n}={quote(values[n], safe='')}" for n in names if n in values]
            out.append("?" + "&".join(pairs) if pairs else "")
        elif operator == "/":
            out.append("".join("/" + quote(values[n], safe="") for n in names if n in values))
        else:
            out.append(",".join(quote(values[n], safe="") for n in names if n in values))


TEMPLATES = (
    ("file:///{+path}{?rev}", {"path": "a b/c.txt", "rev": "1 2"}),
    ("file:///{+path}{?rev}", {"path": "résumé.pdf"}),
    ("/abs/{name}", {"name": "x/y?z"}),
    ("{+uri}", {"uri": "/abs/doc"}),
    ("note://{book}/page {n}", {"book": "日本", "n": "3"}),
    ("repo://{owner}/{repo}/issues{/number}", {"owner": "me", "repo": "x", "number": "7"}),
    ("db://q?sql={query}#{frag}", {"query": "select 1", "frag": "top"}),
    ("weird://%41/{x}", {"x": "%41"}),
)


class TemplateTests(SynchronousTestCase):
    def test_expressions_survive(self) -> None:
        """The mcpx:// form of a template keeps its expressions for the client to fill."""
        self.assertEqual(
            uris.template_to_mcpx("files", "file:///{+path}{?rev}"),
            "mcpx://files/!file:///{+path}{?rev}",
        )
        self.assertEqual(uris.template_to_mcpx("docs", "/abs/{name}"), "mcpx://docs/!%2Fabs/{name}")

    def test_filled_templates_lead_to_the_upstream_uri(self) -> None:
        """
        Filling the mcpx:// form and reading it back gives exactly the URI the upstream
        would have built by filling its own template with the same values.
        """
        for template, values in TEMPLATES:
            filled = expand(uris.template_to_mcpx("files", template), values)
            parsed = uris.parse(filled)
            self.assertTrue(parsed.from_template, filled)
            self.assertEqual(parsed.server, "files")
            self.assertEqual(
                parsed.upstream(["other://{x}", template]), expand(template, values), filled
            )

    def test_unknown_template(self) -> None:
        """A filled template that none of the server's templates produces names nothing."""
        parsed = uris.parse("mcpx://files/!nothing://here")
        self.assertIsNone(parsed.upstream(["file:///{+path}"]))

    def test_hostile_template_answered(self) -> None:
        """
        A template of many expressions (an upstream's) is matched in linear time: a filled
        URI it does not produce is refused at once, where backtracking over its twelve
        C{(.*?)}s would take hours; one it does produce is read back.
        """
        template = "x://" + "/".join(f"{{v{i}}}" for i in range(12)) + ".json"
        self.assertIsNone(uris.parse("mcpx://s/!x://" + "/" * 5000).upstream([template]))
        filled = uris.parse("mcpx://s/!x://" + "/".join("a" * 12) + ".json")
        self.assertEqual(filled.upstream([template]), "x://" + "/".join("a" * 12) + ".json")

    def test_costly_template_not_tried(self) -> None:
        """
        Taking a filled URI's expansions out costs its length times the template's
        program times its expressions: a template of 1,000 expressions against a filled
        URI of 30,000 characters (35 s of RE2's work) is not tried, so the URI names
        nothing, within a bound of CPU time; a template of two reads the same URI back.
        """
        many = "x://" + "".join(f"{{v{i}}}/" for i in range(1_000))
        filled = "x://" + "a" * 10 * 1_000 + "b/" * 10_000
        parsed = uris.parse("mcpx://s/!" + filled)
        started = time.thread_time()
        self.assertIsNone(parsed.upstream([many]))
        self.assertLess(time.thread_time() - started, 2.0)
        self.assertEqual(parsed.upstream([many, "x://{+a}b/{+rest}"]), filled)

    def test_template_itself(self) -> None:
        """The mcpx:// form of a template is recognised as that template (for completions)."""
        parsed = uris.parse(uris.template_to_mcpx("files", "file:///{+path}{?rev}"))
        self.assertEqual(
            parsed.template(["other://{x}", "file:///{+path}{?rev}"]), "file:///{+path}{?rev}"
        )
        self.assertIsNone(uris.parse("mcpx://files/file:///a").template(["file:///{+path}"]))


class AppResourceTests(SynchronousTestCase):
    """An MCP App's ui:// resource keeps its scheme under the gateway (hosts render only ui://)."""

    def test_app_resources_round_trip_under_ui_mcpx(self) -> None:
        """C{ui://X} of server C{s} is C{ui://mcpx/<s>/X}, one clean path read back exactly."""
        self.assertEqual(
            uris.to_mcpx("monitor", "ui://system-monitor/mcp-app.html"),
            "ui://mcpx/monitor/system-monitor/mcp-app.html",
        )
        for server in ("files", "my server", "a_b"):
            for tail in TRICKY:
                uri = "ui://" + tail
                name = uris.to_mcpx(server, uri)
                self.assertTrue(name.startswith(uris.UI_PREFIX), name)
                self.assertTrue(uris.is_mcpx(name), name)
                rest = name[len(uris.UI_PREFIX) :].split("/", 1)[1]
                for forbidden in ("?", "#", " ", "\t", "\n"):
                    self.assertNotIn(forbidden, rest, name)
                self.assertTrue(rest.isascii(), name)
                parsed = uris.parse(name)
                self.assertEqual((parsed.server, parsed.upstream()), (server, uri), name)

    def test_resource_uri_renamed_in_meta(self) -> None:
        """
        C{_meta.ui.resourceUri} and the older C{ui/resourceUri} get the gateway's name;
        C{csp}, C{permissions} and everything else stay as the server gave them.
        """
        ui = {
            "resourceUri": "ui://app/a.html",
            "csp": {"connectDomains": ["https://api.example.com"]},
            "permissions": {"camera": {}},
            "visibility": ["model", "app"],
        }
        meta: dict[str, Any] = {"ui": ui, "ui/resourceUri": "ui://app/a.html", "other": 1}
        renamed = uris.ui_meta_renamed("s", meta)
        self.assertEqual(
            renamed,
            {
                "ui": {**ui, "resourceUri": "ui://mcpx/s/app/a.html"},
                "ui/resourceUri": "ui://mcpx/s/app/a.html",
                "other": 1,
            },
        )
        self.assertEqual(meta["ui"]["resourceUri"], "ui://app/a.html")
