"""
Choosing the store from the settings: C{store.url}, its password kept out of the URL and
out of every output, and psycopg never loaded by a daemon on SQLite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.config import daemon_config
from mcpx.daemon.service import DaemonConfig
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import load_settings
from mcpx.store.config import postgres_target

SECRET = "s3cret-of-the-fleet"


class TargetTests(SynchronousTestCase):
    def test_literal_password_refused(self) -> None:
        """A URL with a password written in it is refused, saying where to put it."""
        error = self.assertRaises(
            SettingsError, postgres_target, f"postgresql://mcpx:{SECRET}@db/mcpx", "", {}
        )
        self.assertIn("store.passwordFile", str(error))
        self.assertNotIn(SECRET, str(error))

    def test_password_parameter_refused(self) -> None:
        """A password given as a URL parameter is refused too."""
        self.assertRaises(
            SettingsError, postgres_target, f"postgresql://db/mcpx?password={SECRET}", "", {}
        )

    def test_not_postgres_refused(self) -> None:
        """A URL of another kind is refused."""
        self.assertRaises(SettingsError, postgres_target, "mysql://db/mcpx", "", {})

    def test_password_from_variable(self) -> None:
        """${NAME} in the password's place reads it from the environment, and only there."""
        target = postgres_target(
            "postgresql://mcpx:${PG_PASS}@db:5433/mcpx?sslmode=require", "", {"PG_PASS": SECRET}
        )
        self.assertEqual(target.password, SECRET)
        self.assertEqual(target.conninfo, "postgresql://mcpx@db:5433/mcpx?sslmode=require")
        self.assertNotIn(SECRET, target.description + repr(target))

    def test_unset_variable_refused(self) -> None:
        """A password variable that is not set is a configuration error naming it."""
        error = self.assertRaises(
            SettingsError, postgres_target, "postgresql://mcpx:${PG_PASS}@db/mcpx", "", {}
        )
        self.assertIn("PG_PASS", str(error))

    def test_password_from_file(self) -> None:
        """store.passwordFile's one line is the password; an unreadable file is refused."""
        path = Path(self.mktemp())
        path.write_text(SECRET + "\n")
        target = postgres_target("postgresql://mcpx@db/mcpx", str(path), {})
        self.assertEqual(target.password, SECRET)
        self.assertRaises(
            SettingsError, postgres_target, "postgresql://mcpx@db/mcpx", str(path) + "x", {}
        )


class DaemonStoreSettingTests(SynchronousTestCase):
    def configured(self, **environ: str) -> DaemonConfig:
        directory = tempfile.mkdtemp(prefix="mcpx-store-")
        self.addCleanup(shutil.rmtree, directory, True)
        config = Path(directory) / "servers.json"
        config.write_text(json.dumps({"servers": {}}))
        env = {
            "MCPX_STATE_DIR": directory,
            "XDG_CONFIG_HOME": directory,
            "MCPX_CONFIG": str(config),
            **environ,
        }
        settings, servers = load_settings(env, {})
        return daemon_config(settings, servers, env)

    def test_default_is_sqlite(self) -> None:
        """With no store.url the daemon keeps its records in SQLite, as it always did."""
        self.assertIsNone(self.configured().store)

    def test_password_masked(self) -> None:
        """The database password is masked wherever the daemon's text goes."""
        config = self.configured(
            MCPX_STORE_URL="postgresql://mcpx:${PG_PASS}@db/mcpx", PG_PASS=SECRET
        )
        assert config.store is not None
        self.assertEqual(config.store.description, "postgresql://mcpx@db/mcpx")
        self.assertEqual(config.masker.mask(f"login failed for {SECRET}"), "login failed for ***")

    def test_bad_url_refused_at_start(self) -> None:
        """A store.url with a literal password stops the daemon before it starts."""
        self.assertRaises(
            SettingsError, self.configured, MCPX_STORE_URL=f"postgresql://u:{SECRET}@db/x"
        )


class LeanImportTests(SynchronousTestCase):
    def test_sqlite_daemon_never_loads_psycopg(self) -> None:
        """Building a daemon's service tree on SQLite does not import psycopg."""
        directory = tempfile.mkdtemp(prefix="mcpx-lean-")
        self.addCleanup(shutil.rmtree, directory, True)
        config = Path(directory) / "servers.json"
        config.write_text(json.dumps({"servers": {}}))
        program = (
            "import sys, os\n"
            "from twisted.internet.testing import MemoryReactorClock\n"
            "from mcpx.daemon.config import daemon_config\n"
            "from mcpx.daemon.service import make_service\n"
            "from mcpx.settings.load import load_settings\n"
            "settings, servers = load_settings(os.environ, {})\n"
            "make_service(daemon_config(settings, servers, os.environ), MemoryReactorClock())\n"
            "print(sorted(m for m in sys.modules if m.startswith(('psycopg', 'mcpx.store'))))\n"
        )
        env = {
            **os.environ,
            "MCPX_STATE_DIR": directory,
            "XDG_CONFIG_HOME": directory,
            "MCPX_CONFIG": str(config),
        }
        out = subprocess.run(
            [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
        ).stdout
        self.assertEqual(
            out.strip(),
            str(
                [
                    "mcpx.store",
                    "mcpx.store.config",
                    "mcpx.store.heartbeat",
                    "mcpx.store.records",
                    "mcpx.store.sqlite",
                    "mcpx.store.unsaved",
                    "mcpx.store.writes",
                ]
            ),
        )
