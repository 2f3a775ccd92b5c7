# -*- test-case-name: tests.upstream.test_remote_faults -*-
"""
A remote server's own TLS settings (C{tls} in its configuration): the authorities to
trust, a client certificate for mutual TLS, and the name its certificate must carry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twisted.internet.ssl import (
    Certificate,
    PrivateCertificate,
    optionsForClientTLS,
    platformTrust,
    trustRootFromCertificates,
)
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from mcpx.settings.servers import Tls

_END_CERTIFICATE = b"-----END CERTIFICATE-----"


class TlsFileError(ValueError):
    """A file named by a server's C{tls} settings could not be read or is not PEM."""


def _read(server: str, field: str, path: str) -> bytes:
    try:
        # Read once, when the server's channel is made: a few kilobytes of local file.
        return Path(path).expanduser().read_bytes()
    except OSError as e:
        raise TlsFileError(
            f"server {server!r}: tls.{field}: cannot read {path}: {e.strerror}"
        ) from None


def _certificates(server: str, path: str) -> list[Certificate]:
    pem = _read(server, "ca", path)
    found = []
    for block in pem.split(_END_CERTIFICATE)[:-1]:
        try:
            found.append(Certificate.loadPEM(block + _END_CERTIFICATE + b"\n"))
        except Exception:
            raise TlsFileError(
                f"server {server!r}: tls.ca: {path} holds something that is not a PEM certificate"
            ) from None
    if not found:
        raise TlsFileError(f"server {server!r}: tls.ca: {path} holds no PEM certificate")
    return found


@implementer(IPolicyForHTTPS)
class ServerTlsPolicy:
    """
    The TLS client options for one remote server: its C{tls.ca} (or the system's
    authorities), its client certificate, and the name to check (C{tls.serverName},
    or the URL's host).
    """

    def __init__(self, server: str, tls: Tls) -> None:
        """
        @raise TlsFileError: a file is missing, unreadable or not PEM.
        """
        self._trust: Any = (
            trustRootFromCertificates(_certificates(server, tls.ca))  # type: ignore[no-untyped-call]
            if tls.ca is not None
            else platformTrust()  # type: ignore[no-untyped-call]
        )
        self._client: PrivateCertificate | None = None
        if tls.cert is not None:
            pem = _read(server, "cert", tls.cert)
            if tls.key is not None:
                pem += b"\n" + _read(server, "key", tls.key)
            try:
                self._client = PrivateCertificate.loadPEM(pem)  # type: ignore[no-untyped-call]
            except Exception:
                raise TlsFileError(
                    f"server {server!r}: tls.cert: {tls.cert} (with tls.key) does not hold "
                    "a PEM certificate and its private key"
                ) from None
        self._server_name = tls.server_name

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:
        name = self._server_name or hostname.decode("ascii")
        return optionsForClientTLS(name, trustRoot=self._trust, clientCertificate=self._client)
