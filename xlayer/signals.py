"""SIGINT and SIGTERM stop a command by raising, so writers close and leave whole files.

`stop_on_signals()` makes SIGTERM raise `Stop` (as SIGINT raises KeyboardInterrupt); inside
`deferred()` both wait until the block is done, for the few steps that must not be cut in the middle
(creating a file's writer, handing it a table), and are raised at its end.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager


class Stop(BaseException):
    """Raised from the SIGTERM handler; commands catch it with KeyboardInterrupt.

    A BaseException, like KeyboardInterrupt: code that goes on after `except Exception` (one unreadable
    capture must not stop the others) must not go on after a request to stop.
    """


_held = 0                       # depth of `deferred()` blocks the main thread is in
_pending: int | None = None     # a signal that arrived inside one
_received: int | None = None    # the last SIGINT or SIGTERM since `stop_on_signals()`


def _raise(signum: int) -> None:
    raise Stop() if signum == signal.SIGTERM else KeyboardInterrupt()


def _on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
    global _pending, _received
    _received = signum
    if _held:
        _pending = signum
        return
    _raise(signum)


def stop_on_signals() -> None:
    """Make SIGTERM raise `Stop` and SIGINT KeyboardInterrupt in the main thread from now on; return None."""
    global _received
    _received = None
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def stopped(exc: BaseException) -> bool:
    """Return whether `exc` ends a command that was asked to stop: KeyboardInterrupt or Stop, or any
    error that reached the command after SIGINT or SIGTERM came.

    The handler raises wherever the main thread is, and a library calling back into Python there
    (polars' Rust through PyO3) can turn that KeyboardInterrupt into an error of its own (a TypeError
    about an "unprintable str object"): the command then stops as it would have, not with a traceback."""
    return isinstance(exc, (KeyboardInterrupt, Stop)) or _received is not None


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs; raise the one that came once it is done."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending is not None:
            signum, _pending = _pending, None
            _raise(signum)


def process_alive(pid: int) -> bool:
    """Return whether a process `pid` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
