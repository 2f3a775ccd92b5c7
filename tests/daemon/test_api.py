"""The C{/v1} routes, driven in memory through StubTreq over a fake pool."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.caller import subject_identity
from mcpx.ops.schemas import ERROR_SCHEMA
from mcpx.ops.table import BY_NAME, OPS
from mcpx.pool import CallTimedOut, ServerState, TooManyInstances
from mcpx.settings.errors import SettingsError
from mcpx.settings.render import render_json
from mcpx.spec.matrix import protocol_json
from mcpx.tasks.store import TaskStore, TooManyTasks, TooManyTasksForClient
from mcpx.tasks.task import TaskStatus
from mcpx.wire.errors import RpcError
from tests.daemon.fake_pool import (
    Answer,
    FakePool,
    Harness,
    default_servers,
    default_settings,
    servers_config,
    unavailable,
)
from tests.support.logs import observe_log

#: C{pool.listWait} as the harness's default settings have it.
LIST_WAIT = default_settings().duration("pool.listWait")

#: One request per op that answers JSON, to check every generated route against its schema.
SAMPLES: dict[str, tuple[str, str, Any]] = {
    "list_servers": ("GET", "/v1/servers", None),
    "list_tasks": ("GET", "/v1/tasks", None),
    "list_tools": ("GET", "/v1/tools?search=file", None),
    "describe_tool": ("GET", "/v1/tools/files/read_file", None),
    "call_tool": ("POST", "/v1/call", {"server": "files", "tool": "read_file"}),
    "list_prompts": ("GET", "/v1/prompts", None),
    "list_resources": ("GET", "/v1/resources?server=files", None),
    "get_prompt": ("POST", "/v1/prompt", {"server": "files", "name": "review"}),
    "read_resource": ("POST", "/v1/read", {"server": "files", "uri": "file:///a.txt"}),
    "complete": (
        "POST",
        "/v1/complete",
        {
            "server": "search",
            "ref": {"type": "ref/prompt", "name": "q"},
            "argument": {"name": "q", "value": "py"},
        },
    ),
    "restart_server": ("POST", "/v1/servers/files/restart", None),
    "list_calls": ("GET", "/v1/calls?server=files", None),
    "reload": ("POST", "/v1/reload", None),
    "get_settings": ("GET", "/v1/settings", None),
    "get_protocol": ("GET", "/v1/protocol", None),
    "health": ("GET", "/health", None),
    "openapi": ("GET", "/openapi.json", None),
}


def conforms(case: SynchronousTestCase, schema: Any, body: Any) -> None:
    errors = sorted(Draft202012Validator(schema).iter_errors(body), key=str)
    case.assertEqual([e.message for e in errors], [], json.dumps(body)[:500])


class EveryRouteTests(SynchronousTestCase):
    def test_every_route_answers_its_schema(self) -> None:
        """Each generated JSON route answers 200 with a body its op's output schema accepts."""
        harness = Harness()
        # The question routes need a broker and a question: tests.daemon.test_questions_ops.
        questions = {"list_questions", "get_question", "answer_question"}
        # The task routes need a task: tests.daemon.test_tasks_api.
        # The script routes need worker processes: tests.scripts and
        # tests.cli.test_exec_command run them against a real daemon.
        scripts = {"exec", "list_artifacts", "read_artifact"}
        # The OAuth routes need an authorization server: tests.auth.test_ops.
        auth = {"auth_status", "auth_begin", "auth_finish", "auth_logout"}
        unsampled = {"get_task", "cancel_task", "events", *questions, *scripts, *auth}
        self.assertEqual(set(SAMPLES), {op.name for op in OPS} - unsampled)
        for name, (method, path, body) in SAMPLES.items():
            answer = harness.send(method, path, body)
            self.assertEqual(answer.code, 200, (name, answer.body))
            self.assertEqual(answer.header("content-type"), "application/json")
            conforms(self, BY_NAME[name].output_schema, answer.json)

    def test_schema_check_can_fail(self) -> None:
        """The output check above would notice a route answering the wrong shape."""
        wrong = {"servers": [{"name": "files"}]}
        errors = list(
            Draft202012Validator(BY_NAME["list_servers"].output_schema).iter_errors(wrong)
        )
        self.assertNotEqual(errors, [])


class ReadTests(SynchronousTestCase):
    """What the listing and describing routes answer."""

    def setUp(self) -> None:
        self.harness = Harness()

    def test_servers(self) -> None:
        """GET /v1/servers lists every configured server with its state."""
        body = self.harness.get("/v1/servers").json
        self.assertEqual([s["name"] for s in body["servers"]], ["files", "search"])
        self.assertEqual(body["servers"][0]["state"], "ready")

    def test_all_tools(self) -> None:
        """GET /v1/tools lists every server's tools with title and description."""
        tools = self.harness.get("/v1/tools").json["tools"]
        self.assertEqual(
            [(t["server"], t["name"]) for t in tools],
            [("files", "read_file"), ("files", "write_file"), ("search", "web_search")],
        )
        self.assertEqual(tools[0]["title"], "Read a file")
        # A title given only in the annotations counts.
        self.assertEqual(tools[2]["title"], "Web search")
        self.assertIsNone(tools[1]["title"])

    def test_caller_lists(self) -> None:
        """The catalogue is asked for on behalf of the caller (client-scoped servers)."""
        self.harness.get("/v1/tools", headers={"Mcpx-Client": "ide"})
        self.harness.get("/v1/tools/files/read_file", headers={"Mcpx-Client": "ide"})
        self.assertEqual(
            self.harness.pool.listed,
            [("tools", "files", "ide"), ("tools", "search", "ide"), ("tools", "files", "ide")],
        )

    def test_one_server(self) -> None:
        """server= keeps one server's tools."""
        tools = self.harness.get("/v1/tools?server=search").json["tools"]
        self.assertEqual([t["name"] for t in tools], ["web_search"])

    def test_search(self) -> None:
        """search= keeps tools whose name, title or description has every word, in any case."""
        found = self.harness.get("/v1/tools?search=TEXT%20file").json["tools"]
        self.assertEqual([t["name"] for t in found], ["read_file", "write_file"])
        found = self.harness.get("/v1/tools?search=web%20pages").json["tools"]
        self.assertEqual([t["name"] for t in found], ["web_search"])
        self.assertEqual(self.harness.get("/v1/tools?search=nothing").json["tools"], [])

    def test_unreachable_server_listed_apart(self) -> None:
        """A server that cannot start does not hide the others' tools; it is named in errors."""
        self.harness.pool.servers["search"].failure = unavailable("search")
        body = self.harness.get("/v1/tools").json
        self.assertEqual([t["name"] for t in body["tools"]], ["read_file", "write_file"])
        self.assertEqual(body["errors"][0]["server"], "search")
        self.assertEqual(body["errors"][0]["error"]["code"], "server_unavailable")
        conforms(self, BY_NAME["list_tools"].output_schema, body)

    def test_hung_server_listed_apart_within_the_wait(self) -> None:
        """A server hung at start-up holds an all-server listing only for pool.listWait:
        then the others' tools are answered and it is named as still starting."""
        self.harness.pool.servers["search"].hung = Deferred()
        self.harness.pool.servers["search"].cached = False
        started = self.harness.start("GET", "/v1/tools")
        self.harness.stub.flush()
        self.assertNoResult(started)
        self.harness.clock.advance(LIST_WAIT - 0.1)
        self.harness.stub.flush()
        self.assertNoResult(started)
        self.harness.clock.advance(0.1)
        body = json.loads(self.harness.finish(started).body)
        self.assertEqual([t["name"] for t in body["tools"]], ["read_file", "write_file"])
        self.assertEqual(body["errors"][0]["server"], "search")
        self.assertEqual(body["errors"][0]["error"]["code"], "server_starting")
        self.assertIn("pool.listWait", body["errors"][0]["error"]["message"])
        conforms(self, BY_NAME["list_tools"].output_schema, body)
        # Its listing goes on: once it answers, the next listing has its tools.
        self.harness.pool.servers["search"].hung.callback(None)
        self.harness.pool.servers["search"].hung = None
        tools = self.harness.get("/v1/tools").json["tools"]
        self.assertIn("web_search", [t["name"] for t in tools])

    def test_hung_server_listed_from_its_cache(self) -> None:
        """A hung server whose instance has its catalogue cached is listed from it."""
        self.harness.pool.servers["search"].hung = Deferred()
        started = self.harness.start("GET", "/v1/tools?search=web")
        self.harness.clock.advance(LIST_WAIT)
        body = json.loads(self.harness.finish(started).body)
        self.assertEqual([t["name"] for t in body["tools"]], ["web_search"])
        self.assertNotIn("errors", body)

    def test_hung_server_resources(self) -> None:
        """GET /v1/resources is bounded the same way."""
        self.harness.pool.servers["search"].hung = Deferred()
        self.harness.pool.servers["search"].cached = False
        started = self.harness.start("GET", "/v1/resources")
        self.harness.clock.advance(LIST_WAIT)
        body = json.loads(self.harness.finish(started).body)
        self.assertEqual(body["errors"][0]["error"]["code"], "server_starting")

    def test_unknown_server_tools(self) -> None:
        """Listing one unknown server's tools is a 404."""
        answer = self.harness.get("/v1/tools?server=nope")
        self.assertEqual(answer.code, 404)
        self.assertEqual(answer.json["error"]["code"], "unknown_server")

    def test_describe(self) -> None:
        """GET /v1/tools/S/T gives the full tool, input schema included."""
        body = self.harness.get("/v1/tools/files/read_file").json
        self.assertEqual(body["server"], "files")
        self.assertEqual(body["tool"]["inputSchema"]["properties"], {"path": {"type": "string"}})

    def test_describe_unknown_tool(self) -> None:
        """An unknown tool is a 404 suggesting the closest names."""
        answer = self.harness.get("/v1/tools/files/read_fiel")
        self.assertEqual(answer.code, 404)
        self.assertEqual(answer.json["error"]["code"], "unknown_tool")
        self.assertIn("'read_file'", answer.json["error"]["message"])

    def test_settings(self) -> None:
        """GET /v1/settings is what `mcpx settings --json` prints."""
        body = self.harness.get("/v1/settings").json
        http = self.harness.http
        assert http.host.settings is not None and http.host.servers is not None
        expected = render_json(http.host.settings, http.host.servers, state_dir="/run/mcpx")
        self.assertEqual(body, json.loads(json.dumps(expected)))

    def test_protocol(self) -> None:
        """GET /v1/protocol is the matrix with the policy in force."""
        settings = default_settings(**{"spec.first": "2025-06-18"})
        body = Harness(settings=settings).get("/v1/protocol").json
        self.assertEqual(body, json.loads(json.dumps(protocol_json(settings.policy()))))
        self.assertEqual(body["spec"]["first"], "2025-06-18")

    def test_health(self) -> None:
        """GET /health reports the pid and the uptime on the clock."""
        self.harness.clock.advance(2.5)
        body = self.harness.get("/health").json
        self.assertEqual((body["pid"], body["uptime"]), (4242, 2.5))


class ActionTests(SynchronousTestCase):
    """What the routes that do something send to the pool."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.pool = self.harness.pool

    def test_call(self) -> None:
        """POST /v1/call calls the tool with the arguments, the caller and the timeout."""
        body = {"server": "files", "tool": "read_file", "arguments": {"path": "a"}, "timeout": 3}
        answer = self.harness.post("/v1/call", body, headers={"Mcpx-Client": "claude"})
        self.assertEqual(answer.code, 200)
        self.assertEqual(answer.json["content"][0]["text"], "read_file:[('path', 'a')]")
        self.assertEqual(self.pool.calls, [("files", "read_file", {"path": "a"}, "claude", 3)])

    def test_default_client(self) -> None:
        """Without Mcpx-Client the caller is cli."""
        self.harness.post("/v1/call", {"server": "files", "tool": "read_file"})
        self.assertEqual(self.pool.calls[0][3], "cli")

    def test_prompt(self) -> None:
        """POST /v1/prompt sends prompts/get with the arguments."""
        body = {"server": "files", "name": "review", "arguments": {"path": "a"}}
        answer = self.harness.post("/v1/prompt", body, headers={"Mcpx-Client": "ide"})
        self.assertEqual(answer.json["description"], "Review a file")
        self.assertEqual(
            self.pool.requests,
            [("files", "prompts/get", {"name": "review", "arguments": {"path": "a"}}, "ide")],
        )

    def test_read(self) -> None:
        """POST /v1/read sends resources/read."""
        answer = self.harness.post("/v1/read", {"server": "files", "uri": "file:///a.txt"})
        self.assertEqual(answer.json["contents"][0]["text"], "a")
        self.assertEqual(
            self.pool.requests, [("files", "resources/read", {"uri": "file:///a.txt"}, "cli")]
        )

    def test_restart(self) -> None:
        """POST /v1/servers/N/restart restarts it and shows its state after."""
        answer = self.harness.post("/v1/servers/files/restart")
        self.assertEqual(self.pool.restarted, ["files"])
        self.assertEqual(answer.json["server"]["name"], "files")
        self.assertEqual(answer.json["server"]["state"], "configured")

    def test_restart_unknown(self) -> None:
        """Restarting an unknown server is a 404."""
        answer = self.harness.post("/v1/servers/nope/restart")
        self.assertEqual((answer.code, answer.json["error"]["code"]), (404, "unknown_server"))

    def test_reload(self) -> None:
        """POST /v1/reload reads the config anew, hands it to the pool, and reports."""
        new = servers_config("files", "git")
        self.harness.read = new
        answer = self.harness.post("/v1/reload")
        self.assertEqual(
            answer.json,
            {
                "removed": ["search"],
                "added": ["git"],
                "changed": [],
                "unchanged": ["files"],
                "settings": {"applied": [], "restart_needed": []},
            },
        )
        self.assertEqual(self.pool.reloaded, [new])
        self.assertIs(self.harness.http.host.servers, new)

    def test_reload_bad_config(self) -> None:
        """A config file that does not read is a 400 saying what is wrong; nothing changes."""

        def broken() -> Any:
            raise SettingsError("config.json: server 'x': no command or url")

        self.harness.http.host.reloads.read = broken
        answer = self.harness.post("/v1/reload")
        self.assertEqual((answer.code, answer.json["error"]["code"]), (400, "invalid_config"))
        self.assertIn("no command or url", answer.json["error"]["message"])
        self.assertEqual(self.pool.reloaded, [])


class CompleteTests(SynchronousTestCase):
    """Completion goes to servers that declare it; otherwise the cache answers."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.pool = self.harness.pool

    def complete(self, body: dict[str, Any]) -> Answer:
        answer = self.harness.post("/v1/complete", body)
        if answer.code == 200:
            conforms(self, BY_NAME["complete"].output_schema, answer.json)
        return answer

    def test_forwarded(self) -> None:
        """A server that declared completions gets completion/complete, context included."""
        ref = {"type": "ref/prompt", "name": "q"}
        body = {
            "server": "search",
            "ref": ref,
            "argument": {"name": "lang", "value": "py"},
            "context": {"arguments": {"site": "docs"}},
        }
        answer = self.complete(body)
        self.assertEqual(answer.json["source"], "upstream")
        self.assertEqual(answer.json["completion"]["values"], ["python", "pytest"])
        self.assertNotIn("reason", answer.json)
        self.assertEqual(
            self.pool.requests,
            [
                (
                    "search",
                    "completion/complete",
                    {
                        "ref": ref,
                        "argument": {"name": "lang", "value": "py"},
                        "context": {"arguments": {"site": "docs"}},
                    },
                    "cli",
                )
            ],
        )

    def test_prompt_from_cache(self) -> None:
        """Without completions, a prompt's argument names come from the cache, with why."""
        body = {
            "server": "files",
            "ref": {"type": "ref/prompt", "name": "review"},
            "argument": {"name": "style", "value": ""},
        }
        answer = self.complete(body)
        self.assertEqual(answer.json["source"], "cache")
        self.assertEqual(answer.json["completion"]["values"], ["path", "style"])
        self.assertIn("did not declare completions", answer.json["reason"])
        self.assertEqual(self.pool.requests, [])

    def test_template_from_cache(self) -> None:
        """Without completions, a resource template's variables come from the cache."""
        body = {
            "server": "files",
            "ref": {"type": "ref/resource", "uri": "file:///{+path}{?rev}"},
            "argument": {"name": "path", "value": "sr"},
        }
        answer = self.complete(body)
        self.assertEqual(answer.json["source"], "cache")
        self.assertEqual(answer.json["completion"]["values"], ["path", "rev"])

    def test_unknown_prompt(self) -> None:
        """An unknown prompt is a 404 suggesting the closest."""
        body = {
            "server": "files",
            "ref": {"type": "ref/prompt", "name": "reveiw"},
            "argument": {"name": "path", "value": ""},
        }
        answer = self.complete(body)
        self.assertEqual((answer.code, answer.json["error"]["code"]), (404, "unknown_prompt"))
        self.assertIn("'review'", answer.json["error"]["message"])

    def test_unknown_argument(self) -> None:
        """An argument the prompt does not have is a 400 naming argument.name."""
        body = {
            "server": "files",
            "ref": {"type": "ref/prompt", "name": "review"},
            "argument": {"name": "colour", "value": ""},
        }
        answer = self.complete(body)
        self.assertEqual(answer.code, 400)
        self.assertEqual(answer.json["error"]["field"], "argument.name")
        self.assertIn("path, style", answer.json["error"]["message"])


class ErrorTests(SynchronousTestCase):
    """Errors: a stable code, a message saying what to do, the right status."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.pool = self.harness.pool

    def error(self, answer: Answer, status: int, code: str) -> dict[str, Any]:
        self.assertEqual(answer.code, status, answer.body)
        self.assertEqual(answer.header("content-type"), "application/json")
        conforms(self, ERROR_SCHEMA, answer.json)
        self.assertEqual(answer.json["error"]["code"], code)
        found: dict[str, Any] = answer.json["error"]
        return found

    def test_missing_field(self) -> None:
        """A body without a required field is a 400 naming it; nothing is called."""
        error = self.error(self.harness.post("/v1/call", {"server": "files"}), 400, "invalid_input")
        self.assertEqual(error["field"], "tool")
        self.assertIn("tool", error["message"])
        self.assertEqual(self.pool.calls, [])

    def test_bad_type(self) -> None:
        """A field of the wrong type is a 400 naming it."""
        body = {"server": "files", "tool": "t", "arguments": [1]}
        error = self.error(self.harness.post("/v1/call", body), 400, "invalid_input")
        self.assertEqual(error["field"], "arguments")

    def test_not_json(self) -> None:
        """A body that is not JSON is a 400 invalid_json."""
        answer = self.harness.send("POST", "/v1/call", raw=b"{server: files")
        self.assertIn("JSON", self.error(answer, 400, "invalid_json")["message"])

    def test_deep_nesting(self) -> None:
        """
        Arguments nested 1,000 deep are a JSON 400 invalid_json naming the nesting, not a
        500 HTML page; nothing is called.
        """
        raw = b'{"server":"files","tool":"read_file","arguments":{"a":%s}}' % (
            b"[" * 1000 + b"]" * 1000
        )
        answer = self.harness.send("POST", "/v1/call", raw=raw)
        self.assertIn("nested", self.error(answer, 400, "invalid_json")["message"])
        self.assertEqual(self.pool.calls, [])

    def test_non_finite_numbers(self) -> None:
        """
        1e400, NaN, Infinity and -Infinity in the arguments are a 400 invalid_json whose
        message names the number; nothing reaches the server.
        """
        for number in ("1e400", "NaN", "Infinity", "-Infinity"):
            raw = b'{"server":"files","tool":"read_file","arguments":{"a":%s}}' % number.encode()
            answer = self.harness.send("POST", "/v1/call", raw=raw)
            self.assertIn(number, self.error(answer, 400, "invalid_json")["message"])
        self.assertEqual(self.pool.calls, [])

    def test_not_an_object(self) -> None:
        """A JSON body that is not an object is a 400."""
        self.error(self.harness.post("/v1/call", ["files"]), 400, "invalid_input")

    def test_too_large(self) -> None:
        """A body over transport.maxMessageSize is a 413."""
        harness = Harness(settings=default_settings(**{"transport.maxMessageSize": "1024"}))
        body = {"server": "files", "tool": "t", "arguments": {"x": "a" * 2000}}
        self.error(harness.post("/v1/call", body), 413, "body_too_large")

    def test_unknown_server(self) -> None:
        """Calling an unknown server is a 404 listing the configured ones."""
        error = self.error(
            self.harness.post("/v1/call", {"server": "nope", "tool": "t"}), 404, "unknown_server"
        )
        self.assertIn("files, search", error["message"])

    def test_answer_that_is_not_json(self) -> None:
        """
        A result holding NaN is never written as NaN (text no JSON reader takes): the answer
        is a JSON 500 internal_error, and the failure is logged.
        """
        self.pool.servers["files"].answers["tools/call"] = {"content": [], "x": float("nan")}
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "read_file"})
        self.error(answer, 500, "internal_error")
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)

    def test_lone_surrogate_is_escaped(self) -> None:
        """A lone surrogate in a result is written as a JSON escape, and the answer is 200."""
        self.pool.servers["files"].answers["tools/call"] = {"content": [], "x": "\ud800"}
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "read_file"})
        self.assertEqual(answer.code, 200)
        self.assertIn(b"\\ud800", answer.body)
        self.assertEqual(answer.json["x"], "\ud800")

    def test_upstream_rpc_error(self) -> None:
        """An upstream JSON-RPC server error is a 502 carrying the error under rpc."""
        self.pool.servers["files"].answers["tools/call"] = RpcError(
            -32000, "disk on fire", {"disk": "sda"}
        )
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "x"})
        error = self.error(answer, 502, "upstream_error")
        self.assertEqual(
            error["rpc"], {"code": -32000, "message": "disk on fire", "data": {"disk": "sda"}}
        )

    def test_upstream_refuses_the_arguments(self) -> None:
        """
        An upstream's -32602 for a tool it has (wrong arguments) is the caller's mistake: 422,
        not a server error, still with the upstream's error under rpc.
        """
        self.pool.servers["files"].answers["tools/call"] = RpcError(
            -32602, "path is required", {"field": "path"}
        )
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "read_file"})
        error = self.error(answer, 422, "upstream_error")
        self.assertEqual(
            error["rpc"], {"code": -32602, "message": "path is required", "data": {"field": "path"}}
        )

    def test_upstream_refuses_an_unknown_tool(self) -> None:
        """
        An upstream's -32602 for a tool its catalogue lacks is a 404 unknown_tool naming
        close names, as describing the tool would be.
        """
        self.pool.servers["files"].answers["tools/call"] = RpcError(-32602, "Unknown tool")
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "read_fil"})
        self.assertIn("read_file", self.error(answer, 404, "unknown_tool")["message"])

    def test_upstream_refuses_an_unknown_prompt(self) -> None:
        """The same for a prompt: 404 unknown_prompt, when the catalogue lacks the name."""
        self.pool.servers["files"].answers["prompts/get"] = RpcError(-32602, "Unknown prompt")
        answer = self.harness.post("/v1/prompt", {"server": "files", "name": "revie"})
        self.assertIn("review", self.error(answer, 404, "unknown_prompt")["message"])
        answer = self.harness.post("/v1/prompt", {"server": "files", "name": "review"})
        self.error(answer, 422, "upstream_error")

    def test_upstream_resource_not_found(self) -> None:
        """
        An upstream's -32002 or -32602 for resources/read is a 404 unknown_resource with the
        upstream's error under rpc.
        """
        for code in (-32002, -32602):
            self.pool.servers["files"].answers["resources/read"] = RpcError(
                code, "Resource not found", {"uri": "file:///nope"}
            )
            answer = self.harness.post("/v1/read", {"server": "files", "uri": "file:///nope"})
            error = self.error(answer, 404, "unknown_resource")
            self.assertEqual(error["rpc"]["code"], code)
            self.assertIn("file:///nope", error["message"])

    def test_unavailable(self) -> None:
        """An unavailable server is a 503 with retry_in and a Retry-After header."""
        self.pool.servers["files"].failure = unavailable("files", retry_in=4.2)
        self.pool.servers["files"].state = ServerState.FAILED
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "t"})
        error = self.error(answer, 503, "server_unavailable")
        self.assertEqual(error["retry_in"], 4.2)
        self.assertEqual(answer.header("retry-after"), "4")

    def test_too_many_instances(self) -> None:
        """
        A client-scoped server with every one of its pool.maxClientInstances busy is a
        503 with Retry-After and a message naming the setting.
        """
        self.pool.servers["files"].failure = TooManyInstances(
            "files", 16, "pool.maxClientInstances", 1.0
        )
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "t"})
        error = self.error(answer, 503, "too_many_instances")
        self.assertIn("pool.maxClientInstances", error["message"])
        self.assertIn("16 instances", error["message"])
        self.assertEqual(answer.header("retry-after"), "1")

    def test_timeout(self) -> None:
        """A call the server did not answer in time is a 504."""
        self.pool.servers["files"].answers["tools/call"] = CallTimedOut("files", "slow", 2.0)
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "slow"})
        self.assertIn("2s", self.error(answer, 504, "call_timeout")["message"])

    def test_unexpected(self) -> None:
        """A bug is a 500 whose message points at the log, where the traceback is."""
        self.pool.servers["files"].answers["tools/call"] = ZeroDivisionError("oops")
        answer = self.harness.post("/v1/call", {"server": "files", "tool": "t"})
        self.assertIn("log", self.error(answer, 500, "internal_error")["message"])
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_no_pool(self) -> None:
        """Without a pool every pool route is a 503, and /health still answers."""
        harness = Harness(with_pool=False)
        self.error(harness.get("/v1/servers"), 503, "pool_unavailable")
        self.error(harness.post("/v1/call", {"server": "a", "tool": "b"}), 503, "pool_unavailable")
        self.assertEqual(harness.get("/health").code, 200)

    def test_wrong_method(self) -> None:
        """GET on a POST route is a JSON 405."""
        self.error(self.harness.get("/v1/call"), 405, "method_not_allowed")

    def test_unknown_route(self) -> None:
        """A path under /v1 that nothing serves is a JSON 404."""
        self.error(self.harness.get("/v1/nothing"), 404, "not_found")


class TaskTests(SynchronousTestCase):
    """C{"task": true}: answered at once, collected later."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.pool = self.harness.pool
        self.pool.hold = True
        self.task_op = BY_NAME["get_task"]

    def start_task(self) -> str:
        body = {"server": "files", "tool": "read_file", "arguments": {"p": 1}, "task": True}
        answer = self.harness.post("/v1/call", body)
        self.assertEqual(answer.code, 202)
        conforms(self, BY_NAME["call_tool"].accepted_schema, answer.json)
        task_id: str = answer.json["task"]["id"]
        self.assertEqual(answer.json["task"]["status"], "working")
        self.assertEqual(answer.header("location"), f"/v1/tasks/{task_id}")
        return task_id

    def task(self, task_id: str) -> Answer:
        answer = self.harness.get(f"/v1/tasks/{task_id}")
        if answer.code == 200:
            conforms(self, self.task_op.output_schema, answer.json)
        return answer

    def test_completed(self) -> None:
        """A task is working until the call answers, then completed with the result."""
        task_id = self.start_task()
        self.assertEqual(self.task(task_id).json, {"id": task_id, "status": "working"})
        self.pool.held[0].result.callback({"content": [], "isError": False})
        self.assertEqual(
            self.task(task_id).json,
            {"id": task_id, "status": "completed", "result": {"content": [], "isError": False}},
        )

    def test_failed(self) -> None:
        """A call that fails makes a failed task carrying the API error."""
        task_id = self.start_task()
        self.pool.held[0].result.errback(RpcError(-32603, "disk full"))
        body = self.task(task_id).json
        self.assertEqual(body["status"], "failed")
        self.assertEqual(body["error"]["code"], "upstream_error")
        self.assertEqual(body["error"]["rpc"], {"code": -32603, "message": "disk full"})

    def test_kept_for_the_ttl(self) -> None:
        """A finished task is kept proto.askTTL seconds, then forgotten (404)."""
        ttl = self.harness.http.host.tasks.ttl
        self.assertEqual(ttl, 900.0)
        task_id = self.start_task()
        self.harness.clock.advance(ttl * 2)
        self.assertEqual(self.task(task_id).json["status"], "working")
        self.pool.held[0].result.callback({"content": []})
        self.harness.clock.advance(ttl - 1)
        self.assertEqual(self.task(task_id).json["status"], "completed")
        self.harness.clock.advance(1)
        answer = self.task(task_id)
        self.assertEqual((answer.code, answer.json["error"]["code"]), (404, "unknown_task"))

    def test_unknown(self) -> None:
        """A task id never given out is a 404."""
        answer = self.task("nope")
        self.assertEqual((answer.code, answer.json["error"]["code"]), (404, "unknown_task"))

    def test_not_with_progress(self) -> None:
        """A task cannot stream progress: asking for both is a 400 naming progress."""
        body = {"server": "files", "tool": "t", "task": True, "progress": True}
        answer = self.harness.post("/v1/call", body)
        self.assertEqual(answer.code, 400)
        self.assertEqual(answer.json["error"]["field"], "progress")
        self.assertIn("a task cannot stream progress", answer.json["error"]["message"])
        self.assertEqual(self.pool.calls, [])

    def test_not_with_progress_is_in_the_schema(self) -> None:
        """The published input schema of /v1/call refuses task and progress together."""
        validator = BY_NAME["call_tool"].validator
        both: dict[str, Any] = {"server": "files", "tool": "t", "task": True, "progress": True}
        self.assertFalse(validator.is_valid(both))
        self.assertTrue(validator.is_valid({**both, "progress": False}))
        document = self.harness.get("/openapi.json").json
        body = document["paths"]["/v1/call"]["post"]["requestBody"]["content"]
        published = Draft202012Validator(body["application/json"]["schema"])
        self.assertFalse(published.is_valid(both))
        self.assertTrue(published.is_valid({**both, "progress": False}))

    def test_survives_the_caller(self) -> None:
        """The task runs on after the request that started it has been answered."""
        task_id = self.start_task()
        self.assertEqual(len(self.pool.held), 1)
        self.assertFalse(self.pool.held[0].result.called)
        self.pool.held[0].result.callback({"content": []})
        self.assertEqual(self.task(task_id).json["status"], "completed")

    def test_too_many(self) -> None:
        """Beyond the store's limit, a task is refused with a 503."""
        self.harness.http.host.tasks.limit = 1
        self.start_task()
        body = {"server": "files", "tool": "t", "task": True}
        answer = self.harness.post("/v1/call", body)
        self.assertEqual((answer.code, answer.json["error"]["code"]), (503, "too_many_tasks"))

    def start_for(self, client: str) -> Answer:
        body = {"server": "files", "tool": "t", "task": True}
        return self.harness.post("/v1/call", body, headers={"Mcpx-Client": client})

    def test_too_many_for_one_client(self) -> None:
        """
        A caller at tasks.maxPerClient gets 429 with Retry-After and a message naming
        the setting, while another caller still gets its task.
        """
        self.harness.http.host.tasks.per_client = 3
        for _ in range(3):
            self.assertEqual(self.start_for("greedy").code, 202)
        refused = self.start_for("greedy")
        self.assertEqual(refused.code, 429)
        self.assertEqual(refused.json["error"]["code"], "too_many_tasks_for_client")
        self.assertIn("tasks.maxPerClient", refused.json["error"]["message"])
        self.assertIn("'greedy'", refused.json["error"]["message"])
        # None has finished: a slot frees at the earliest a task's keeping time from now.
        self.assertEqual(refused.header("retry-after"), "900")
        conforms(self, ERROR_SCHEMA, refused.json)
        self.assertEqual(self.start_for("polite").code, 202)

    def test_client_slot_frees_when_its_task_expires(self) -> None:
        """Retry-After is when the caller's oldest finished task expires; then it may again."""
        self.harness.http.host.tasks.per_client = 1
        self.assertEqual(self.start_for("greedy").code, 202)
        self.pool.held[0].result.callback({"content": []})
        self.harness.clock.advance(600)
        refused = self.start_for("greedy")
        self.assertEqual((refused.code, refused.header("retry-after")), (429, "300"))
        self.harness.clock.advance(300)
        self.assertEqual(self.start_for("greedy").code, 202)


class TaskStoreTests(SynchronousTestCase):
    def test_close_cancels(self) -> None:
        """Closing the store cancels running work and forgets every task and its timer."""
        clock = Clock()
        store = TaskStore(clock, ttl=10)
        running: Deferred[Any] = Deferred()
        described: list[Failure] = []

        def describe(failure: Failure) -> dict[str, Any]:
            described.append(failure)
            return {"code": "cancelled", "message": ""}

        working = store.start(lambda: succeed_later(running), describe)
        finished = store.start(succeed_now, describe)
        self.assertEqual(finished.status, TaskStatus.COMPLETED)
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        store.close()
        self.assertEqual([f.type for f in described], [CancelledError])
        self.assertIsNone(store.get(working.id))
        self.assertIsNone(store.get(finished.id))
        self.assertEqual(clock.getDelayedCalls(), [])
        self.assertEqual(len(store), 0)

    def test_a_subjects_names_share_its_cap(self) -> None:
        """
        An access token's subject's tasks count against tasks.maxPerClient together,
        whatever session or request scope under it made them: a name it makes up gets
        it no more, and another subject still gets its task.
        """
        store = TaskStore(Clock(), per_client=2)
        alice = subject_identity("alice")
        store.start(succeed_now, lambda f: {}, client=f"{alice}/session-1")
        store.start(succeed_now, lambda f: {}, client=f"{alice}/request-7")
        self.assertRaises(
            TooManyTasksForClient, store.start, succeed_now, lambda f: {}, client=alice
        )
        self.assertRaises(
            TooManyTasksForClient,
            store.start,
            succeed_now,
            lambda f: {},
            client=f"{alice}/session-2",
        )
        store.start(succeed_now, lambda f: {}, client=subject_identity("bob"))
        self.assertEqual(len(store.tasks(client=f"{alice}/session-1")), 1)

    def test_limit(self) -> None:
        """The store refuses a task beyond its limit."""
        store = TaskStore(Clock(), limit=1)
        store.start(succeed_now, lambda f: {})
        self.assertRaises(TooManyTasks, store.start, succeed_now, lambda f: {})

    def test_per_client_limit_logged_once(self) -> None:
        """
        A caller at its cap is refused (others are not) and the refusal is logged once
        per episode, not per call: again only after it dropped below its cap.
        """
        clock = Clock()
        store = TaskStore(clock, ttl=10, per_client=2)
        logged = observe_log(self)

        def refusals() -> int:
            return sum(1 for e in logged if "tasks.maxPerClient" in str(e.get("setting", "")))

        for _ in range(2):
            store.start(succeed_now, lambda f: {}, client="a")
        for _ in range(5):
            self.assertRaises(
                TooManyTasksForClient, store.start, succeed_now, lambda f: {}, client="a"
            )
        self.assertEqual(refusals(), 1)
        store.start(succeed_now, lambda f: {}, client="b")
        clock.advance(10)
        store.start(succeed_now, lambda f: {}, client="a")
        store.start(succeed_now, lambda f: {}, client="a")
        error = self.assertRaises(
            TooManyTasksForClient, store.start, succeed_now, lambda f: {}, client="a"
        )
        self.assertEqual((error.client, error.limit, error.retry_in), ("a", 2, 10.0))
        self.assertEqual(refusals(), 2)


async def succeed_later(waiting: Deferred[Any]) -> Any:
    return await waiting


async def succeed_now() -> Any:
    return {"content": []}


class ProgressTests(SynchronousTestCase):
    """C{"progress": true}: NDJSON progress lines, then the outcome line."""

    def setUp(self) -> None:
        self.harness = Harness()
        self.pool = self.harness.pool
        self.pool.hold = True
        self.line_schema = BY_NAME["call_tool"].progress_schema

    def lines(self, answer: Answer) -> list[Any]:
        self.assertEqual(answer.code, 200)
        self.assertEqual(answer.header("content-type"), "application/x-ndjson")
        self.assertTrue(answer.body.endswith(b"\n"))
        lines = [json.loads(line) for line in answer.body.splitlines()]
        for line in lines:
            conforms(self, self.line_schema, line)
        return lines

    def test_progress_then_result(self) -> None:
        """Each progress notification is a line (without the pool's token); the result last."""
        body = {"server": "files", "tool": "read_file", "progress": True}
        started = self.harness.start("POST", "/v1/call", body)
        self.harness.stub.flush()
        self.assertNoResult(started)
        held = self.pool.held[0]
        assert held.on_progress is not None
        held.on_progress({"progressToken": "mcpx-1", "progress": 1, "total": 3})
        held.on_progress({"progress": 2, "total": 3, "message": "halfway"})
        self.harness.stub.flush()
        # The answer has begun before the call is over: the lines are streamed.
        self.assertTrue(started.called)
        held.result.callback({"content": [{"type": "text", "text": "done"}]})
        self.assertEqual(
            self.lines(self.harness.finish(started)),
            [
                {"progress": {"progress": 1, "total": 3}},
                {"progress": {"progress": 2, "total": 3, "message": "halfway"}},
                {"result": {"content": [{"type": "text", "text": "done"}]}},
            ],
        )

    def test_error_is_the_last_line(self) -> None:
        """Once streaming, a failure is the last line, carrying the API error."""
        body = {"server": "files", "tool": "slow", "progress": True}
        started = self.harness.start("POST", "/v1/call", body)
        self.harness.stub.flush()
        self.pool.held[0].result.errback(CallTimedOut("files", "slow", 5.0))
        lines = self.lines(self.harness.finish(started))
        self.assertEqual(len(lines), 1)
        self.assertEqual(lines[0]["error"]["code"], "call_timeout")

    def test_no_progress_without_asking(self) -> None:
        """A plain call gives the pool no progress sink."""
        started = self.harness.start("POST", "/v1/call", {"server": "files", "tool": "t"})
        self.harness.stub.flush()
        self.assertIsNone(self.pool.held[0].on_progress)
        self.pool.held[0].result.callback({"content": []})
        self.assertEqual(self.harness.finish(started).json, {"content": []})

    def test_bad_input_is_plain_json(self) -> None:
        """Input refused before streaming is an ordinary JSON 400."""
        answer = self.harness.post("/v1/call", {"server": "files", "progress": True})
        self.assertEqual(answer.code, 400)
        self.assertEqual(answer.header("content-type"), "application/json")


class FakePoolTests(SynchronousTestCase):
    def test_default_servers_are_fresh(self) -> None:
        """Each fake pool gets its own servers, so tests cannot leak into each other."""
        first, second = FakePool(default_servers()), FakePool(default_servers())
        first.servers["files"].tools.clear()
        self.assertEqual(len(second.servers["files"].tools), 2)
