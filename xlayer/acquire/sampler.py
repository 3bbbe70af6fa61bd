"""Periodic `ss -tin` snapshots into a text file that `parsers.hoststate.ss.read_ss` reads.

Every `interval` seconds (default 0.05) the sampler runs ``ss -t -i -n [filter...]`` (an argument
list, never a shell string) and appends one block to the output file.  ``netns=NS`` runs it inside a
network namespace with ss's own ``-N NS``; ``cmd_prefix=["ip", "netns", "exec", NS]`` (or nsenter,
sudo ...) puts any command in front of it.  ::

    # 1718000000.123456789
    State Recv-Q Send-Q Local Address:Port Peer Address:PortProcess
    ESTAB 0      0      10.0.0.1:40000 10.0.0.2:5201
    \t cubic wscale:7,7 rto:204 rtt:0.5/0.25 ...

flushed as soon as it is written, so a crash loses at most the block being taken.  The timestamp is
the midpoint of the wall-clock times just before ss was started and just after it exited: the kernel
dump happens somewhere in between, so the error is at most half of ss's run time (`stats.max_run_s`;
5-10 ms on an idle machine, including the namespace switch).  A run of ss that fails writes a ``#! ...`` comment line instead of a block.

Slots are scheduled on a fixed grid (t0 + k*interval, monotonic clock), so the mean interval does not
drift; a slot missed because ss took longer than the interval is skipped and counted, never run late
twice.  The sampler stops on a `threading.Event`, after `duration`, or on SIGINT/SIGTERM (when `run`
is called from the main thread); it always finishes the block it is writing.  ss runs in its own
session so that a terminal's Ctrl-C reaches the sampler, not a half-printed ss.

Filter tokens are checked against ss's filter grammar (`check_ss_filter`) before anything runs and
are passed after ``--``, so that no filter value can ever reach ss as an option (``-K`` kills sockets).

Command line: ``python -m xlayer.acquire.sampler OUT [--interval S] [--duration S] [--netns NS]
[--ss-arg=-t --ss-arg=-i --ss-arg=-n --ss-arg=-O ...] [-- FILTER...]`` e.g. ``-- dport = :5201``.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

DEFAULT_SS_ARGS: tuple[str, ...] = ("-t", "-i", "-n")


class SamplerError(RuntimeError):
    """ss could not be run at all (not installed, bad netns, bad filter)."""


class SsFilterError(SamplerError, ValueError):
    """An ss filter that ss's filter grammar (as this module knows it) does not allow."""


# ---------------------------------------------------------------------------------------------
# ss filter grammar (man ss: FILTER := [ state STATE-FILTER ] [ EXPRESSION ])

SS_STATES = frozenset((
    "established", "syn-sent", "syn-recv", "fin-wait-1", "fin-wait-2", "time-wait", "closed",
    "close-wait", "last-ack", "listening", "closing", "all", "connected", "synchronized", "bucket", "big"))
_EQ_OPS = frozenset(("=", "==", "eq"))
_NE_OPS = frozenset(("!=", "ne", "neq"))
_CMP_OPS = _EQ_OPS | _NE_OPS | frozenset((">", "gt", "<", "lt", ">=", "ge", "geq", "<=", "le", "leq"))
_AND, _OR, _NOT = frozenset(("and", "&", "&&")), frozenset(("or", "|", "||")), frozenset(("not", "!"))
_FAMILY = r"(?:inet6?|unix|link|netlink|packet|vsock|tipc|xdp|mptcp):"
# operands never start with '-': nothing that looks like an option gets past the check
_PORT_RE = re.compile(rf"^(?:{_FAMILY})?:?(?:\*|[A-Za-z0-9][A-Za-z0-9_.]*(?:-[A-Za-z0-9_.]+)*)$")
_HOST_RE = re.compile(r"^[A-Za-z0-9*\[:][A-Za-z0-9_.:*%/\[\]-]*$")
_DEV_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")
_MARK_RE = re.compile(r"^(?:0x[0-9A-Fa-f]+|[0-9]+)(?:/(?:0x[0-9A-Fa-f]+|[0-9]+))?$")
_LEX_RE = re.compile(r"\s+|\(|\)|&&|\|\||[&|]|!=|<=|>=|==|[=<>!]|[^\s()&|!=<>]+")
_GRAMMAR = ("[state|exclude STATE]... then predicates dport|sport [OP] :PORT, dst|src [=] HOST, "
            "dev [=|!=] IFACE, fwmark [=|!=] MARK, autobound, joined by and/or/not and parentheses")


def _show(tok: str) -> str:
    return repr(tok if len(tok) <= 40 else tok[:40] + "...")


def check_ss_filter(tokens: Sequence[str]) -> list[str]:
    """Return the ss filter `tokens` split at operators and parentheses, after checking them against
    ss's filter grammar; raise SsFilterError (one line) for anything else.

    ``["dport", "=", ":5201"]``, ``["(dport=:5201", "or", "sport=:5201)"]`` and
    ``["state", "established"]`` pass; ``["-K"]`` or ``["dport", "=", "-K"]`` do not.
    """
    if isinstance(tokens, (str, bytes)):
        raise TypeError("the ss filter must be a list of tokens, not a string")
    toks: list[str] = []
    for t in tokens:
        if not isinstance(t, str):
            raise SsFilterError(f"ss filter token {t!r} is not a string")
        if "\x00" in t:
            raise SsFilterError("ss filter token contains a NUL character")
        toks += [m.group() for m in _LEX_RE.finditer(t) if not m.group().isspace()]
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take(what: str) -> str:
        nonlocal pos
        if pos >= len(toks):
            raise SsFilterError(f"ss filter ends early: expected {what} ({_GRAMMAR})")
        pos += 1
        return toks[pos - 1]

    def fail(tok: str, what: str) -> SsFilterError:
        return SsFilterError(f"ss filter: {_show(tok)} is not {what} ({_GRAMMAR})")

    def operand(ops: frozenset, rx: re.Pattern, what: str) -> None:
        nonlocal pos
        if peek() in ops:
            pos += 1
        tok = take(what)
        if not rx.match(tok):
            raise fail(tok, what)

    def predicate() -> None:
        key = take("a predicate")
        if key in ("dport", "sport"):
            operand(_CMP_OPS, _PORT_RE, "a port (:PORT, :NAME or *)")
        elif key in ("dst", "src"):
            operand(_EQ_OPS, _HOST_RE, "a host ([FAMILY:]ADDRESS[/LEN][:PORT])")
        elif key == "dev":
            operand(_EQ_OPS | _NE_OPS, _DEV_RE, "an interface name")
        elif key == "fwmark":
            operand(_EQ_OPS | _NE_OPS, _MARK_RE, "a mark (N or N/MASK)")
        elif key != "autobound":
            raise fail(key, "a predicate")

    def term() -> None:
        nonlocal pos
        tok = peek()
        if tok in _NOT:
            pos += 1
            term()
        elif tok == "(":
            pos += 1
            expr()
            if take("')'") != ")":
                raise fail(toks[pos - 1], "')'")
        else:
            predicate()

    def expr() -> None:
        nonlocal pos
        term()
        while True:
            tok = peek()
            if tok in _AND or tok in _OR:
                pos += 1
                term()
            elif tok is None or tok == ")":
                return
            else:
                term()          # ss: no operator between predicates means 'and'

    while peek() in ("state", "exclude"):
        pos += 1
        st = take("a state")
        if st not in SS_STATES:
            raise fail(st, f"a TCP state ({', '.join(sorted(SS_STATES))})")
    if peek() is not None:
        expr()
        if pos < len(toks):
            raise fail(toks[pos], "expected here")
    return toks


@dataclass
class SamplerStats:
    """What a sampler run did, and how regular its timing was."""

    command: list[str] = field(default_factory=list)
    interval_s: float = 0.0
    samples: int = 0             # blocks written
    errors: int = 0              # ss runs that failed (a '#!' line was written instead)
    missed_slots: int = 0        # grid slots skipped because a run overran
    first_ts_ns: int | None = None
    last_ts_ns: int | None = None
    min_gap_s: float | None = None
    max_gap_s: float | None = None
    max_run_s: float = 0.0       # longest single ss run
    stopped_by: str = ""         # event, duration, signal name

    @property
    def mean_gap_s(self) -> float | None:
        """Return the mean time between written blocks, or None with fewer than two."""
        if self.samples < 2 or self.first_ts_ns is None or self.last_ts_ns is None:
            return None
        return (self.last_ts_ns - self.first_ts_ns) / 1e9 / (self.samples - 1)

    def as_dict(self) -> dict:
        """Return the counts as plain JSON-able values."""
        d = asdict(self)
        d["mean_gap_s"] = self.mean_gap_s
        return d


def port_filter(port: int) -> list[str]:
    """Return ss filter tokens matching sockets with `port` as source or destination port."""
    return ["(", "sport", "=", f":{port}", "or", "dport", "=", f":{port}", ")"]


def format_epoch_ns(ts_ns: int) -> str:
    """Return ``<seconds>.<9 digits>`` for an epoch in ns, without going through a float."""
    return f"{ts_ns // 1_000_000_000}.{ts_ns % 1_000_000_000:09d}"


class SsSampler:
    """Runs ss every `interval` seconds and appends timestamped blocks to `path`.

    Use `run()` to block until stopped, or `start()`/`stop()` (also a context manager) to sample
    in a background thread.
    """

    def __init__(self, path: str | os.PathLike, interval: float = 0.05,
                 filter: Sequence[str] | None = None, *, netns: str | None = None,
                 cmd_prefix: Sequence[str] | None = None,
                 ss_args: Sequence[str] = DEFAULT_SS_ARGS, ss: str = "ss",
                 append: bool = False, timeout: float | None = None):
        if interval <= 0:
            raise ValueError("interval must be positive")
        for name, seq in (("filter", filter), ("cmd_prefix", cmd_prefix), ("ss_args", ss_args)):
            if isinstance(seq, (str, bytes)):
                # a shell-style string would need splitting, and splitting is where quoting bugs live
                raise TypeError(f"{name} must be a list of arguments, not a string")
        self.path = os.fspath(path)
        self.interval = float(interval)
        # ss's own -N switches namespace in-process: half the cost of `ip netns exec NS ss`, which
        # matters at 20 samples a second; cmd_prefix=["ip", "netns", "exec", NS] works too
        ns_args = ["-N", netns] if netns is not None else []
        # the filter is checked against ss's grammar and comes after "--": never an option to ss
        filt = check_ss_filter(list(filter or []))
        self.cmd = list(cmd_prefix or []) + [ss] + ns_args + list(ss_args) + (["--", *filt] if filt else [])
        self.append = append
        self.timeout = timeout if timeout is not None else max(2.0, 20 * self.interval)
        self.stats = SamplerStats(command=list(self.cmd), interval_s=self.interval)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # --- one sample ---
    def _take(self) -> tuple[int, bytes, str | None]:
        t_a = time.time_ns()
        m_a = time.monotonic()
        try:
            proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            raise SamplerError(f"cannot run {self.cmd[0]!r}: {e}") from e
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return (t_a + time.time_ns()) // 2, b"", f"ss timed out after {self.timeout:g} s"
        self.stats.max_run_s = max(self.stats.max_run_s, time.monotonic() - m_a)
        ts = (t_a + time.time_ns()) // 2
        if proc.returncode != 0:
            msg = err.decode("utf-8", "replace").strip().splitlines()
            return ts, b"", f"ss exit {proc.returncode}: {msg[0] if msg else ''}"
        return ts, out, None

    def _write(self, fh, ts: int, out: bytes, error: str | None) -> None:
        st = self.stats
        if error is not None:
            fh.write(f"#! {format_epoch_ns(ts)} {error}\n".encode())
            st.errors += 1
        else:
            if out and not out.endswith(b"\n"):
                out += b"\n"
            fh.write(f"# {format_epoch_ns(ts)}\n".encode() + out)
            if st.last_ts_ns is not None:
                gap = (ts - st.last_ts_ns) / 1e9
                st.min_gap_s = gap if st.min_gap_s is None else min(st.min_gap_s, gap)
                st.max_gap_s = gap if st.max_gap_s is None else max(st.max_gap_s, gap)
            if st.first_ts_ns is None:
                st.first_ts_ns = ts
            st.last_ts_ns = ts
            st.samples += 1
        fh.flush()

    # --- loop ---
    def run(self, stop_event: threading.Event | None = None, duration: float | None = None,
            handle_signals: bool = True) -> SamplerStats:
        """Sample until `stop_event` is set, `duration` s have passed or SIGINT/SIGTERM; return stats.

        Raises SamplerError if the very first run of ss cannot be started or fails (a wrong netns
        or filter), so that a misconfigured sampler does not silently write only errors.
        """
        stop = stop_event if stop_event is not None else self._stop
        old: dict[int, object] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            def on_signal(signum, frame):
                self.stats.stopped_by = signal.Signals(signum).name
                stop.set()
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.signal(sig, on_signal)
        try:
            with open(self.path, "ab" if self.append else "wb") as fh:
                t0 = time.monotonic()  # slot k is due at t0 + k * interval; slot 0 is now
                ts, out, error = self._take()
                if error is not None:
                    raise SamplerError(f"{' '.join(self.cmd)}: {error}")
                self._write(fh, ts, out, None)
                end = t0 + duration if duration is not None else None
                k = 1
                while True:
                    due = t0 + k * self.interval
                    if end is not None and due > end:
                        self.stats.stopped_by = self.stats.stopped_by or "duration"
                        break
                    if stop.wait(max(0.0, due - time.monotonic())):
                        break
                    ts, out, error = self._take()
                    self._write(fh, ts, out, error)
                    if stop.is_set():
                        break
                    # next slot on the grid that is still ahead of us
                    late = int((time.monotonic() - t0) / self.interval) + 1
                    self.stats.missed_slots += max(0, late - (k + 1))
                    k = max(k + 1, late)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        if not self.stats.stopped_by:
            self.stats.stopped_by = "event"
        return self.stats

    def start(self) -> "SsSampler":
        """Start sampling in a background thread and return self (signals are the caller's business)."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")

        def target():
            try:
                self.run(self._stop, handle_signals=False)
            except BaseException as e:  # handed to stop() so the caller sees it
                self._error = e

        self._thread = threading.Thread(target=target, name="ss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> SamplerStats:
        """Stop the background sampler, wait for its last block, and return its stats."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return self.stats

    def __enter__(self) -> "SsSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def sample_ss(path: str | os.PathLike, duration: float, interval: float = 0.05,
              filter: Sequence[str] | None = None, **kwargs) -> SamplerStats:
    """Sample ss into `path` for `duration` seconds (blocking); return the stats."""
    return SsSampler(path, interval, filter, **kwargs).run(duration=duration)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: sample until the duration ends or SIGINT/SIGTERM; return the exit code."""
    p = argparse.ArgumentParser(prog="python -m xlayer.acquire.sampler", description=__doc__.split("\n")[0],
                                epilog="ss filter tokens go after --, e.g. -- dport = :5201")
    p.add_argument("output")
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--duration", type=float, default=None)
    p.add_argument("--netns", default=None)
    p.add_argument("--ss-arg", action="append", dest="ss_args", default=None,
                   help="one ss option per use (default: -t -i -n)")
    p.add_argument("--append", action="store_true")
    args = list(sys.argv[1:] if argv is None else argv)
    # everything after -- is the ss filter, verbatim (argparse would mix it with the options)
    filt = args[args.index("--") + 1:] if "--" in args else []
    a = p.parse_args(args[:args.index("--")] if "--" in args else args)
    try:
        s = SsSampler(a.output, a.interval, filt, netns=a.netns,
                      ss_args=a.ss_args or DEFAULT_SS_ARGS, append=a.append)
        st = s.run(duration=a.duration)
    except SamplerError as e:
        print(f"xlayer.acquire.sampler: {e}", file=sys.stderr)
        return 2
    gap = st.mean_gap_s
    print(f"{st.samples} samples, mean interval {gap if gap is None else round(gap, 4)} s, "
          f"{st.missed_slots} missed, {st.errors} errors, stopped by {st.stopped_by}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
