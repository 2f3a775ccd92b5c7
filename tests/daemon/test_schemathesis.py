"""
C{schemathesis} against a real daemon's own C{/openapi.json}: every documented route, driven by
examples generated from its schema, answers what the document promises.

The daemon runs the built-in (demo) configuration on a loopback port; schemathesis runs as a
child process with a fixed seed and a bounded number of examples per operation, so the run is
the same every time and takes well under a minute.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from twisted.trial.unittest import TestCase

from tests.support.daemons import daemon_environ
from tests.support.processes import (
    VENV_BIN,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    spawn,
)

#: The same run every time: the seed, and how many examples each operation gets.
SEED = 20261201
MAX_EXAMPLES = 10

#: What schemathesis is told beyond its defaults.  Every check runs, with one exception,
#: for a reason that is not a fault of the API:
#:  - a 504 is what a call gets when the deadline the caller chose ("timeout", as low as the
#:    schema allows: just above zero) runs out; a 500, 502 or 503 is still a failure;
#:  - POST /v1/exec takes any string as its program, as a schema must, but a string that is
#:    not a program mcpx can run (a syntax error: 400 program_syntax; one that fails when
#:    run: 422 program_failed) is refused with what went wrong; no schema can say which
#:    strings are programs, so those two statuses count as accepting the input.
CONFIG = """\
[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "504"]

[[operations]]
include-path = "/v1/exec"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "400", "401", "403", "404", "409", "422", "429", "5xx"
]
"""


class SchemathesisTests(TestCase):
    timeout = 240

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.work = Path(tempfile.mkdtemp(prefix="mcpx-st-"))
        self.port = free_tcp_port()

    def start(self, argv: list[str], env: dict[str, str], cwd: str) -> ChildProcess:
        child = spawn(argv, env=env, cwd=cwd)
        self.addCleanup(kill_on_cleanup, child)
        return child

    async def test_openapi_document_holds(self) -> None:
        """
        With a fixed seed and a bounded number of examples per operation, schemathesis finds
        no failure: no server error, every status, content type, header and body as the
        document declares, schema-valid input accepted and invalid input refused.
        """
        env = daemon_environ(self.state_dir, self.config_home)
        listen = f"tcp:{self.port}:interface=127.0.0.1"
        daemon = self.start(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", listen],
            env,
            self.state_dir,
        )
        self.addCleanup(self.stop, daemon)
        await daemon.wait_for(rb"listening on http://127\.0\.0\.1:\d+")
        config = self.work / "schemathesis.toml"
        config.write_text(CONFIG, encoding="utf-8")
        run = self.start(
            [
                str(VENV_BIN / "schemathesis"),
                "--config-file",
                str(config),
                "run",
                f"http://127.0.0.1:{self.port}/openapi.json",
                "--checks",
                "all",
                # The event stream never ends by itself; tests.daemon.test_events covers it.
                "--exclude-path",
                "/v1/events",
                "--header",
                "Content-Type: application/json",
                "--seed",
                str(SEED),
                "--max-examples",
                str(MAX_EXAMPLES),
                "--workers",
                "1",
                "--request-timeout",
                "20",
            ],
            {**env, "NO_COLOR": "1", "COLUMNS": "120"},
            str(self.work),
        )
        code = await run.ended(timeout=220)
        output = run.text()
        self.assertEqual(code, 0, output[-6000:])
        generated = re.search(r"(\d+) generated", output)
        assert generated is not None, output[-3000:]
        self.assertGreater(int(generated.group(1)), 100, output[-3000:])
        self.assertNotIn("found", output.split("Test cases:")[-1].split("Seed:")[0])

    async def stop(self, daemon: ChildProcess) -> None:
        """End the daemon and wait for it, so that no process outlives the test."""
        if daemon.exit_code is None:
            daemon.signal("TERM")
            await daemon.ended()
