#!/usr/bin/env python3
"""A throwaway public-key infrastructure for the security tests of the server and of
every client, made with openssl: a CA, a server certificate for 127.0.0.1 signed by
it, a client certificate from that CA and one from another CA, and a token file.

As a module: make_pki(directory) returns the paths. As a command (for the Node,
Go and C++ tests):  /usr/bin/python3 tests/testing/pki.py DIR  writes the files into
DIR and prints nothing:
  ca.crt ca.key  other_ca.crt other_ca.key  server.crt server.key (127.0.0.1)
  client.crt client.key (signed by ca)  stranger.crt stranger.key (by other_ca)
  tokens (TOKENS, one per line, with a comment, a blank line and CRLF, as allowed)
Certificates are EC P-256 and valid for 2 days.
"""
import os
import subprocess
import sys
from types import SimpleNamespace

TOKENS = ["s3cret-token-one-0123456789abcdef", "s3cret-token-two-fedcba9876543210"]
NAMES = ["ca", "other_ca", "server", "client", "stranger"]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(directory, name):
    openssl("req", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.crt", "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)


def make_leaf(directory, name, ca, extensions):
    """A key and a certificate for `name` signed by `ca`."""
    with open(os.path.join(directory, f"{name}.ext"), "w", encoding="ascii") as f:
        f.write("basicConstraints=CA:FALSE\n" + extensions)
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
            cwd=directory)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.crt",
            "-extfile", f"{name}.ext", cwd=directory)


def make_pki(directory):
    """Writes the files into `directory` (str or Path). Returns a namespace with
    dir, tokens (the token file's path), pem (bytes by "NAME_crt"/"NAME_key") and
    each file's path as NAME_crt / NAME_key (str)."""
    directory = str(directory)
    make_ca(directory, "ca")
    make_ca(directory, "other_ca")
    make_leaf(directory, "server", "ca",
              "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    make_leaf(directory, "client", "ca", "extendedKeyUsage=clientAuth\n")
    make_leaf(directory, "stranger", "other_ca", "extendedKeyUsage=clientAuth\n")
    files = {f"{n}_{kind}": os.path.join(directory, f"{n}.{kind}")
             for n in NAMES for kind in ["crt", "key"]}
    pem = {}
    for key, path in files.items():
        with open(path, "rb") as f:
            pem[key] = f.read()
    tokens = os.path.join(directory, "tokens")
    # Comments, blank lines, indentation and CRLF line ends are allowed.
    with open(tokens, "w", encoding="ascii", newline="") as f:
        f.write(f"# layerserve tokens\n\n{TOKENS[0]}\r\n   {TOKENS[1]}   \n")
    return SimpleNamespace(dir=directory, tokens=tokens, pem=pem, **files)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    make_pki(sys.argv[1])
