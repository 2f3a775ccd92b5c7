"""
A real OpenSSH server on loopback for the tests of C{--daemon ssh://}: its own host
key, one authorized client key, all of it in the test's temporary directory, driven by
the real OpenSSH client through C{MCPX_SSH_COMMAND} (C{ssh -F <its config>}).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

from twisted.internet.task import deferLater

from tests.support.processes import ChildProcess, free_tcp_port, reactor, spawn

SSHD = Path("/usr/sbin/sshd")


class SshServer:
    """
    One sshd, started by L{start}.

    @ivar port: its loopback port.
    @ivar ssh_command: the value of C{MCPX_SSH_COMMAND} that logs in with the right key.
    @ivar wrong_key_command: ... with a key the server does not accept.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_tcp_port()
        self.child: ChildProcess | None = None
        keys = directory / "keys"
        keys.mkdir(mode=0o700)
        for name in ("host", "client", "stranger"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
                check=True,
            )
        (keys / "authorized_keys").write_text((keys / "client.pub").read_text())
        host_key = (keys / "host.pub").read_text().split()
        (keys / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_key[0]} {host_key[1]}\n")
        self.config = directory / "sshd_config"
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {keys / 'host'}",
                    f"AuthorizedKeysFile {keys / 'authorized_keys'}",
                    f"PidFile {directory / 'sshd.pid'}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PrintMotd no",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )
        self.ssh_command = self._client_config("ssh_config", keys / "client")
        self.wrong_key_command = self._client_config("ssh_config_stranger", keys / "stranger")

    def _client_config(self, name: str, key: Path) -> str:
        config = self.directory / name
        config.write_text(
            "\n".join(
                [
                    "Host *",
                    f"  IdentityFile {key}",
                    "  IdentitiesOnly yes",
                    "  IdentityAgent none",
                    f"  UserKnownHostsFile {self.directory / 'keys' / 'known_hosts'}",
                    "  StrictHostKeyChecking yes",
                    "  LogLevel ERROR",
                    "",
                ]
            )
        )
        return f"{shutil.which('ssh') or 'ssh'} -F {config}"

    @property
    def endpoint(self) -> str:
        return f"ssh://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Start sshd in the foreground (-D) and wait until it accepts connections."""
        # sshd refuses to start without its privilege separation directory.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.child = spawn([str(SSHD), "-D", "-e", "-f", str(self.config)])
        for _ in range(200):
            if self.child.exit_code is not None:
                raise AssertionError(f"sshd exited: {self.child.text()}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            await deferLater(reactor, 0.05, lambda: None)
        raise AssertionError(f"sshd did not listen on {self.port}: {self.child.text()}")

    async def stop(self) -> None:
        child = self.child
        if child is None or child.exit_code is not None:
            return
        child.signal("TERM")
        await child.ended(timeout=10)
