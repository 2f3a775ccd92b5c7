# -*- test-case-name: tests.auth.test_client_credentials -*-
"""
The private key of an C{oauth} block's C{"privateKeyFile"}: the key mcpx signs its
client assertions with (RFC 7523 C{private_key_jwt}) for the client-credentials grant.

The file is read when the configuration is read (at start and on reload, like the
configuration file itself), so a missing, unreadable or malformed key is a settings
error naming the file, never a failure at the first call.  Its contents are held as a
L{Secret}; no error here quotes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from mcpx.settings.servers import ClientKey, Secret

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

#: The algorithms an RSA key may sign with.
RSA_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")

#: The one algorithm of each elliptic curve (RFC 7518 §3.4).
_CURVE_ALGORITHMS: Final = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}


class ClientKeyError(ValueError):
    """The key file cannot be used; the message says why, never what it holds."""


def algorithms_for(key: PrivateKeyTypes) -> tuple[str, ...]:
    """The algorithms C{key} can sign with, the default first."""
    # Deferred for memory: cryptography (several MB) loads only for a privateKeyFile.
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, rsa.RSAPrivateKey):
        return RSA_ALGORITHMS
    if isinstance(key, ec.EllipticCurvePrivateKey):
        found = _CURVE_ALGORITHMS.get(key.curve.name)
        return (found,) if found is not None else ()
    if isinstance(key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)):
        return ("EdDSA",)
    return ()


def parse_key(pem: bytes) -> PrivateKeyTypes:
    """The private key in PEM text; L{ClientKeyError} when there is none."""
    # Deferred for memory, as in algorithms_for.
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        return load_pem_private_key(pem, password=None)
    except TypeError as error:
        raise ClientKeyError("is encrypted; give an unencrypted PEM private key") from error
    except (ValueError, UnsupportedAlgorithm) as error:
        raise ClientKeyError("holds no PEM private key mcpx can read") from error


def read_client_key(path: str, algorithm: str | None) -> ClientKey:
    """
    Read and check the key at C{path} for signing with C{algorithm} (by default the
    key type's usual one: RS256 for RSA, ES256/ES384/ES512 by curve, EdDSA).

    @raise ClientKeyError: the path is not absolute, the file cannot be read, holds no
        private key, or the key cannot sign with C{algorithm}.
    """
    expanded = Path(path).expanduser()
    if not expanded.is_absolute():
        raise ClientKeyError("must be an absolute path (or start with ~)")
    try:
        pem = expanded.read_bytes()
    except OSError as error:
        raise ClientKeyError(f"cannot be read ({error.strerror or error})") from error
    usable = algorithms_for(parse_key(pem))
    if not usable:
        raise ClientKeyError("holds a key of a type JWS cannot sign with")
    chosen = algorithm or usable[0]
    if chosen not in usable:
        raise ClientKeyError(
            f"holds a key that cannot sign with {chosen}; it signs with {', '.join(usable)}"
        )
    return ClientKey(str(expanded), Secret(pem.decode("ascii", "replace")), chosen)
