"""One error tree. Each error carries the exit code the CLI returns for it.

Exit codes (docs/design.md): 0 the audit ran and the config fits; 1 a finding (the config does not
fit, an over-commit above the tolerance, a diff gate tripped); 2 usage or bad input; 3 the audit
could not complete.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FINDING = 1
    USAGE = 2
    INCOMPLETE = 3


class KvauditError(Exception):
    """Base of every error kvaudit raises on purpose. The message is one line that names the fix."""

    exit_code: ExitCode = ExitCode.INCOMPLETE


class UsageError(KvauditError):
    """A flag, a config file or a combination of them that kvaudit cannot act on."""

    exit_code = ExitCode.USAGE


class BadInputError(KvauditError):
    """A report, diff or log that is malformed, truncated, binary or of an unknown version."""

    exit_code = ExitCode.USAGE


class AuditIncompleteError(KvauditError):
    """The audit could not finish: a crash, an OOM, a dead worker, a timeout, no device."""

    exit_code = ExitCode.INCOMPLETE


class FindingError(KvauditError):
    """Not a failure of kvaudit: what it found is the answer (a diff gate tripped)."""

    exit_code = ExitCode.FINDING
