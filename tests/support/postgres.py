"""
A throw-away PostgreSQL cluster for the tests of the shared store (L{mcpx.store.postgres}):
Debian's server binaries (C{make peers} installs the C{postgresql} package), C{initdb} in a
temporary directory, C{pg_ctl} listening on loopback at a free port and on a unix socket in
that directory, stopped and removed when the test process ends.

PostgreSQL refuses to run as root, so under root (a CI machine) the cluster runs as
C{nobody}, in a directory handed over to it.  Each test takes a database of its own
(L{PostgresCluster.database}); the cluster is shared by the tests of one process.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.processes import free_tcp_port

#: The user the cluster's connections log in as, with L{PASSWORD} over TCP.
USER = "mcpx"
PASSWORD = "fleet-test-password"


def server_binaries() -> Path:
    """The newest installed PostgreSQL's binary directory."""
    versions = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise RuntimeError(
            "no PostgreSQL server under /usr/lib/postgresql: run `make peers` "
            "(apt-get install postgresql)"
        )
    return versions[-1]


class PostgresCluster:
    """
    One cluster, made by L{start}.

    @ivar port: its loopback TCP port.
    @ivar directory: holds the data directory, its socket, its log and the password file.
    """

    def __init__(self) -> None:
        self.bin = server_binaries()
        self.directory = Path(tempfile.mkdtemp(prefix="mcpx-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.password_file = self.directory / "password"
        self.port = free_tcp_port()
        #: The addresses it listens on (C{listen_addresses}); more may be set before L{start}.
        self.listen = ["127.0.0.1"]
        #: Networks besides loopback allowed to log in over TCP (with L{PASSWORD}).
        self.clients: list[str] = []
        self._databases = itertools.count(1)
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "nobody", "--"]

    def _run(self, *command: str) -> None:
        subprocess.run(
            [*self._as, *command],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.directory,
        )

    def start(self) -> None:
        self.password_file.write_text(PASSWORD + "\n")
        if self._as:
            os.chmod(self.directory, 0o700)
            shutil.chown(self.directory, "nobody")
            shutil.chown(self.password_file, "nobody")
        os.chmod(self.password_file, 0o600)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={self.password_file}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--no-sync",
            "--no-instructions",
        )
        if self.clients:
            with (self.data / "pg_hba.conf").open("a") as hba:
                for network in self.clients:
                    hba.write(f"host all all {network} scram-sha-256\n")
        self._pg_ctl("start")

    def _pg_ctl(self, action: str) -> None:
        options = (
            f"-c listen_addresses={','.join(self.listen)} -p {self.port} -k {self.directory} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c shared_buffers=16MB -c max_connections=60"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            action,
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-t",
            "60",
            "-m",
            "fast",
            "-o",
            options,
        )

    def stop(self) -> None:
        """Stop the server (its data stays)."""
        self._run(str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-w", "-m", "fast")

    def resume(self) -> None:
        """Start the stopped server again, on the same port and data."""
        self._pg_ctl("start")

    def restart(self) -> None:
        """Stop the server, dropping every connection, and start it again on the same port."""
        self.stop()
        self.resume()

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def database(self) -> str:
        """A new empty database's name."""
        name = f"test_{os.getpid()}_{next(self._databases)}"
        self._run(
            str(self.bin / "psql"),
            "-h",
            str(self.directory),
            "-p",
            str(self.port),
            "-U",
            USER,
            "-d",
            "postgres",
            "-q",
            "-c",
            f"CREATE DATABASE {name}",
        )
        return name

    def url(self, database: str) -> str:
        """A URL for C{database} over TCP, without the password (L{password_file} has it)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"


_shared: list[PostgresCluster] = []


def shared_cluster() -> PostgresCluster:
    """The cluster of this test process, started at the first call."""
    if not _shared:
        cluster = PostgresCluster()
        try:
            cluster.start()
        except BaseException:
            cluster.remove()
            raise
        _shared.append(cluster)
        atexit.register(cluster.remove)
    return _shared[0]
