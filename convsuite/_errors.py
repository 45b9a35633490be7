"""Exception types raised by convsuite beyond the built-in ValueError/TypeError."""

from __future__ import annotations

__all__ = ["BackendUnavailableError", "UnsupportedCaseError"]


class BackendUnavailableError(RuntimeError):
    """An explicitly requested backend cannot run on this machine.

    The message says why (a missing package, an unbuilt extension, no GPU) and
    how to get it. convsuite never falls back silently from an explicit request.
    """


class UnsupportedCaseError(NotImplementedError):
    """The requested backend or algorithm is available but cannot run this case.

    The message is the backend's own ``can_run`` reason, for example an
    algorithm that only supports stride 1.
    """
