"""Pseudonymous speaker ids: a keyed HMAC of the private participant key.

Without the key nobody can tell which registry row a `user_id` belongs to, and
with the same key two builds (or two versions) give the same ids, so results
join across them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from redvox.schemas.errors import UserError

KEY_ENV = "REDVOX_PSEUDONYM_KEY"
USER_ID_HEX = 32


class PseudonymKeyError(UserError, RuntimeError):
    """No usable pseudonym key; the message says how to provide one."""


def load_pseudonym_key(key_file: Path | None) -> bytes:
    """The HMAC key: `REDVOX_PSEUDONYM_KEY` when set, else the config's key file.

    Builds refuse to run without one: a guessable default would let anyone undo
    the pseudonyms of the public set.
    """
    from_env = os.environ.get(KEY_ENV, "").strip()
    if from_env:
        return from_env.encode()
    if key_file is None:
        raise PseudonymKeyError(
            f"no pseudonym key: set {KEY_ENV}=<secret> or add 'pseudonym_key_file: FILE' to the "
            "input config (the same key must be used for every build of a dataset)"
        )
    try:
        key = Path(key_file).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise PseudonymKeyError(
            f"{key_file}: pseudonym key file unreadable ({exc.strerror}); create it with a secret "
            f"or set {KEY_ENV}"
        ) from None
    if not key:
        raise PseudonymKeyError(f"{key_file}: pseudonym key file is empty; put a secret in it")
    return key.encode()


def pseudonymize(key: bytes, participant_key: str) -> str:
    """`user_id`: HMAC-SHA256(key, participant key), first 32 hex characters."""
    return hmac.new(key, participant_key.encode(), hashlib.sha256).hexdigest()[:USER_ID_HEX]
