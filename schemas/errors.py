"""The one error type for what a user can cause and fix.

Bad input files, a wrong option, a busy, read-only or full output folder: each
raises a `UserError` (or a subclass) whose message names the file, row or field
and says what to do. The command line catches it at its edge and prints that one
line; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno

# OS errors a user causes (and fixes) by where they point an output.
USER_OS_ERRORS = {
    errno.EACCES: "not writable: give a folder you can write to",
    errno.EPERM: "not permitted: give a folder you can write to",
    errno.EROFS: "on a read-only file system: give a writable folder",
    errno.ENOSPC: "disk full: free some space or give another folder",
    errno.EDQUOT: "disk quota exceeded: free some space or give another folder",
}


class UserError(Exception):
    """Something the user can fix; the message says what and where."""


def os_error_message(exc: OSError) -> str | None:
    """One line for an OS error a user caused, None for any other (a bug: traceback)."""
    advice = USER_OS_ERRORS.get(exc.errno or 0)
    if advice is None:
        return None
    where = exc.filename or "output"
    return f"{where}: {advice} ({exc.strerror})"
