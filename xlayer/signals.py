"""SIGTERM handled as SIGINT is: commands stop by raising, so writers close and leave whole files."""
from __future__ import annotations

import signal


class Stop(Exception):
    """Raised from the SIGTERM handler; commands catch it with KeyboardInterrupt."""


def _on_term(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Stop()


def stop_on_sigterm() -> None:
    """Make SIGTERM raise `Stop` in the main thread from now on; return None."""
    signal.signal(signal.SIGTERM, _on_term)
