# -*- test-case-name: tests.scripts.test_runner -*-
"""
What runs leave behind: the files a program wrote under C{/out}, and answers too large
to hand to a model inline, as resources C{mcpx://artifacts/<run>/<name>}.

Each run's files live in C{<state>/artifacts/<run>/}; who made them is kept here, in
memory, and only that identity may list or read them.  A run's files are deleted
C{exec.artifactRetention} after it ends, and all of them when the daemon starts (their
owners are not known any more).  Run ids are random, but the identity check, not the
id, is what keeps one caller out of another's files.
"""

from __future__ import annotations

import base64
import mimetypes
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from attrs import define, field
from twisted.internet.interfaces import IDelayedCall, IReactorTime

#: Where the runs' files live, in the state directory.
ARTIFACTS_DIRECTORY: Final = "artifacts"

#: The scheme and host of every artifact URI.
PREFIX: Final = "mcpx://artifacts/"

#: How many characters of a text artifact its listing shows.
PREVIEW: Final = 200

#: The name an answer kept for being too large is stored under.
RESULT_NAME: Final = "result.txt"


class UnknownArtifact(Exception):
    """No artifact by that URI that this identity may see."""


def artifact_uri(run: str, name: str) -> str:
    return f"{PREFIX}{run}/{name}"


def parse_uri(uri: str) -> tuple[str, str] | None:
    """The run and file name of an artifact URI, or C{None} when it is not one."""
    if not uri.startswith(PREFIX):
        return None
    run, _, name = uri[len(PREFIX) :].partition("/")
    if not run or not name or "/" in name or name in (".", ".."):
        return None
    return run, name


def mime_type(name: str) -> str:
    guessed, _ = mimetypes.guess_type(name)
    return guessed or "application/octet-stream"


@define(eq=False)
class RunFiles:
    """The directory of one run, and whose it is."""

    run: str
    identity: str
    directory: Path
    expiry: IDelayedCall | None = None


@define(eq=False)
class Artifacts:
    """
    Every run's files, by run id.

    @ivar root: C{<state>/artifacts}.
    @ivar retention: seconds a run's files are kept once it has ended.
    """

    root: Path
    clock: IReactorTime
    retention: float
    _runs: dict[str, RunFiles] = field(factory=dict)

    def start(self) -> None:
        """Forget the files of runs before this daemon: nobody may read them any more."""
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def directory_for(self, run: str, identity: str) -> Path:
        """A new, empty directory for C{run}'s files, owned by C{identity}."""
        directory = self.root / run
        directory.mkdir(parents=True, mode=0o700)
        self._runs[run] = RunFiles(run, identity, directory)
        return directory

    def ended(self, run: str) -> None:
        """The run is over: its files go after the retention (at once when there are none)."""
        files = self._runs.get(run)
        if files is None:
            return
        if not any(files.directory.iterdir()):
            self.remove(run)
            return
        files.expiry = self.clock.callLater(self.retention, self.remove, run)

    def remove(self, run: str) -> None:
        files = self._runs.pop(run, None)
        if files is None:
            return
        if files.expiry is not None and files.expiry.active():
            files.expiry.cancel()
        shutil.rmtree(files.directory, ignore_errors=True)

    def close(self) -> None:
        for run in list(self._runs):
            self.remove(run)

    def keep(self, run: str, name: str, data: bytes) -> dict[str, Any]:
        """Store C{data} as artifact C{name} of C{run} (an answer too large to inline)."""
        files = self._runs[run]
        (files.directory / name).write_bytes(data)
        return self._describe(files, name)

    def _files(self, files: RunFiles) -> Iterator[str]:
        try:
            entries = sorted(os.scandir(files.directory), key=lambda e: e.name)
        except FileNotFoundError:
            return
        for entry in entries:
            # Only plain files: a program cannot make links, but nothing here trusts that.
            if entry.is_file(follow_symlinks=False):
                yield entry.name

    def _describe(self, files: RunFiles, name: str) -> dict[str, Any]:
        path = files.directory / name
        size = path.stat().st_size
        mime = mime_type(name)
        shown: dict[str, Any] = {
            "uri": artifact_uri(files.run, name),
            "name": name,
            "mimeType": mime,
            "size": size,
        }
        with path.open("rb") as f:
            head = f.read(PREVIEW * 4)
        text = head.decode("utf-8", errors="ignore")
        if text and (mime.startswith("text/") or mime.endswith(("json", "xml", "csv"))):
            shown["description"] = text[:PREVIEW]
        return shown

    def of_run(self, run: str) -> list[dict[str, Any]]:
        files = self._runs.get(run)
        if files is None:
            return []
        return [self._describe(files, name) for name in self._files(files)]

    def listed(self, identity: str) -> list[dict[str, Any]]:
        """Every artifact C{identity} made, as MCP C{Resource}s (with C{size})."""
        found: list[dict[str, Any]] = []
        for files in self._runs.values():
            if files.identity == identity:
                found.extend(self._describe(files, name) for name in self._files(files))
        return found

    def _path(self, identity: str, uri: str) -> Path:
        parsed = parse_uri(uri)
        files = self._runs.get(parsed[0]) if parsed is not None else None
        if parsed is None or files is None or files.identity != identity:
            raise UnknownArtifact(uri)
        name = parsed[1]
        if name not in set(self._files(files)):
            raise UnknownArtifact(uri)
        return files.directory / name

    def read(self, identity: str, uri: str, max_size: int) -> dict[str, Any]:
        """
        One artifact whole, as a C{ReadResourceResult}'s content: text when it is UTF-8,
        base64 otherwise.

        @param max_size: the most bytes the content may take once encoded (base64 makes
            a binary file a third larger).
        @raise UnknownArtifact: for a URI that is not C{identity}'s artifact.
        @raise ArtifactTooLarge: for one larger than C{max_size} bytes.
        """
        path = self._path(identity, uri)
        size = path.stat().st_size
        if size > max_size:
            raise ArtifactTooLarge(uri, size, max_size)
        data = path.read_bytes()
        mime = mime_type(path.name)
        try:
            return {"uri": uri, "mimeType": mime, "text": data.decode("utf-8")}
        except UnicodeDecodeError:
            if base64_size(size) > max_size:
                raise ArtifactTooLarge(uri, size, max_size) from None
            return {"uri": uri, "mimeType": mime, "blob": base64.b64encode(data).decode("ascii")}

    def read_range(
        self, identity: str, uri: str, offset: int, length: int
    ) -> tuple[dict[str, Any], int, int]:
        """
        C{length} bytes of an artifact from C{offset} (fewer at its end), always as a
        base64 C{blob}: a range may cut a UTF-8 character in two.

        @return: the content, the bytes it holds, and the artifact's whole size.
        @raise UnknownArtifact: for a URI that is not C{identity}'s artifact.
        """
        path = self._path(identity, uri)
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(min(offset, size))
            data = f.read(length)
        content = {
            "uri": uri,
            "mimeType": mime_type(path.name),
            "blob": base64.b64encode(data).decode("ascii"),
        }
        return content, len(data), size


def base64_size(size: int) -> int:
    """The length of C{size} bytes in base64."""
    return 4 * ((size + 2) // 3)


class ArtifactTooLarge(ValueError):
    """An artifact too large to read whole in one message."""

    def __init__(self, uri: str, size: int, limit: int) -> None:
        super().__init__(
            f"artifact {uri} is {size} bytes, more than one message may carry ({limit}, "
            "transport.maxMessageSize); read it in ranges: POST /v1/artifacts/read with "
            "offset and length, or `mcpx artifacts read URI`"
        )
        self.size = size
        self.limit = limit
