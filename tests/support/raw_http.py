"""
A plain HTTP client in a process of its own, for tests against a real daemon that
need headers a browser or another local user would send.

Run as C{python raw_http.py '<json list of requests>'}; each request is an object with
C{method}, C{path}, optional C{headers} and C{body} (JSON, sent as given), and either
C{port} (127.0.0.1) or C{unix} (a socket path).  Prints one JSON list: for each request
C{status}, C{headers} (lowercased names) and C{body} (text).  Standard library only, so
it runs as any user.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
from typing import Any


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        http.client.HTTPConnection.__init__(self, "localhost", timeout=30)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(self._path)
        self.sock = sock


def send(spec: dict[str, Any]) -> dict[str, Any]:
    if "unix" in spec:
        connection: http.client.HTTPConnection = _UnixConnection(spec["unix"])
    else:
        connection = http.client.HTTPConnection("127.0.0.1", spec["port"], timeout=30)
    headers: dict[str, str] = spec.get("headers", {})
    body = spec.get("body")
    try:
        # skip_host: the Host header, if any, is the one the spec gives.
        connection.putrequest(spec["method"], spec["path"], skip_host="Host" in headers)
        data = None if body is None else json.dumps(body).encode("utf-8")
        for name, value in headers.items():
            connection.putheader(name, value)
        if data is not None or spec["method"] == "POST":
            connection.putheader("Content-Length", str(len(data or b"")))
        connection.endheaders(data)
        response = connection.getresponse()
        return {
            "status": response.status,
            "headers": {k.lower(): v for k, v in response.getheaders()},
            "body": response.read().decode("utf-8", "replace"),
        }
    except OSError as e:
        return {"status": 0, "headers": {}, "body": f"{type(e).__name__}: {e}"}
    finally:
        connection.close()


if __name__ == "__main__":
    print(json.dumps([send(spec) for spec in json.loads(sys.argv[1])]))
