"""
A stand-in authorization server for the resource-server tests: its own keys (made
here with cryptography), RFC 8414 metadata, a JWKS it can rotate, and an RFC 7662
introspection endpoint; a twisted.web resource, served through StubTreq or a real
loopback port.

For the client tests it is a token endpoint too: the client-credentials grant for
clients it knows by secret (C{client_secret_basic} or C{_post}) or by public key
(C{private_key_jwt}: the assertion's signature, C{iss}, C{sub}, C{aud}, C{exp} and a
C{jti} never seen before are checked, and what was wrong is kept in
C{assertion_errors}), the authorization code grant (C{/auth} redirects at once with a
code), and refresh tokens it can revoke.  The access tokens it issues are JWTs signed
with C{k1}, so a resource server trusting it accepts them.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

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
            "authorization_endpoint": issuer + "/auth",
            "token_endpoint": issuer + "/token",
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "token_endpoint_auth_methods_supported": [
                "client_secret_basic",
                "client_secret_post",
                "private_key_jwt",
            ],
            "token_endpoint_auth_signing_alg_values_supported": [
                "RS256",
                "PS256",
                "ES256",
            ],
        }
        #: Clients known by their secret, and by the public key of their assertions.
        self.client_secrets: dict[str, str] = {}
        self.client_keys: dict[str, Any] = {}
        #: The form of every token request, in order.
        self.token_requests: list[dict[str, str]] = []
        #: Why each refused client assertion was refused.
        self.assertion_errors: list[str] = []
        self.seen_jti: set[str] = set()
        #: The refresh tokens that are still good, with their client.
        self.refresh_tokens: dict[str, str] = {}
        self.codes: dict[str, str] = {}
        #: Every access and refresh token issued, in order.
        self.issued: list[str] = []
        #: Whether token answers carry a refresh token, and how long access lasts.
        self.issue_refresh = True
        self.lifetime = 300
        #: Where the issuer's time comes from (the tests of a daemon use real time).
        self.now = time.time

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
        if path == self.prefix + "/token":
            return self._token(request)
        if path == self.prefix + "/auth":
            return self._authorize(request)
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

    def _authorize(self, request: Request) -> bytes:
        """Sign in at once: redirect with a code, the state and the issuer (RFC 9207)."""
        query = {k.decode(): v[0].decode() for k, v in request.args.items()}
        code = secrets.token_urlsafe(12)
        self.codes[code] = query.get("client_id", "")
        params = {"code": code, "state": query.get("state", ""), "iss": self.issuer}
        request.setResponseCode(302)
        request.setHeader(b"location", (query["redirect_uri"] + "?" + urlencode(params)).encode())
        return b""

    def _client(self, request: Request, form: dict[str, str]) -> str | None:
        """The client the request authenticates as, or C{None}."""
        header = (request.getHeader(b"authorization") or b"").decode()
        if header.startswith("Basic "):
            pair = base64.b64decode(header[6:]).decode()
            client_id, _, secret = pair.partition(":")
            client_id, secret = unquote(client_id), unquote(secret)
        elif "client_assertion" in form:
            return self._assertion(form)
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if client_id in self.client_secrets and self.client_secrets[client_id] == secret:
            return client_id
        if client_id and client_id not in self.client_secrets and not secret:
            return client_id  # a public client
        return None

    def _assertion(self, form: dict[str, str]) -> str | None:
        why = self._assertion_fault(form)
        if why is not None:
            self.assertion_errors.append(why)
            return None
        return str(jwt.decode(form["client_assertion"], options={"verify_signature": False})["sub"])

    def _assertion_fault(self, form: dict[str, str]) -> str | None:
        """Why the client assertion is refused, or C{None} when it is good."""
        if form.get("client_assertion_type") != (
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        ):
            return "client_assertion_type"
        assertion = form["client_assertion"]
        client_id = jwt.decode(assertion, options={"verify_signature": False}).get("sub")
        key = self.client_keys.get(str(client_id))
        if key is None:
            return f"unknown client {client_id!r}"
        try:
            claims = jwt.decode(
                assertion,
                key.public_key(),
                algorithms=["RS256", "RS384", "PS256", "ES256", "ES384"],
                audience=self.issuer,
                issuer=client_id,
                # Its time is checked below, by the issuer's clock.
                options={
                    "require": ["exp", "jti", "iss", "sub", "aud"],
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.InvalidTokenError as error:
            return f"{type(error).__name__}: {error}"
        if claims["exp"] <= self.now():
            return "expired"
        if claims["exp"] - self.now() > 300:
            return "exp too far ahead"
        if claims["jti"] in self.seen_jti:
            return "jti reused"
        self.seen_jti.add(claims["jti"])
        return None

    def _token(self, request: Request) -> bytes:
        assert request.content is not None
        form = {k: v[0] for k, v in parse_qs(request.content.read().decode()).items()}
        self.token_requests.append(form)
        client = self._client(request, form)
        if client is None:
            request.setResponseCode(401)
            return b'{"error":"invalid_client"}'
        grant = form.get("grant_type")
        if grant == "authorization_code":
            if self.codes.pop(form.get("code", ""), None) != client:
                request.setResponseCode(400)
                return b'{"error":"invalid_grant"}'
        elif grant == "refresh_token":
            if self.refresh_tokens.get(form.get("refresh_token", "")) != client:
                request.setResponseCode(400)
                return b'{"error":"invalid_grant"}'
        elif grant != "client_credentials":
            request.setResponseCode(400)
            return b'{"error":"unsupported_grant_type"}'
        access = self.mint(
            self.now(),
            sub=client,
            aud=form.get("resource", AUDIENCE),
            exp=int(self.now()) + self.lifetime,
            scope=form.get("scope", "mcp:tools"),
            jti=secrets.token_urlsafe(8),
        )
        answer: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.lifetime,
        }
        self.issued.append(access)
        if self.issue_refresh:
            refresh = "rt-" + secrets.token_urlsafe(24)
            self.refresh_tokens[refresh] = client
            self.issued.append(refresh)
            answer["refresh_token"] = refresh
        return json.dumps(answer).encode()

    def revoke_all(self) -> None:
        """Every refresh token issued stops working."""
        self.refresh_tokens.clear()
