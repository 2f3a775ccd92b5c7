"""
Tests for the keys C{requestState} is signed with: the file C{proto.stateKeyFile} names
(L{mcpx.settings.state_keys}) and the ring made of it (L{mcpx.server.request_state.KeyRing}):
the newest key signs, an older one verifies for one state TTL after its successor took
over and not after, a reload that drops a key keeps it for one TTL, and no secret is ever
in an error, a log line or a repr.
"""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from typing import Any, cast

from twisted.logger import ILogObserver, LogLevel, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.config import daemon_config
from mcpx.server.request_state import KeyRing, RequestState, StateSigner, binding
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import load_settings
from mcpx.settings.state_keys import StateKeyError, read_state_keys
from mcpx.spec.questions import ELICIT
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from tests.server.test_asking import (
    ACCEPTED,
    ELICITING,
    FORM,
    Gateway,
    call_params,
    error_of,
    resumable,
)

METHOD = "tools/call"
PARAMS: dict[str, Any] = {"name": "github__create_issue", "arguments": {"title": "bug"}}
TTL = 1800.0

SECRET_1 = base64.urlsafe_b64encode(b"1" * 32).decode().rstrip("=")
SECRET_2 = base64.urlsafe_b64encode(b"2" * 32).decode().rstrip("=")


def key_of(token: str) -> str:
    """The key id a state names."""
    payload = token.partition(".")[0]
    body: dict[str, str] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    key_id: str = body["k"]
    return key_id


class KeyFileTests(SynchronousTestCase):
    def write(self, text: str, mode: int = 0o600) -> str:
        path: str = os.path.abspath(self.mktemp())
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def test_format(self) -> None:
        """Comments and blank lines are skipped; times are ISO UTC or Unix seconds."""
        path = self.write(
            f"# the keys of the fleet\n\nk2 2026-12-01T00:00:00Z {SECRET_2}\nk1 1000 {SECRET_1}=\n"
        )
        keys = read_state_keys(path)
        december = datetime(2026, 12, 1, tzinfo=UTC).timestamp()
        self.assertEqual([(k.id, k.since) for k in keys], [("k1", 1000.0), ("k2", december)])
        self.assertEqual(keys[0].secret, b"1" * 32)
        self.assertNotIn(SECRET_1, repr(keys))
        self.assertNotIn(repr(b"1" * 32), repr(keys))

    def test_refused_files(self) -> None:
        """
        A file others may read, a short secret, a bad line, a repeated id or no key at
        all are each refused with a reason naming the file, never the secret.
        """
        short = base64.urlsafe_b64encode(b"s" * 16).decode()
        cases = {
            "read by other users": self.write(f"k1 0 {SECRET_1}\n", 0o604),
            "shorter than 32 bytes": self.write(f"k1 0 {short}\n"),
            "expected <id> <since> <secret>": self.write(f"k1 {SECRET_1}\n"),
            "given twice": self.write(f"k1 0 {SECRET_1}\nk1 5 {SECRET_2}\n"),
            "holds no key": self.write("# nothing yet\n"),
            "must be UTC": self.write(f"k1 2026-12-01T00:00:00 {SECRET_1}\n"),
            "cannot be read": os.path.join(os.path.abspath(self.mktemp()), "absent"),
            "must be an absolute path": "keys/of-the-fleet",
        }
        for why, path in cases.items():
            with self.assertRaises(StateKeyError) as caught:
                read_state_keys(path)
            message = str(caught.exception)
            self.assertIn(why, message)
            self.assertIn(path, message)
            for secret in (SECRET_1, SECRET_2, short):
                self.assertNotIn(secret, message)

    def test_daemon_config_refuses_a_bad_file(self) -> None:
        """
        The daemon's configuration is refused before anything starts when its key file
        cannot be used (a settings error, printed as such), and taken when it can.
        """
        directory = self.mktemp()
        os.makedirs(directory)
        config = os.path.join(directory, "servers.json")
        with open(config, "w") as f:
            f.write('{"servers": {}}')
        path = self.write(f"k1 0 {SECRET_1}\n", 0o644)
        env = {
            "MCPX_STATE_DIR": directory,
            "XDG_CONFIG_HOME": directory,
            "MCPX_CONFIG": config,
            "MCPX_PROTO_STATE_KEY_FILE": path,
        }
        settings, servers = load_settings(env, {})
        with self.assertRaises(SettingsError) as caught:
            daemon_config(settings, servers, env)
        self.assertIn("may be read by other users", str(caught.exception))
        os.chmod(path, 0o600)
        self.assertIsNotNone(daemon_config(settings, servers, env))

    def test_daemon_refuses_a_readable_file(self) -> None:
        """A daemon given a key file other users may read does not start."""
        path = self.write(f"k1 0 {SECRET_1}\n", 0o644)
        with self.assertRaises(StateKeyError) as caught:
            Gateway(settings={"proto.stateKeyFile": path})
        self.assertIn("chmod o-rwx", str(caught.exception))


class RotationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = os.path.abspath(self.mktemp())
        self.write(f"k1 0 {SECRET_1}\n")
        self.signer = StateSigner(ring=KeyRing.from_file(self.path, TTL, 0.0))
        self.other = StateSigner(ring=KeyRing.from_file(self.path, TTL, 0.0))

    def write(self, text: str) -> None:
        with open(self.path, "w") as f:
            f.write(text)
        os.chmod(self.path, 0o600)

    def issue(self, signer: StateSigner, now: float) -> str:
        """A state signed at C{now}, expiring long after (the key rule is checked alone)."""
        state = RequestState("call-1", binding(METHOD, PARAMS), 1, now + 10 * TTL, None, "n", "d")
        return signer.issue(state, now)

    def refused(self, signer: StateSigner, token: str, now: float) -> str:
        with self.assertRaises(RpcError) as caught:
            signer.verify(token, METHOD, PARAMS, now)
        self.assertEqual(caught.exception.code, INVALID_PARAMS)
        message: str = caught.exception.message
        return message

    def test_another_daemon_with_the_file_verifies(self) -> None:
        """Two rings of one file verify each other's states; the state names its key."""
        token = self.issue(self.signer, 10.0)
        self.assertEqual(key_of(token), "k1")
        self.assertEqual(self.other.verify(token, METHOD, PARAMS, 20.0).call, "call-1")

    def test_rotated_key_verifies_for_one_ttl(self) -> None:
        """
        A key added with a later since signs from then on; states of the key before it
        still verify until one TTL after the new key took over, and are refused after,
        saying the key stopped signing.
        """
        old = self.issue(self.signer, 50.0)
        self.write(f"k1 0 {SECRET_1}\nk2 100 {SECRET_2}\n")
        # Before k2's time, k1 still signs (the file may reach the daemons early).
        self.assertEqual(key_of(self.issue(self.signer, 60.0)), "k1")
        self.assertEqual(key_of(self.issue(self.signer, 101.0)), "k2")
        self.assertEqual(self.other.verify(old, METHOD, PARAMS, 100.0 + TTL).call, "call-1")
        message = self.refused(self.other, old, 101.0 + TTL)
        self.assertIn("k1, which stopped signing more than proto.stateTTL ago", message)

    def test_key_dropped_from_the_file_kept_for_one_ttl(self) -> None:
        """A reload whose file no longer has a key keeps verifying it for one TTL."""
        old = self.issue(self.signer, 10.0)
        self.write(f"k2 0 {SECRET_2}\n")
        self.assertEqual(key_of(self.issue(self.signer, 20.0)), "k2")
        self.assertEqual(self.signer.verify(old, METHOD, PARAMS, 20.0 + TTL).call, "call-1")
        message = self.refused(self.signer, old, 21.0 + TTL)
        self.assertIn("stopped signing", message)

    def test_unknown_key(self) -> None:
        """A state of a key this daemon's file lacks says the daemons must share the file."""
        elsewhere = os.path.abspath(self.mktemp())
        with open(elsewhere, "w") as f:
            f.write(f"k9 0 {SECRET_2}\n")
        os.chmod(elsewhere, 0o600)
        foreign = StateSigner(ring=KeyRing.from_file(elsewhere, TTL, 0.0))
        message = self.refused(self.signer, self.issue(foreign, 5.0), 6.0)
        self.assertIn("(k9)", message)
        self.assertIn("proto.stateKeyFile", message)

    def test_bad_file_on_reload_keeps_the_keys(self) -> None:
        """
        A key file made unusable while the daemon runs leaves the keys as they were, and
        the warning logged does not quote the file's content.
        """
        events: list[Any] = []
        observer = cast(ILogObserver, events.append)
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        token = self.issue(self.signer, 10.0)
        self.write(f"k2 0 {SECRET_2[:10]}\n")
        self.assertEqual(key_of(self.issue(self.signer, 20.0)), "k1")
        self.assertEqual(self.signer.verify(token, METHOD, PARAMS, 20.0).call, "call-1")
        warned = [e for e in events if e.get("log_level") == LogLevel.warn]
        self.assertTrue(warned)
        for event in warned:
            self.assertNotIn(SECRET_2[:10], str(event.get("why")))


class NoSharedStoreTests(SynchronousTestCase):
    def test_state_of_another_process_without_a_store(self) -> None:
        """
        Two daemons given one key file but no shared store: a state the first issued is
        genuine to the second, which says it cannot reach the call without store.url.
        """
        path = os.path.abspath(self.mktemp())
        with open(path, "w") as f:
            f.write(f"k1 0 {SECRET_1}\n")
        os.chmod(path, 0o600)
        first, second = (Gateway(settings={"proto.stateKeyFile": path}) for _ in range(2))
        params = call_params(ELICITING)
        answering = first.handle(first.modern_conn(), "tools/call", params)
        resumable(first.caller()).ask(ELICIT, FORM, "q1")
        first.clock.advance(0)
        state = self.successResultOf(answering)["requestState"]
        retry = {**params, "inputResponses": {"q1": ACCEPTED}, "requestState": state}
        error = error_of(self, second.handle(second.modern_conn(), "tools/call", retry))
        self.assertEqual(error.code, INTERNAL_ERROR)
        self.assertIn("cannot be reached without a shared store (store.url)", error.message)
