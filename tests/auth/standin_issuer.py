"""
A stand-in authorization server for the resource-server tests: its own keys (made
here with cryptography), RFC 8414 metadata, a JWKS it can rotate, and an RFC 7662
introspection endpoint; a twisted.web resource, served through StubTreq or a real
loopback port.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from twisted.web.resource import Resource
from twisted.web.server import Request

ISSUER = "https://sso.example/realms/tools"
AUDIENCE = "https://mcp.example/mcp"
INTROSPECTION_CLIENT = ("mcpx", "s3cret")


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_jwk(key: Any, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any]
    if isinstance(key, rsa.RSAPrivateKey):
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    else:
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig"})
    return jwk


class StandInIssuer(Resource):
    """
    The authorization server.

    @ivar keys: the signing keys it publishes, by key id.
    @ivar active: introspection answers by opaque token.
    @ivar requests: the paths asked for, in order.
    """

    isLeaf = True

    def __init__(self, issuer: str = ISSUER, path_prefix: str = "/realms/tools") -> None:
        super().__init__()
        self.issuer = issuer
        self.prefix = path_prefix
        self.keys: dict[str, Any] = {"k1": rsa_key(), "e1": ec_key()}
        self.active: dict[str, dict[str, Any]] = {}
        self.requests: list[str] = []
        #: The C{alg} each key's JWK declares, where it declares one.
        self.declared: dict[str, str] = {}
        self.metadata: dict[str, Any] = {
            "issuer": issuer,
            "jwks_uri": issuer + "/certs",
            "introspection_endpoint": issuer + "/introspect",
        }

    def rotate(self) -> None:
        """Retire every key and publish a new one, C{k2}."""
        self.keys = {"k2": rsa_key()}

    def claims(self, now: float, **changes: Any) -> dict[str, Any]:
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "alice",
            "exp": int(now) + 300,
            "nbf": int(now) - 10,
            "scope": "mcp:tools profile",
        }
        claims.update(changes)
        return {key: value for key, value in claims.items() if value is not None}

    def mint(
        self, now: float, *, kid: str = "k1", alg: str | None = None, key: Any = None, **claims: Any
    ) -> str:
        """A token signed with the key C{kid} (or C{key}), with the claims changed as given."""
        signing = self.keys[kid] if key is None else key
        if alg is None:
            alg = "RS256" if isinstance(signing, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(self.claims(now, **claims), signing, algorithm=alg, headers={"kid": kid})

    def render(self, request: Request) -> bytes:
        path = request.path.decode()
        self.requests.append(path)
        request.setHeader(b"content-type", b"application/json")
        if path == "/.well-known/oauth-authorization-server" + self.prefix:
            return json.dumps(self.metadata).encode()
        if path == self.prefix + "/certs":
            keys = [public_jwk(key, kid) for kid, key in self.keys.items()]
            for jwk in keys:
                if jwk["kid"] in self.declared:
                    jwk["alg"] = self.declared[jwk["kid"]]
            return json.dumps({"keys": keys}).encode()
        if path == self.prefix + "/introspect":
            return self._introspect(request)
        request.setResponseCode(404)
        return b"{}"

    def _introspect(self, request: Request) -> bytes:
        expected = base64.b64encode(":".join(INTROSPECTION_CLIENT).encode())
        if request.getHeader(b"authorization") != b"Basic " + expected:
            request.setResponseCode(401)
            return b'{"error":"invalid_client"}'
        assert request.content is not None
        form = parse_qs(request.content.read().decode())
        token = form.get("token", [""])[0]
        return json.dumps(self.active.get(token, {"active": False})).encode()
