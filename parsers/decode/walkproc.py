"""The record walk and FCS checks of a large capture, in a helper process, one chunk ahead.

Used only where the compiled loops (parsers/accel.py) are not built: those cost a tenth of the Python
ones and release the GIL, so with them there is nothing left for a helper to take over.

Why a process and why this split: the record walk (a Python loop over record headers) and the CRC-32
of every frame (one C call per frame, too short for the CRC to release the GIL) are ~40 % of a
radiotap capture's decoding and hold the GIL throughout, so threads cannot share them out. A helper
that decoded everything would import polars and pyarrow (~0.45 s before its first chunk, on a job of
~1 s); this one imports numpy and the CRC only (~0.12 s), does exactly the GIL-bound part, and sends
each chunk while the caller decodes the one before.

The helper is a fresh interpreter started by subprocess (fork immediately followed by exec: nothing
of the caller's threads, locks or polars/pyarrow state is inherited, so nothing can hang it). It
maps the file itself, walks it with the same container code and chunk size as an in-process walk,
and sends each chunk's record arrays with the FCS verdicts it reached. A helper that cannot start,
dies, stalls or says anything unexpected is dropped and the caller walks the rest of the file itself
(parsers.decode.ingest._helped_chunks), so the rows are the same either way.
"""
from __future__ import annotations

import os
import pickle
import queue
import selectors
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np

from parsers.formats.records import RecordChunk

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: the helper is not used there
    fcntl = None

_FIELDS = ("offset", "caplen", "wirelen", "ts_ns", "linktype", "iface", "frame")
_HEAD = struct.Struct("<Q")
PIPE_BYTES = 1 << 20
# A helper silent this long is given up on (it has hung on I/O, or the machine is swapping).
STALL_SECONDS = 60.0
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from parsers.decode.walkproc import serve; "
         "serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))")


class HelperFailed(Exception):
    """The helper process stopped answering, or answered something unexpected."""


# -- helper side -------------------------------------------------------------------------------------

def serve(path: str, chunk_bytes: int, first: int = 0, size: int = -1, fcs: int = 1) -> None:
    """Walk `path` in chunks and write them from chunk number `first` on (the caller decodes the ones
    before while this process starts), with FCS verdicts, to stdout; then the final state.

    `size` is the file size the caller mapped: a file that has changed size since is not walked.
    `fcs` 0: make no FCS checks (the caller's read does not ask for fcs_bad).
    """
    from parsers.formats.containers import open_capture
    from parsers.layers.fcs import radiotap_fcs

    sender = Sender(sys.stdout.buffer)
    share = Share()
    try:
        with open_capture(path, chunk_bytes=chunk_bytes) as cap:
            if size >= 0 and cap.size != size:
                raise RuntimeError(f"the file is {cap.size} bytes now, not {size}")
            for i, chunk in enumerate(cap.chunks()):
                if i < first:
                    continue
                msg = {k: _pack(getattr(chunk, k)) for k in _FIELDS}
                msg["has_ts"], msg["comments"] = chunk.has_ts, chunk.comments
                if fcs:
                    first_byte, fcs_ok = radiotap_fcs(chunk.data, chunk.offset, chunk.caplen,
                                                      chunk.wirelen, chunk.linktype, share.part)
                    msg["fcs_first"], msg["fcs_ok"] = _pack(first_byte), fcs_ok
                share.update(caller_behind=sender.send(("chunk", msg)))
            sender.send(("end", {"stats": cap.stats, "interfaces": cap.interfaces, "names": cap.names,
                                 "sections": cap.sections, "if_stats": cap.if_stats}))
    except BrokenPipeError:       # the caller is gone (or gave up on us): nothing to say
        pass
    except Exception as exc:  # noqa: BLE001 - whatever it is, the caller walks in-process instead
        try:
            sender.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        sender.close()


class Sender:
    """Writes messages to the caller from a thread, up to `depth` of them queued: the walk goes on
    while the caller is still busy with earlier chunks, and a late caller is noticed."""

    def __init__(self, out, depth: int = 2):
        self.out = out
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.error: OSError | None = None
        self.writing = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def send(self, obj) -> bool:
        """Queue a message; return whether the caller had not yet taken all the earlier ones."""
        if self.error is not None:
            raise self.error
        behind = self.writing or not self.queue.empty()
        self.queue.put(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        return behind

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        self.queue.put(None)
        self.thread.join()

    def _run(self) -> None:
        while True:
            data = self.queue.get()
            if data is None:
                return
            if self.error is not None:      # keep draining, so that send() never blocks for good
                continue
            self.writing = True
            try:
                self.out.write(_HEAD.pack(len(data)))
                self.out.write(data)
                self.out.flush()
            except OSError as exc:
                self.error = exc
            self.writing = False


class Share:
    """The part of each chunk's FCS checks this process makes (the caller makes the rest).

    Take more of them while the caller lags behind our messages, leave it more when it has taken
    them all (it is waiting for us).
    """

    def __init__(self, part: float = 1.0):
        self.part = part

    def update(self, caller_behind: bool) -> None:
        """Adjust the part after handing over a chunk."""
        step = 0.1 if caller_behind else -0.1
        self.part = min(1.0, max(0.2, self.part + step))


def _pack(a: np.ndarray):
    """Return an int64 array in fewer bytes: (value, n) if constant, (start, n, 1) if counting up by
    one, else the narrowest of int32 / int64 (a chunk's record arrays are mostly such)."""
    n = len(a)
    if n and a[0] == a[-1] and (a == a[0]).all():
        return (int(a[0]), n)
    if n and int(a[-1]) - int(a[0]) == n - 1 and (np.diff(a) == 1).all():
        return (int(a[0]), n, 1)
    if n and -2**31 <= int(a.min()) and int(a.max()) < 2**31:
        return a.astype(np.int32)
    return a


def _unpack(p) -> np.ndarray:
    """Return the int64 array that _pack packed."""
    if isinstance(p, tuple):
        return np.full(p[1], p[0], np.int64) if len(p) == 2 else np.arange(p[0], p[0] + p[1], dtype=np.int64)
    return p.astype(np.int64, copy=False)


# -- caller side -------------------------------------------------------------------------------------

class WalkHelper:
    """A running helper process and the pipe its messages arrive on."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.ready = selectors.DefaultSelector()
        self.ready.register(self.fd, selectors.EVENT_READ)

    @classmethod
    def start(cls, path: str, chunk_bytes: int, first: int, size: int, fcs: bool = True) -> WalkHelper | None:
        """Start a helper for `path` (of `size` bytes as the caller mapped it) that sends chunks from
        number `first` on, with FCS verdicts if `fcs`; return None if no interpreter can be started."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if not sys.executable:
            return None
        try:
            proc = subprocess.Popen([sys.executable, "-c", _BOOT, root, os.fspath(path), str(chunk_bytes),
                                     str(first), str(size), str(int(fcs))],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, close_fds=True)
        except (OSError, ValueError):
            return None
        if fcntl is not None and hasattr(fcntl, "F_SETPIPE_SZ"):
            try:    # a chunk's message in one or two writes, not dozens of 64 KiB ones
                fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:
                pass
        return cls(proc)

    def messages(self) -> Iterator[tuple[str, dict]]:
        """Yield the helper's messages until its final one; raise HelperFailed if it breaks off."""
        while True:
            head = self._read(_HEAD.size)
            try:
                kind, body = pickle.loads(self._read(_HEAD.unpack(head)[0]))
            except Exception as exc:  # noqa: BLE001 - a garbled message: same as a dead helper
                raise HelperFailed(f"unreadable message: {exc}") from None
            if kind == "error":
                raise HelperFailed(body)
            yield kind, body
            if kind == "end":
                return

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            if not self.ready.select(STALL_SECONDS):
                raise HelperFailed(f"no word for {STALL_SECONDS:.0f} s")
            k = os.readv(self.fd, [view[got:]])
            if k == 0:
                raise HelperFailed(f"it ended (exit status {self.proc.poll()})")
            got += k
        return buf

    def close(self) -> None:
        """Stop the helper (if still running) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.ready.close()
        self.proc.stdout.close()
        self.proc.wait()


def chunk_from(msg: dict, data: np.ndarray) -> RecordChunk:
    """Return the RecordChunk a helper message describes, over the caller's own mapping `data`;
    raise HelperFailed if its records do not lie inside that mapping."""
    try:
        checked = "fcs_first" in msg
        chunk = RecordChunk(data=data, comments=msg["comments"], has_ts=msg["has_ts"],
                            fcs_first=_unpack(msg["fcs_first"]) if checked else None,
                            fcs_ok=msg["fcs_ok"] if checked else None,
                            **{k: _unpack(msg[k]) for k in _FIELDS})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise HelperFailed(f"malformed chunk message: {exc}") from None
    n = len(chunk)
    if n == 0 or any(len(getattr(chunk, k)) != n for k in _FIELDS) or \
            int(chunk.offset.min()) < 0 or int((chunk.offset + chunk.caplen).max()) > len(data):
        raise HelperFailed("chunk message does not fit the file")
    return chunk
