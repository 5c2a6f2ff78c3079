"""What a Client presents to a secured server: a bearer token and TLS credentials.

The token travels as "authorization: Bearer <token>" metadata on each LayerService
call (client.py adds it; the health check goes without, as the server exempts it).
It is per-call metadata rather than gRPC call credentials because gRPC refuses call
credentials on plaintext channels, and the server accepts a token over plaintext
(the docs warn that it then travels in clear).

The token is a secret: it is kept in a BearerToken whose repr hides it, and no
error raised here quotes it or the token file's content, only the file's path.
"""
import os
from typing import Optional, Tuple, Union

import grpc

PathLike = Union[str, "os.PathLike[str]"]

AUTHORIZATION = "authorization"


def _valid(token: str) -> bool:
    """One header value the server can compare: printable ASCII without spaces
    (RFC 6750's b64token characters are a subset)."""
    return bool(token) and all("\x21" <= c <= "\x7e" for c in token)


def read_file(path: PathLike, argument: str) -> bytes:
    """The bytes of file `path`. Errors name the argument and the path, never the
    content: an OSError of the same kind if it cannot be read, ValueError if it
    holds nothing but whitespace."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise type(error)(error.errno, f"{argument}: {error.strerror}", str(path)) from None
    if not data.strip():
        raise ValueError(f"{argument} {str(path)!r}: the file is empty")
    return data


class BearerToken:
    """A token for the authorization header; its repr never shows it."""

    def __init__(self, token: str, source: str = "token"):
        if not isinstance(token, str):
            raise TypeError(f"{source}: must be a str, got {type(token).__name__}")
        token = token.strip()
        if not _valid(token):
            # Say what is wrong, never what was given.
            raise ValueError(f"{source}: the token must be one non-empty line of "
                             "printable ASCII without spaces")
        self._metadata = ((AUTHORIZATION, f"Bearer {token}"),)

    @classmethod
    def from_file(cls, path: PathLike) -> "BearerToken":
        """The token in file `path` (read now, once), surrounding whitespace such
        as a trailing newline stripped."""
        data = read_file(path, "token_file")
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            # Not UnicodeDecodeError itself: its message quotes the offending bytes.
            raise ValueError(f"token_file {str(path)!r}: the token must be printable "
                             "ASCII") from None
        return cls(text, f"token_file {str(path)!r}")

    @classmethod
    def from_arguments(cls, token: Optional[str],
                       token_file: Optional[PathLike]) -> Optional["BearerToken"]:
        """The Client's token= / token_file= (at most one), or None for neither."""
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if token is not None:
            return cls(token)
        if token_file is not None:
            return cls.from_file(token_file)
        return None

    @property
    def metadata(self) -> Tuple[Tuple[str, str]]:
        """The ((key, value),) pair a call sends."""
        return self._metadata

    def __repr__(self) -> str:
        return "BearerToken(<hidden>)"


def channel_credentials(credentials: Optional[grpc.ChannelCredentials],
                        tls_ca: Optional[PathLike] = None, tls_cert: Optional[PathLike] = None,
                        tls_key: Optional[PathLike] = None
                        ) -> Optional[grpc.ChannelCredentials]:
    """The channel's TLS credentials: `credentials` as given, or ones made from PEM
    files (tls_ca: the CA to trust, default the system's; tls_cert + tls_key: the
    client certificate for a server with --tls-client-ca). None: plaintext."""
    paths = {"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key}
    given = [name for name, path in paths.items() if path is not None]
    if credentials is not None and given:
        raise ValueError(f"give credentials or {', '.join(given)}, not both: "
                         "credentials already holds the TLS settings")
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("tls_cert and tls_key go together: give both (the client "
                         "certificate and its private key) or neither")
    if credentials is not None or not given:
        return credentials
    return grpc.ssl_channel_credentials(
        root_certificates=read_file(tls_ca, "tls_ca") if tls_ca is not None else None,
        private_key=read_file(tls_key, "tls_key") if tls_key is not None else None,
        certificate_chain=read_file(tls_cert, "tls_cert") if tls_cert is not None else None)
