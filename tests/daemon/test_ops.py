"""The operation table: one declaration per op, and what is generated from it."""

from __future__ import annotations

import re
from typing import Any, cast

from attrs import evolve
from jsonschema import Draft202012Validator
from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.api import klein_path
from mcpx.daemon.http import DaemonHTTP
from mcpx.daemon.status_page import ASSETS as PAGE_ASSETS
from mcpx.ops import routes
from mcpx.ops.calls import template_variables
from mcpx.ops.errors import OpError, error_from
from mcpx.ops.host import Invocation, OpHost
from mcpx.ops.op import Op
from mcpx.ops.routes import ROUTES
from mcpx.ops.schemas import ERROR_SCHEMA
from mcpx.ops.table import BY_NAME, OPS
from mcpx.pool import CallTimedOut, PoolError, ServerUnavailable, UnknownServer
from mcpx.pool.interface import PoolInterface
from mcpx.pool.pool import Pool
from mcpx.spec.safe_schema import dialect
from mcpx.tasks.store import TooManyTasks
from mcpx.upstream.records import UpstreamError
from mcpx.wire.errors import RpcError


def _real_pool_fits(pool: Pool) -> PoolInterface:
    # Checked by mypy, not at run time: the real pool offers what the operations use.
    return pool


class TableTests(SynchronousTestCase):
    def test_names_and_routes_are_unique(self) -> None:
        """No two ops share a name, or a method and path."""
        self.assertEqual(len({op.name for op in OPS}), len(OPS))
        self.assertEqual(len({(op.method, op.path) for op in OPS}), len(OPS))

    def test_every_documented_operation_is_there(self) -> None:
        """The table holds the operations the API promises, under their paths."""
        expected = {
            ("GET", "/v1/servers"),
            ("GET", "/v1/tools"),
            ("GET", "/v1/tools/{server}/{tool}"),
            ("POST", "/v1/call"),
            ("GET", "/v1/tasks/{id}"),
            ("GET", "/v1/tasks"),
            ("POST", "/v1/tasks/{id}/cancel"),
            ("GET", "/v1/prompts"),
            ("POST", "/v1/prompt"),
            ("GET", "/v1/resources"),
            ("POST", "/v1/read"),
            ("POST", "/v1/complete"),
            ("POST", "/v1/servers/{name}/restart"),
            ("GET", "/v1/calls"),
            ("POST", "/v1/reload"),
            ("GET", "/v1/settings"),
            ("GET", "/v1/protocol"),
            ("GET", "/health"),
            ("GET", "/v1/events"),
            ("GET", "/openapi.json"),
            ("GET", "/v1/questions"),
            ("GET", "/v1/questions/{id}"),
            ("POST", "/v1/questions/{id}/answer"),
            ("POST", "/v1/exec"),
            ("GET", "/v1/artifacts"),
            ("POST", "/v1/artifacts/read"),
            ("GET", "/v1/auth"),
            ("POST", "/v1/auth/{name}/begin"),
            ("POST", "/v1/auth/{name}/finish"),
            ("DELETE", "/v1/auth/{name}"),
        }
        self.assertEqual({(op.method, op.path) for op in OPS}, expected)

    def test_every_route_is_an_op(self) -> None:
        """The routes the CLI builds its requests from are exactly the table's ops."""
        self.assertEqual(set(ROUTES), {op.name for op in OPS})
        for op in OPS:
            self.assertEqual(ROUTES[op.name], (op.method, op.path))

    def test_route_path_quotes_each_parameter(self) -> None:
        """A name holding a slash or a space stays one path segment, as the router reads it."""
        self.assertEqual(
            routes.path("describe_tool", server="a/b", tool="x y"), "/v1/tools/a%2Fb/x%20y"
        )
        self.assertEqual(routes.path("list_servers"), "/v1/servers")

    def test_schemas_are_valid_json_schema(self) -> None:
        """Every input and output schema is a valid 2020-12 schema."""
        for op in OPS:
            for schema in (op.input_schema, op.output_schema, op.accepted_schema):
                if schema is not None:
                    Draft202012Validator.check_schema(schema)
        Draft202012Validator.check_schema(ERROR_SCHEMA)

    def test_path_parameters_are_required_strings(self) -> None:
        """Each path parameter is a required string property of the op's input."""
        for op in OPS:
            for name in re.findall(r"{(\w+)}", op.path):
                self.assertIn(name, op.required, op.name)
                self.assertEqual(op.properties[name]["type"], "string", op.name)

    def test_get_inputs_fit_in_a_query(self) -> None:
        """A GET op takes only strings and lists of strings: a query can carry nothing else."""
        for op in OPS:
            if op.method != "GET":
                continue
            for name in op.query_params:
                schema = op.properties[name]
                kind = schema["type"]
                self.assertIn(kind, ("string", "array"), f"{op.name}.{name}")
                if kind == "array":
                    self.assertEqual(schema["items"], {"type": "string"})

    def test_one_route_per_op(self) -> None:
        """
        Besides /mcp (the MCP endpoint), /metrics (Prometheus text), the status page's
        three files and its browser sign-in (the /login page and script, the code's exchange,
        and the one-time link the owner asks for on the unix socket), which are not
        operations, the daemon's Klein app has exactly one route per op, at the op's path
        and method.
        """
        not_ops = {"mcp_endpoint", "metrics_endpoint", "login", "login_link", *PAGE_ASSETS}
        rules = [r for r in DaemonHTTP.app.url_map.iter_rules() if r.endpoint not in not_ops]
        self.assertEqual(sorted(rule.endpoint for rule in rules), sorted(BY_NAME))
        for rule in rules:
            op = BY_NAME[rule.endpoint]
            self.assertEqual(rule.rule, klein_path(op.path))
            self.assertIn(op.method, rule.methods or ())

    def test_klein_path(self) -> None:
        """OpenAPI path templates become werkzeug rules."""
        self.assertEqual(klein_path("/v1/tools/{server}/{tool}"), "/v1/tools/<server>/<tool>")
        self.assertEqual(klein_path("/v1/servers"), "/v1/servers")

    def test_gateway_tools(self) -> None:
        """
        Hosts get the calling and discovery operations as tools; administration (restart,
        reload, settings), tasks and the HTTP-only routes stay on the CLI and /v1.
        """
        self.assertEqual(
            {op.name for op in OPS if op.gateway},
            {
                "list_servers",
                "list_tools",
                "describe_tool",
                "call_tool",
                "get_prompt",
                "read_resource",
                "complete",
                "exec",
            },
        )

    def test_owner_only(self) -> None:
        """
        What changes every caller's daemon (a reload, a restart, the settings) is the
        owner's alone.  A sign-in is each caller's own (L{tests.daemon.test_per_person}).
        """
        self.assertEqual(
            {op.name for op in OPS if op.owner_only},
            {
                "restart_server",
                "reload",
                "get_settings",
            },
        )


class OwnerOnlyTests(SynchronousTestCase):
    """L{Op.run}: the one place an owner-only op refuses a caller with a subject."""

    def run_op(self, op: Op, call: Invocation) -> tuple[Deferred[Any], list[Invocation]]:
        """Run C{op} for C{call} with a handler that notes it ran."""
        seen: list[Invocation] = []

        async def handler(host: OpHost, invocation: Invocation) -> dict[str, str]:
            seen.append(invocation)
            return {}

        host = cast(OpHost, None)
        return Deferred.fromCoroutine(evolve(op, handler=handler).run(host, call)), seen

    def test_subject_refused(self) -> None:
        """A caller with an access token's subject is refused 403 owner_only, unrun."""
        bob = Invocation({}, 'subject:"bob"', holder='subject:"bob"')
        for op in OPS:
            if not op.owner_only:
                continue
            running, seen = self.run_op(op, bob)
            error = self.failureResultOf(running, OpError).value
            assert isinstance(error, OpError)
            self.assertEqual((error.status, error.code), (403, "owner_only"), op.name)
            self.assertEqual(seen, [], op.name)

    def test_owner_and_others_run(self) -> None:
        """The owner runs every op; a subject runs those that are not the owner's."""
        bob = Invocation({}, 'subject:"bob"', holder='subject:"bob"')
        for op in OPS:
            callers = [Invocation({})] + ([] if op.owner_only else [bob])
            for call in callers:
                running, seen = self.run_op(op, call)
                self.successResultOf(running)
                self.assertEqual(seen, [call], op.name)


class CheckTests(SynchronousTestCase):
    """Input checking names the field at fault."""

    call = BY_NAME["call_tool"]

    def refused(self, args: dict[str, object]) -> OpError:
        error = self.assertRaises(OpError, self.call.check, args)
        assert isinstance(error, OpError)
        self.assertEqual(error.status, 400)
        self.assertEqual(error.code, "invalid_input")
        return error

    def test_valid_input_passes(self) -> None:
        """Input matching the schema is accepted."""
        self.call.check({"server": "a", "tool": "b", "arguments": {}, "timeout": 2.5})

    def test_missing_field(self) -> None:
        """A missing required field is named."""
        error = self.refused({"server": "a"})
        self.assertEqual(error.field, "tool")
        self.assertIn("'tool' is a required property", error.message)

    def test_unexpected_field(self) -> None:
        """A misspelt field is named, so the caller sees the typo."""
        error = self.refused({"server": "a", "tool": "b", "timeuot": 1})
        self.assertEqual(error.field, "timeuot")

    def test_wrong_type(self) -> None:
        """A field of the wrong type is named, with what was wrong."""
        error = self.refused({"server": "a", "tool": "b", "timeout": -1})
        self.assertEqual(error.field, "timeout")
        self.assertIn("/openapi.json", error.message)

    def test_nested_field(self) -> None:
        """A field inside an object is named by its dotted path."""
        complete = BY_NAME["complete"]
        with self.assertRaises(OpError) as caught:
            complete.check(
                {"server": "a", "ref": {"type": "ref/prompt", "name": "p"}, "argument": {"v": 1}}
            )
        self.assertEqual(caught.exception.field, "argument.name")


class ErrorFromTests(SynchronousTestCase):
    """Failures become errors with a stable code and the right status."""

    def test_unknown_server(self) -> None:
        """The pool's UnknownServer is a 404 naming the configured servers."""
        error = error_from(UnknownServer("fles", ["files", "search"]))
        self.assertEqual((error.status, error.code), (404, "unknown_server"))
        self.assertIn("'files'", error.message)
        self.assertIn("GET /v1/servers", error.message)

    def test_unavailable(self) -> None:
        """ServerUnavailable is a 503 with retry_in."""
        error = error_from(ServerUnavailable("files", "it crashed", 4.0))
        self.assertEqual(
            (error.status, error.code, error.retry_in), (503, "server_unavailable", 4.0)
        )
        self.assertEqual(error.to_json()["retry_in"], 4.0)
        self.assertIn("/v1/events?server=files", error.message)

    def test_timeout(self) -> None:
        """CallTimedOut is a 504 suggesting a task."""
        error = error_from(CallTimedOut("files", "read_file", 2.0))
        self.assertEqual((error.status, error.code), (504, "call_timeout"))
        self.assertIn('"task": true', error.message)

    def test_other_pool_error(self) -> None:
        """Any other pool error is a 503 with its own code."""
        error = error_from(PoolError("the pool is stopping"))
        self.assertEqual((error.status, error.code), (503, "pool_error"))

    def test_rpc_error_is_carried(self) -> None:
        """
        An upstream JSON-RPC error carries the error as the server sent it: 422 when it
        refuses the input (-32602), 502 otherwise.
        """
        self.assertEqual(error_from(RpcError(-32603, "broken")).status, 502)
        error = error_from(RpcError(-32602, "Unknown tool: x", {"tool": "x"}))
        self.assertEqual((error.status, error.code), (422, "upstream_error"))
        self.assertEqual(
            error.to_json()["rpc"],
            {"code": -32602, "message": "Unknown tool: x", "data": {"tool": "x"}},
        )

    def test_upstream_error(self) -> None:
        """An upstream failure that is not JSON-RPC is a 502 naming the server."""
        error = error_from(UpstreamError("files", "it spoke garbage"))
        self.assertEqual((error.status, error.code), (502, "upstream_failed"))
        self.assertIn("'files'", error.message)

    def test_too_many_tasks(self) -> None:
        """A full task store is a 503."""
        error = error_from(TooManyTasks(10, 60.0))
        self.assertEqual((error.status, error.code), (503, "too_many_tasks"))

    def test_unexpected(self) -> None:
        """Anything else is a 500 that points at the log, not at the exception's text."""
        error = error_from(KeyError("secret internals"))
        self.assertEqual((error.status, error.code), (500, "internal_error"))
        self.assertNotIn("secret", error.message)

    def test_errors_match_the_error_schema(self) -> None:
        """Every error body matches the documented error schema."""
        validator = Draft202012Validator(ERROR_SCHEMA)
        for failure in (
            UnknownServer("x", []),
            ServerUnavailable("x", "down", None),
            CallTimedOut("x", "t", 1.0),
            RpcError(-32603, "boom"),
            ValueError(),
        ):
            validator.validate({"error": error_from(failure).to_json()})


class TemplateVariablesTests(SynchronousTestCase):
    def test_variables(self) -> None:
        """The variables of an RFC 6570 template, operators and modifiers stripped."""
        self.assertEqual(
            template_variables("file:///{+path}{?rev,mode}/{name:3}{/parts*}{path}"),
            ["path", "rev", "mode", "name", "parts"],
        )

    def test_no_variables(self) -> None:
        """A plain URI has none."""
        self.assertEqual(template_variables("demo://fixed"), [])


class FastAcceptorTests(SynchronousTestCase):
    """The quick yes never accepts what the full validator refuses."""

    def test_agrees_with_jsonschema(self) -> None:
        """For every op it covers, on valid and broken inputs, a yes is always jsonschema's yes."""
        from mcpx.policy.precheck import fast_acceptor

        samples: list[dict[str, Any]] = [
            {},
            {"server": "demo", "tool": "echo"},
            {"server": "demo", "tool": "echo", "arguments": {"text": "hi"}, "timeout": 2},
            {"server": "", "tool": "echo"},
            {"server": "demo", "tool": "echo", "timeout": 0},
            {"server": "demo", "tool": "echo", "timeout": True},
            {"server": "demo", "tool": 3},
            {"server": "demo", "tool": "echo", "extra": 1},
            {"server": "demo", "tool": "echo", "arguments": []},
            {"server": "demo", "tool": "echo", "task": 1},
            {"server": "demo", "tool": "echo", "task": True, "progress": True},
            {"server": "demo", "tool": "echo", "task": True, "progress": False},
            {"server": "demo", "tool": "echo", "progress": True},
            {"server": "demo", "name": "p", "arguments": {"a": "b"}},
            {"server": "demo", "uri": "demo://readme"},
            {"name": "demo"},
            {"search": "sum"},
        ]
        covered = 0
        for op in OPS:
            accepts = fast_acceptor(op.input_schema)
            if accepts is None:
                continue
            covered += 1
            for args in samples:
                if accepts(args):
                    self.assertTrue(
                        op.validator.is_valid(args), f"{op.name} fast-accepted {args!r}"
                    )
        self.assertTrue(fast_acceptor(BY_NAME["call_tool"].input_schema), "the hot op is covered")
        self.assertGreater(covered, 1)

    def test_every_input_schema_compiles(self) -> None:
        """
        Every op's input schema is a valid 2020-12 schema (checked when it is first compiled,
        which is no longer at import).
        """
        for op in OPS:
            Draft202012Validator.check_schema(op.input_schema)
            self.assertIs(op.validator, op.validator, op.name)
            self.assertIs(type(op.validator), dialect("2020-12"))

    def test_a_refusal_still_names_the_field(self) -> None:
        """Input the quick check does not vouch for goes through jsonschema's full message."""
        error = self.assertRaises(
            OpError, BY_NAME["call_tool"].check, {"server": "demo", "tool": "echo", "timeout": 0}
        )
        self.assertEqual(error.field, "timeout")
