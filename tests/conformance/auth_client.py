"""
The conformance suite's OAuth client scenarios, through the product: a daemon with one
server entry at the suite's URL, C{mcpx auth login} with C{$BROWSER} set to
L{tests.conformance.browser}, then C{mcpx tools} and C{mcpx call}.  The
client-credentials extension's scenarios (L{MACHINE_SCENARIOS}) have nobody sign in:
the entry holds the client id and the secret or private key the suite hands out, and
C{mcpx tools} and C{mcpx call} simply work.

Run by L{tests.conformance.client} for every C{auth/*} scenario; exit status 0 and the
OK mark when the calls went through, 1 and the reason on stderr otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: Seconds each step (the daemon starting, one mcpx command) may take; the suite runs
#: every scenario at once, so on a loaded machine steps are slow.
STEP_TIMEOUT = 90

#: Printed on stdout when mcpx refused to sign in or the calls failed.
REFUSED_MARK = "conformance client: {scenario} refused"

#: How many times the user signs in before giving up.
MAX_SIGN_INS = 3


#: The scenarios of the client-credentials extension: nobody signs in.
MACHINE_SCENARIOS = frozenset({"auth/client-credentials-basic", "auth/client-credentials-jwt"})


def server_entry(url: str, context: Mapping[str, object], home: Path) -> dict[str, object]:
    """
    The server entry: pre-registered client credentials when the suite hands some out,
    and for the client-credentials scenarios the grant, with the secret or the private
    key (written to a file of C{home} only the daemon's user can read).
    """
    auth: dict[str, object] = {"type": "oauth"}
    if context.get("name") in MACHINE_SCENARIOS:
        auth["grant"] = "client_credentials"
        auth["clientId"] = context["client_id"]
        pem = context.get("private_key_pem")
        if isinstance(pem, str):
            key = home / "client-key.pem"
            key.touch(mode=0o600)
            key.write_text(pem)
            auth["privateKeyFile"] = str(key)
            if isinstance(context.get("signing_algorithm"), str):
                auth["signingAlgorithm"] = context["signing_algorithm"]
        else:
            auth["clientSecret"] = context["client_secret"]
    elif isinstance(context.get("client_id"), str):
        auth["clientId"] = context["client_id"]
        if isinstance(context.get("client_secret"), str):
            auth["clientSecret"] = context["client_secret"]
    else:
        # The suite's client ID metadata document URL: used where the server supports it.
        auth["clientMetadataUrl"] = "https://conformance-test.local/client-metadata.json"
    return {"url": url, "auth": auth}


def run(url: str, environ: Mapping[str, str]) -> None:
    context = json.loads(environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    home = Path(tempfile.mkdtemp(prefix="mcpx-oauth-"))
    try:
        config = home / "config.json"
        config.write_text(json.dumps({"servers": {"remote": server_entry(url, context, home)}}))
        browser = home / "browser"
        browser.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "browser.py"}" "$1"\n')
        browser.chmod(0o700)
        env = {
            **environ,
            "MCPX_STATE_DIR": str(home / "state"),
            "MCPX_CONFIG": str(config),
            "XDG_CONFIG_HOME": str(home),
            "BROWSER": str(browser),
        }
        log = home / "daemon.log"
        with log.open("wb") as out:
            daemon = subprocess.Popen(
                # The suite runs scenarios side by side: no fixed TCP port, the CLI
                # uses the unix socket anyway.
                [
                    sys.executable,
                    "-m",
                    "mcpx",
                    "daemon",
                    "--daemon-listen",
                    "tcp:0:interface=127.0.0.1",
                ],
                env=env,
                cwd=str(REPO),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            deadline = time.monotonic() + STEP_TIMEOUT
            while b"daemon is running" not in log.read_bytes():
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the daemon did not start: {log.read_text()}")
                time.sleep(0.05)

            def mcpx(*arguments: str) -> str:
                done = subprocess.run(
                    [sys.executable, "-m", "mcpx", *arguments],
                    env=env,
                    cwd=str(REPO),
                    capture_output=True,
                    text=True,
                    timeout=STEP_TIMEOUT,
                    check=False,
                )
                print(f"$ mcpx {' '.join(arguments)} -> {done.returncode}", file=sys.stderr)
                sys.stderr.write(done.stderr)
                if done.returncode != 0:
                    raise RuntimeError(f"mcpx {arguments[0]} failed: {done.stderr.strip()}")
                return done.stdout

            # As a user would: sign in, and sign in again when an error says to (a
            # step-up to more scopes), MAX_SIGN_INS times in all.
            sign_ins = [0]

            def signed_in(*arguments: str) -> str:
                while True:
                    try:
                        return mcpx(*arguments)
                    except RuntimeError as error:
                        if "mcpx auth login" not in str(error) or sign_ins[0] >= MAX_SIGN_INS:
                            raise
                    sign_ins[0] += 1
                    mcpx("auth", "login", "remote", "--wait", str(STEP_TIMEOUT))

            if context.get("name") in MACHINE_SCENARIOS:
                sign_ins[0] = MAX_SIGN_INS  # nobody signs in, ever
            else:
                sign_ins[0] += 1
                mcpx("auth", "login", "remote", "--wait", str(STEP_TIMEOUT))
            listed = json.loads(signed_in("tools", "remote", "--json"))
            tools = listed.get("tools", [])
            if tools:
                signed_in("call", "remote", tools[0]["name"], "--json")
        finally:
            daemon.terminate()
            try:
                daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daemon.kill()
            sys.stderr.write(log.read_text()[-3000:])
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(url: str, scenario: str) -> int:
    try:
        run(url, os.environ)
    except Exception as error:
        print(f"conformance client: {scenario} failed: {error}", file=sys.stderr)
        # On stdout too: where the right outcome is a refusal, the test checks for it.
        print(REFUSED_MARK.format(scenario=scenario), flush=True)
        return 1
    print(f"conformance client: {scenario} ok", flush=True)
    return 0
