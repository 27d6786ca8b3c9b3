"""Bearer tokens as people give them: on the command line, in a variable, in a file.

One rule for all of them, whether boundctx sends the key (to a remote model server) or
checks it (``boundctx serve``'s clients): a key is one word of printable ASCII. A blank
one would match a request that sends none, and one with a space, a control character or
a character outside ASCII could never be sent in an HTTP header as it was written. The
errors say where a key came from, never the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from boundctx._files import read_bytes

__all__ = ["checked_key", "key_in_variable", "keys_in_file"]

_KEY = re.compile(r"[\x21-\x7e]+")


def checked_key(key: str, where: str) -> str:
    """``key`` without surrounding white space, if it is one word of printable ASCII.

    Raises
    ------
    ValueError
        Naming ``where`` the key came from (a flag, a variable, a line of a file).
    """
    key = key.strip()
    if not key:
        raise ValueError(f"{where} is blank; give a key")
    if not _KEY.fullmatch(key):
        raise ValueError(f"the key of {where} holds a space, a control character or a character that is not ASCII; "
                         f"a key is one word of printable ASCII characters")
    return key


def key_in_variable(env: Mapping[str, str], name: str) -> str | None:
    """The key in the environment variable ``name``; None when it is not set.

    Raises
    ------
    ValueError
        The variable is set but blank, or holds no key.
    """
    value = env.get(name)
    if value is None:
        return None
    if not value.strip():
        raise ValueError(f"{name} is set but blank; unset it or give a key")
    return checked_key(value, name)


def keys_in_file(path: str | os.PathLike) -> list[str]:
    """The keys of a key file: one per line; blank lines and lines starting with ``#``
    are left out.

    Raises
    ------
    OSError
        The file cannot be read (or is not a regular file).
    ValueError
        The file holds no key, or a line is no key (naming the line).
    """
    name = os.fspath(path)
    text = read_bytes(path, what="API key file").decode("utf-8", errors="surrogateescape")
    keys = [checked_key(line, f"line {number} of the API key file {name!r}")
            for number, line in enumerate(text.splitlines(), 1) if line.strip() and not line.strip().startswith("#")]
    if not keys:
        raise ValueError(f"the API key file {name!r} holds no key (one per line)")
    return keys
