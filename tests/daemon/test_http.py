"""The daemon's HTTP routes, driven in memory through StubTreq."""

from __future__ import annotations

import json
from typing import Any

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx._version import __version__
from tests.daemon.fake_pool import daemon_http


class HealthTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.http = daemon_http(clock=self.clock, pid=4242)
        # StubTreq grows its request methods at run time, so mypy cannot see them.
        self.stub: Any = StubTreq(self.http.resource())

    def get_json(self, url: str) -> tuple[int, Any, bytes]:
        response = self.successResultOf(self.stub.get(url))
        body = self.successResultOf(response.content())
        ctype = response.headers.getRawHeaders(b"content-type", [b""])[0]
        return response.code, json.loads(body), ctype

    def test_health_reports_version_pid_and_uptime(self) -> None:
        """GET /health answers JSON with the version, the pid and seconds since start."""
        self.clock.advance(12.5)
        code, body, ctype = self.get_json("http://mcpx/health")
        self.assertEqual(code, 200)
        self.assertEqual(ctype, b"application/json")
        self.assertEqual(body["version"], __version__)
        self.assertEqual(body["pid"], 4242)
        self.assertEqual(body["uptime"], 12.5)
        self.assertEqual(body["status"], "ok")

    def test_unknown_path_is_json_404(self) -> None:
        """A path nothing serves gets a JSON 404 with a stable code, not an HTML page."""
        code, body, ctype = self.get_json("http://mcpx/nowhere")
        self.assertEqual(code, 404)
        self.assertEqual(ctype, b"application/json")
        self.assertEqual(body["error"]["code"], "not_found")
        self.assertIn("/nowhere", body["error"]["message"])

    def test_wrong_method_is_json_405(self) -> None:
        """POST to a GET-only route is refused with 405 and a JSON body."""
        response = self.successResultOf(self.stub.post("http://mcpx/health", data=b"{}"))
        self.assertEqual(response.code, 405)
        body = json.loads(self.successResultOf(response.content()))
        self.assertEqual(body["error"]["code"], "method_not_allowed")

    def test_doubled_or_escaped_slash_is_json_404(self) -> None:
        """
        A path with a doubled slash, or an escaped slash in a name, is a JSON 404, not a
        redirect without a Location.
        """
        for path in ("/v1//servers", "/v1/tools/files%2F/read_file"):
            code, body, ctype = self.get_json("http://mcpx" + path)
            self.assertEqual((code, ctype), (404, b"application/json"), path)
            self.assertEqual(body["error"]["code"], "not_found")

    def test_path_that_is_not_utf8_is_json_400(self) -> None:
        """
        A path that is not UTF-8 once percent-decoded is a JSON 400 invalid_url, not a
        text/html page, and logs no error.
        """
        for path in ("/v1/tools/%FF/x", "/v1/tools/%ED%A0%80/x", "/%C3"):
            code, body, ctype = self.get_json("http://mcpx" + path)
            self.assertEqual((code, ctype), (400, b"application/json"), path)
            self.assertEqual(body["error"]["code"], "invalid_url")
        self.assertEqual(self.flushLoggedErrors(), [])
        code, body, _ = self.get_json("http://mcpx/v1/tools/caf%C3%A9/x")
        self.assertNotEqual(code, 400)


class MethodNotAllowedTests(SynchronousTestCase):
    def test_405_names_the_allowed_methods(self) -> None:
        """A 405 carries the Allow header with the route's methods."""
        stub: Any = StubTreq(daemon_http(clock=Clock(), pid=1).resource())
        for method, url, allowed in (
            ("POST", "http://mcpx/health", "GET, HEAD"),
            ("DELETE", "http://mcpx/v1/call", "POST"),
        ):
            response = self.successResultOf(stub.request(method, url, data=b"{}"))
            self.assertEqual(response.code, 405)
            self.assertEqual(response.headers.getRawHeaders(b"allow"), [allowed.encode()])
