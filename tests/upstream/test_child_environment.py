"""
What a stdio server sees of the daemon's environment, with a real daemon (its records in
a real PostgreSQL database) and a real upstream that answers with its environment
(L{tests.fixtures.environment_server}).
"""

from __future__ import annotations

import json
import sys

from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon
from tests.support.postgres import PASSWORD, shared_cluster

#: Secrets the daemon's environment holds for others: another stdio server's C{${NAME}},
#: a remote server's bearer token.
OTHER_SERVERS_SECRET = "other-servers-secret-3f9a"
REMOTE_TOKEN = "remote-bearer-token-77c1"


class ChildEnvironmentTests(TestCase):
    timeout = 120

    async def test_server_sees_only_what_it_was_given(self) -> None:
        """
        The server is given the daemon's C{PATH}, C{HOME}, locale and C{TMPDIR}, the
        variable its C{envPassthrough} names and its own C{env}; it is not given another
        server's C{${NAME}} secret, the variable behind a remote server's token, the
        store's password (named in C{store.url}), any C{MCPX_*} setting or the state
        directory.
        """
        cluster = shared_cluster()
        database = cluster.database()
        store_url = f"postgresql://mcpx:${{STORE_PASSWORD}}@127.0.0.1:{cluster.port}/{database}"
        servers = {
            "dump": {
                "command": sys.executable,
                "args": ["-m", "tests.fixtures.environment_server"],
                "env": {"DUMP_MODE": "plain"},
                "envPassthrough": ["AWS_PROFILE"],
            },
            "other": {
                "command": sys.executable,
                "args": ["-m", "mcpx.demo"],
                "env": {"OTHER_API_KEY": "${OTHER_SECRET}"},
            },
            "remote": {
                "url": "http://127.0.0.1:9/mcp",
                "auth": {"type": "bearer", "token": "${REMOTE_TOKEN}"},
            },
        }
        daemon = Daemon(self, servers, settings={"MCPX_STORE_URL": store_url})
        daemon.env.update(
            STORE_PASSWORD=PASSWORD,
            OTHER_SECRET=OTHER_SERVERS_SECRET,
            REMOTE_TOKEN=REMOTE_TOKEN,
            AWS_PROFILE="work-profile",
            AWS_SECRET_ACCESS_KEY="not-passed-through",
            LANG="C.UTF-8",
            LC_MESSAGES="C",
            TMPDIR="/tmp",
        )
        await daemon.start()
        done = await daemon.mcpx("call", "dump", "echo", "text=env")
        self.assertEqual(done.code, 0, done)
        seen = json.loads(done.out)
        for name in ("PATH", "HOME", "LANG", "LC_MESSAGES", "TMPDIR", "AWS_PROFILE"):
            self.assertEqual(seen.get(name), daemon.env[name], name)
        self.assertEqual(seen["DUMP_MODE"], "plain")
        everything = json.dumps(seen)
        for secret in (OTHER_SERVERS_SECRET, REMOTE_TOKEN, PASSWORD, "not-passed-through"):
            self.assertNotIn(secret, everything)
        self.assertNotIn(str(daemon.state_dir), everything)
        # The run mark the daemon itself gives its children is its only variable there.
        self.assertEqual([name for name in seen if name.startswith("MCPX_")], ["MCPX_DAEMON_RUN"])
        self.assertEqual(await daemon.stop(), 0, daemon.log()[-4000:])
