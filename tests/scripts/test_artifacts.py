"""
L{mcpx.scripts.artifacts}: an artifact read whole up to the message cap (counted as
encoded), read in ranges beyond it, and only by the identity that made it.
"""

from __future__ import annotations

import base64
from pathlib import Path

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.scripts.artifacts import Artifacts, ArtifactTooLarge, UnknownArtifact, artifact_uri


class ArtifactReadTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.store = Artifacts(Path(self.mktemp()), Clock(), 60.0)
        self.store.start()
        self.out = self.store.directory_for("run-1", "alice")

    def write(self, name: str, data: bytes) -> str:
        (self.out / name).write_bytes(data)
        return artifact_uri("run-1", name)

    def test_whole_text_and_binary(self) -> None:
        text = self.write("notes.txt", "héllo".encode())
        binary = self.write("raw.bin", b"\xff\x00\x01")
        self.assertEqual(self.store.read("alice", text, 1024)["text"], "héllo")
        self.assertEqual(
            base64.b64decode(self.store.read("alice", binary, 1024)["blob"]), b"\xff\x00\x01"
        )

    def test_whole_read_refused_over_the_cap_counting_base64(self) -> None:
        """A binary file whose base64 would not fit is refused though its bytes would."""
        uri = self.write("raw.bin", b"\xff" * 900)
        with self.assertRaises(ArtifactTooLarge) as caught:
            self.store.read("alice", uri, 1000)
        self.assertIn("read it in ranges", str(caught.exception))
        self.assertIn("transport.maxMessageSize", str(caught.exception))
        self.assertIn("blob", self.store.read("alice", uri, 1200))
        text = self.write("big.txt", b"x" * 1001)
        self.assertRaises(ArtifactTooLarge, self.store.read, "alice", text, 1000)

    def test_ranges_put_back_together_are_the_file(self) -> None:
        data = "é".encode() * 2500  # a range boundary cuts characters in two
        uri = self.write("big.txt", data)
        pieces, offset = [], 0
        while True:
            content, got, size = self.store.read_range("alice", uri, offset, 999)
            self.assertEqual(size, len(data))
            pieces.append(base64.b64decode(content["blob"]))
            self.assertEqual(len(pieces[-1]), got)
            offset += got
            if got == 0 or offset >= size:
                break
        self.assertEqual(b"".join(pieces), data)
        self.assertEqual(len(pieces), 6)

    def test_range_past_the_end_is_empty(self) -> None:
        uri = self.write("small.txt", b"abc")
        content, got, size = self.store.read_range("alice", uri, 10, 5)
        self.assertEqual((content["blob"], got, size), ("", 0, 3))

    def test_another_identity_reads_no_range(self) -> None:
        uri = self.write("secret.txt", b"mine")
        self.assertRaises(UnknownArtifact, self.store.read_range, "mallory", uri, 0, 10)
        self.assertRaises(UnknownArtifact, self.store.read, "mallory", uri, 1024)
