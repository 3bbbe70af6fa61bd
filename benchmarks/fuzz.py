#!/usr/bin/env python3
"""Long fuzz run over untrusted inputs: captures (default), bundle manifests, host-state text.

    python benchmarks/fuzz.py [--target capture|manifest|hoststate] [--inputs 100000] [--jobs 2] [--seed 1]
    python benchmarks/fuzz.py --target manifest --replay fuzz-failures/manifest-17.json

--target capture: mutate corpus captures and read each mutant with both decoders. Counts inputs,
refusals (CaptureError), rows, malformed rows; any other exception, any internal-error reason and any
decode taking over PER_INPUT_S is a failure, saved under fuzz-failures/ for replay; the largest
worker's peak RSS is printed (a failure past RSS_LIMIT_MB).

--target manifest: bundle.json manifests, half drawn from hypothesis strategies (well-typed and
hostile values, paths out of the bundle, links, FIFOs, devices), half mutations of the samples/
manifests (bytes and JSON nodes); each is opened and described (xlayer.bundle.open_bundle +
describe) in a bundle of small copies of sample files. --target hoststate: `ss -tin` text,
tcp_info JSON lines and iperf3 JSON, drawn from strategies or mutated from samples/ (and the corpus
iperf3 result), each read by xlayer.bundle.read_state (the host-state readers). Both run every input
in a worker process with a limit of PER_INPUT_S seconds and report each input's peak RSS; they count
inputs, refusals (a BundleError, or a host-state file with lines counted unreadable), and failures:
any other exception (also one describe() turned into a capture's error text), a hang, a peak RSS
over RSS_LIMIT_MB, a capture read from outside the bundle, describe output that is not JSON.
Failures are saved under fuzz-failures/ (replay with --replay). Needs hypothesis (the test extras).
"""
from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = REPO.parent / "shared" / "corpus"
SAMPLES = REPO / "samples"
TARGETS = ("capture", "manifest", "hoststate")
PER_INPUT_S = 10            # a manifest or host-state input taking longer is a hang
RSS_LIMIT_MB = 512          # peak resident set of a worker while it handles one input
KILL_RSS_MB = 2 * RSS_LIMIT_MB   # a worker is killed on the spot past this (the machine is shared)
OUT = REPO / "fuzz-failures"


# ---------------------------------------------------------------------------------------------
# --target capture

def _seeds() -> list[Path]:
    out = []
    for sub in ("radiotap", "wired", "pcapng"):
        for p in sorted((CORPUS / sub).rglob("*")):
            if p.suffix in (".pcap", ".pcapng", ".cap", ".dump") and p.stat().st_size < (64 << 10):
                out.append(p)
    return out


def _work(args: tuple[int, int, int]) -> dict:
    from parsers import IngestStats, read_capture
    from tests.helpers.mutate import mutate
    from parsers.formats.records import CaptureError

    start, count, seed = args
    seeds = [p.read_bytes() for p in _seeds()]
    tally = {"inputs": 0, "refused": 0, "rows": 0, "malformed": 0, "failures": []}
    tmp = REPO / "fuzz-work" / f"{os.getpid()}.bin"
    tmp.parent.mkdir(exist_ok=True)
    for i in range(start, start + count):
        rng = random.Random(seed * 1_000_003 + i)
        data = mutate(seeds[rng.randrange(len(seeds))], rng)
        tmp.write_bytes(data)
        tally["inputs"] += 1
        for decoder in ("fast", "reference"):
            st = IngestStats()
            t0 = time.monotonic()
            try:
                read_capture(tmp, decoder=decoder, stats=st)
            except CaptureError:
                tally["refused"] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - the point is to catch anything
                tally["failures"].append((i, decoder, f"{type(exc).__name__}: {exc}", data))
                continue
            if time.monotonic() - t0 > PER_INPUT_S:
                tally["failures"].append((i, decoder, f"slow (> {PER_INPUT_S} s)", data))
            bad = [r for r in st.malformed_reasons if r.startswith("internal error")]
            if bad:
                tally["failures"].append((i, decoder, bad[0], data))
            tally["rows"] += st.records
            tally["malformed"] += st.malformed
    tmp.unlink(missing_ok=True)
    return tally


def run_capture(a: argparse.Namespace) -> int:
    """Run the capture campaign and print the counts and the rate; return 1 if anything failed."""
    if not CORPUS.exists():
        print(f"corpus not found at {CORPUS}")
        return 2
    per = -(-a.inputs // (a.jobs * 50))
    tasks = [(s, min(per, a.inputs - s), a.seed) for s in range(0, a.inputs, per)]
    total = {"inputs": 0, "refused": 0, "rows": 0, "malformed": 0, "failures": []}
    t0 = time.time()
    with mp.Pool(a.jobs) as pool:
        for t in pool.imap_unordered(_work, tasks):
            for k in ("inputs", "refused", "rows", "malformed"):
                total[k] += t[k]
            total["failures"] += t["failures"]
            print(f"\r{total['inputs']} inputs, {len(total['failures'])} failures", end="", flush=True)
    print()
    for i, dec, msg, data in total["failures"]:
        OUT.mkdir(exist_ok=True)
        (OUT / f"input-{i}.bin").write_bytes(data)
        print(f"FAIL input {i} ({dec}): {msg}")
    took = time.time() - t0
    import resource

    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024     # the largest worker, MB
    print(f"inputs: {total['inputs']} (x2 decoders), refused: {total['refused']}, rows: {total['rows']}, "
          f"malformed rows: {total['malformed']}, failures: {len(total['failures'])}, {took:.0f} s, "
          f"{total['inputs'] / max(took, 1e-9):.1f} inputs/s on {a.jobs} jobs, peak worker RSS {peak:.0f} MB"
          + (f" (over {RSS_LIMIT_MB} MB)" if peak > RSS_LIMIT_MB else ""))
    if peak > RSS_LIMIT_MB:
        return 1
    return 1 if total["failures"] else 0


# ---------------------------------------------------------------------------------------------
# --target manifest / hoststate: the inputs

# Files of the bundle every manifest input is opened in (made by _template): small copies of sample
# captures and host-state files, plus hostile names the manifest may point at.
_CAPTURE_CUT = 24 << 10     # bytes of each sample capture copied (reading stops at the cut record)
_STATE_CUT = 16 << 10
HOSTILE_FILES = ("../outside.pcapng", "/etc/passwd", "/dev/zero", "/proc/self/mem", "fifo.pcapng",
                 "dir.pcapng", "link-out.pcapng", "link-in.pcapng", "missing.pcapng", "", ".", "..",
                 "a/../../outside.pcapng", "sub/../air.pcap", "C:\\Windows\\x.pcap", "nul\x00.pcap",
                 "~/x.pcap", "a" * 300, "\u00e9t\u00e9.pcap", "./air.pcap", "air.pcap/", "AIR.PCAP")
_OUTSIDE = {"../outside.pcapng", "a/../../outside.pcapng", "link-out.pcapng", "/etc/passwd", "/dev/zero",
            "/proc/self/mem"}
STATE_FORMATS = ("ss", "tcpinfo-jsonl", "iperf3-json")


def _sample_manifests() -> list[bytes]:
    return [p.read_bytes() for p in sorted(SAMPLES.glob("*/bundle.json"))]


def _template_files() -> dict[str, Path]:
    """Return bundle file name -> the sample file its first bytes are copied from."""
    out: dict[str, Path] = {}
    for p in sorted(SAMPLES.glob("*/*")):
        if p.suffix in (".pcap", ".pcapng", ".txt", ".jsonl") and p.name not in out:
            out[p.name] = p
    return out


def _state_seeds() -> dict[str, list[bytes]]:
    """Return per host-state format the valid samples its inputs are mutated from."""
    seeds: dict[str, list[bytes]] = {f: [] for f in STATE_FORMATS}
    for p in sorted(SAMPLES.glob("*/*-ss.txt"))[:2]:
        seeds["ss"].append(p.read_bytes()[:_STATE_CUT])
    for p in sorted(SAMPLES.glob("*/*-tcp.jsonl"))[:2]:
        seeds["tcpinfo-jsonl"].append(p.read_bytes()[:_STATE_CUT])
    iperf = CORPUS / "host" / "iperf3-python__results.json"
    if iperf.is_file():
        seeds["iperf3-json"].append(iperf.read_bytes())
    return seeds


def _strategies():
    """Return the hypothesis strategies: (manifest object, host-state (format, text))."""
    from hypothesis import strategies as st

    from xlayer.bundle.manifest import KINDS

    names = sorted(_template_files())
    ints = st.one_of(st.integers(-5, 5000), st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1,
                                                            10**30]))
    floats = st.floats(allow_nan=True, allow_infinity=True)
    leaf = st.one_of(st.none(), st.booleans(), ints, floats, st.text(max_size=40))
    anyjson = st.recursive(leaf, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                        st.dictionaries(st.text(max_size=12), kids, max_size=4)),
                           max_leaves=12)

    text = st.text(max_size=30)
    finite = st.floats(-1e7, 1e7, allow_nan=False)
    safe = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), finite, text),
                        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
                        max_leaves=6)
    typed = _manifest_strategy(st, lambda good: good, names, st.integers(0, 10**9), finite, text, safe,
                               st.just(1), KINDS, ())
    hostile = _manifest_strategy(st, lambda good: st.one_of(good, good, good, anyjson), names, ints, floats,
                                 text, anyjson, st.sampled_from([1, 1, 2, 0]), KINDS + ("tcp", "AIR", ""),
                                 ("pcap.gz", "json", "SS"))
    manifest = st.one_of(typed, hostile)

    def either(good):       # mostly the right type, sometimes anything
        return st.one_of(good, good, good, anyjson)

    num = st.one_of(st.integers(0, 10**6).map(str), st.floats(0, 1e6, allow_nan=False).map(lambda f: f"{f:g}"),
                    st.sampled_from(["-1", "nan", "inf", "1e400", "18446744073709551616", "", "0x10", "1/0"]))
    key = st.sampled_from(["rto", "rtt", "ato", "mss", "pmtu", "cwnd", "ssthresh", "bytes_sent", "bytes_acked",
                           "segs_out", "send", "pacing_rate", "delivery_rate", "unacked", "retrans", "lost",
                           "minrtt", "snd_wnd", "wscale", "bbr", "skmem", "busy", "notsent", "app_limited"])
    token = st.one_of(st.tuples(key, num).map(lambda kv: f"{kv[0]}:{kv[1]}"),
                      st.tuples(key, num, num).map(lambda t: f"{t[0]}:{t[1]}/{t[2]}"),
                      st.tuples(key, num).map(lambda kv: f"{kv[0]} {kv[1]}bps"),
                      st.tuples(key, st.lists(st.tuples(key, num), max_size=3)).map(
                          lambda t: f"{t[0]}:(" + ",".join(f"{k}:{v}" for k, v in t[1]) + ")"),
                      st.sampled_from(["cubic", "bbr", "reno", "ts", "sack", "ecn"]), text)
    endpoint = st.one_of(st.sampled_from(["10.0.0.1:5201", "[::ffff:10.0.0.2]:54126", "[fe80::1%eth0]:22",
                                          "*:*", "0.0.0.0:0", "[::]:65536", "x:y", "10.0.0.1:-1"]), text)
    sock = st.tuples(st.sampled_from(["ESTAB", "SYN-SENT", "TIME-WAIT", "udp", "tcp", "nl", "??"]), num, num,
                     endpoint, endpoint, st.lists(token, max_size=12))
    ss_line = st.one_of(
        sock.map(lambda s: f"{s[0]} {s[1]} {s[2]} {s[3]} {s[4]}\n\t " + " ".join(s[5])),
        num.map(lambda t: f"# {t}"), st.just("State Recv-Q Send-Q Local Address:Port Peer Address:Port Process"),
        text, st.just(""))
    ss_text = st.lists(ss_line, max_size=20).map("\n".join)
    field = st.sampled_from(["ts_ns", "ts", "src", "dst", "sport", "dport", "state", "cc", "tcpi_snd_cwnd",
                             "tcpi_rtt", "tcpi_rttvar", "tcpi_rto", "tcpi_snd_mss", "tcpi_bytes_acked",
                             "tcpi_total_retrans", "tcpi_delivery_rate", "tcpi_pacing_rate", "vantage"]) | text
    tcpinfo_text = st.lists(st.one_of(st.dictionaries(field, either(ints | floats | text), max_size=10)
                                      .map(lambda d: json.dumps(d, allow_nan=True)), anyjson.map(json.dumps), text),
                            max_size=20).map("\n".join)
    interval = st.fixed_dictionaries({}, optional={
        "streams": either(st.lists(st.dictionaries(st.sampled_from(
            ["socket", "start", "end", "seconds", "bytes", "bits_per_second", "retransmits", "snd_cwnd",
             "snd_wnd", "rtt", "rttvar", "pmtu", "omitted", "sender"]), either(ints | floats), max_size=10),
            max_size=3)),
        "sum": anyjson})
    iperf = st.fixed_dictionaries({}, optional={
        "start": either(st.fixed_dictionaries({}, optional={
            "timestamp": either(st.fixed_dictionaries({}, optional={"timesecs": either(ints | floats),
                                                               "time": either(text)})),
            "connected": either(st.lists(st.dictionaries(st.sampled_from(
                ["socket", "local_host", "local_port", "remote_host", "remote_port"]), either(ints | text)),
                max_size=3)),
            "test_start": anyjson})),
        "intervals": either(st.lists(interval, max_size=6)), "end": anyjson, "error": either(text)})
    iperf_text = st.one_of(iperf.map(lambda d: json.dumps(d, allow_nan=True)),
                           st.lists(iperf.map(json.dumps), max_size=3).map("\n".join), anyjson.map(json.dumps))
    # shapes a strategy rarely reaches by chance: nesting past the JSON parser's depth, lines past the
    # readers' line limit, NUL bytes, a byte-order mark, CRLF
    odd = st.sampled_from(["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000,
                           "x" * (4 << 20), "\ufeff# 1700000000.5\r\nESTAB 0 0 1.1.1.1:1 2.2.2.2:2\r\n\t rtt:1/1",
                           "\x00" * 1000, "# 1\n" * 200_000])
    state = st.one_of(ss_text.map(lambda t: ("ss", t)), tcpinfo_text.map(lambda t: ("tcpinfo-jsonl", t)),
                      iperf_text.map(lambda t: ("iperf3-json", t)),
                      st.tuples(st.sampled_from(STATE_FORMATS), odd))
    return manifest, state


def _manifest_strategy(st, either, names, ints, floats, text, anyjson, version, kinds, odd_formats):
    """Return a strategy of manifest objects whose values `either` keeps typed or lets go astray."""
    from xlayer.bundle.manifest import FORMATS, STOP_REASONS

    entry = st.fixed_dictionaries(
        {"kind": either(st.sampled_from(kinds)),
         "vantage": either(st.sampled_from(["client", "server", "ap", "sniffer"]) | text),
         "file": either(st.sampled_from(names) | st.sampled_from(HOSTILE_FILES) | text)},
        optional={"clock": either(text), "format": either(st.sampled_from(FORMATS + odd_formats)),
                  "channel": either(ints), "notes": either(text), "complete": either(st.booleans()),
                  "packets": either(ints), "bytes": either(ints), "if_drops": either(ints),
                  "interval_s": either(floats), "snaplen": anyjson})
    clocks = st.dictionaries(text, either(st.fixed_dictionaries({}, optional={
        "offset_s": floats, "skew_ppm": floats, "anchor_ts": either(ints | floats)})), max_size=3)
    manifest = st.fixed_dictionaries(
        {"xlayer_bundle": version,
         "captures": either(st.lists(entry, max_size=6))},
        optional={"tags": either(st.dictionaries(text, text, max_size=4)), "created": either(text),
                  "host": either(text), "clocks": clocks, "clock_overrides": clocks,
                  "capture": either(st.fixed_dictionaries({}, optional={
                      "start_ns": either(ints), "end_ns": either(ints), "command": either(st.lists(text)),
                      "errors": either(st.lists(text)),
                      "stop_reason": either(st.sampled_from(STOP_REASONS) | text)})),
                  "follow_links": either(st.booleans()), "extra": anyjson})
    return manifest


def _drawn(strategy, n: int, seed: int) -> list[Any]:
    """Return n values drawn by hypothesis from `strategy` (a plain generation run, no shrinking)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    out: list[Any] = []
    while len(out) < n:
        @hseed(seed + len(out))
        @settings(max_examples=n - len(out), database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def collect(x):
            out.append(x)

        before = len(out)
        collect()
        if len(out) == before:
            break
    return out[:n]


def _mutate_json(data: bytes, rng: random.Random) -> bytes:
    """Return a sample JSON document with a few nodes replaced, removed or duplicated."""
    try:
        obj = json.loads(data)
    except ValueError:
        return data
    junk = [None, True, 0, -1, 2**64, 1e308, "", "x" * 5000, "../outside.pcapng", "\udc80", [], {}, [{}], "NaN"]
    for _ in range(rng.randint(1, 4)):
        path: list[Any] = []
        node = obj
        while isinstance(node, (dict, list)) and node and rng.random() < 0.7:
            k = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
            path.append((node, k))
            node = node[k]
        if not path:
            continue
        parent, k = path[-1]
        op = rng.randrange(4)
        # every value placed is a copy: a shared list or dict placed twice could later be put inside
        # itself (a document json cannot write)
        if op == 0:
            parent[k] = copy.deepcopy(rng.choice(junk))
        elif op == 1:
            del parent[k]
        elif op == 2 and isinstance(parent, list):
            parent.extend(copy.deepcopy(parent[k]) for _ in range(rng.choice([1, 2, 50])))
        else:
            parent[k] = copy.deepcopy(rng.choice([parent[k], rng.choice(junk)])) if isinstance(parent, list) else \
                rng.choice(HOSTILE_FILES)
    return json.dumps(obj, allow_nan=True, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")


def _mutated(seeds: list[bytes], n: int, seed: int, as_json: bool) -> list[bytes]:
    from tests.helpers.mutate import mutate

    out = []
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        data = seeds[rng.randrange(len(seeds))]
        if as_json and rng.random() < 0.6:
            out.append(_mutate_json(data, rng))
        else:
            out.append(mutate(data, rng))
    return out


def make_inputs(target: str, n: int, seed: int) -> list[tuple[str, Any]]:
    """Return n (how it was made, payload) inputs: half hypothesis-drawn, half mutated samples.

    manifest: the payload is bundle.json's bytes; hoststate: (format, bytes)."""
    manifest, state = _strategies()
    half = n // 2
    if target == "manifest":
        drawn = [("hypothesis", json.dumps(m, allow_nan=True).encode("utf-8", "surrogatepass"))
                 for m in _drawn(manifest, half, seed)]
        mutated = [("mutated", b) for b in _mutated(_sample_manifests(), n - len(drawn), seed, True)]
    else:
        drawn = [("hypothesis", (f, t.encode("utf-8", "surrogatepass"))) for f, t in _drawn(state, half, seed)]
        seeds = _state_seeds()
        mutated = []
        fmts = [f for f in STATE_FORMATS if seeds[f]]
        for i in range(n - len(drawn)):
            f = fmts[i % len(fmts)]
            mutated.append(("mutated", (f, _mutated(seeds[f], 1, seed * 7919 + i, f != "ss")[0])))
    mixed = [x for pair in zip(drawn, mutated) for x in pair]
    return mixed + drawn[len(mutated):] + mutated[len(drawn):]


# ---------------------------------------------------------------------------------------------
# --target manifest / hoststate: running one input (in a worker process)

def _template(root: Path) -> Path:
    """Make the bundle directory manifests are opened in (and what lies around it); return it."""
    b = root / "bundle"
    b.mkdir(parents=True)
    for name, src in _template_files().items():
        cut = _CAPTURE_CUT if src.suffix in (".pcap", ".pcapng") else _STATE_CUT
        with src.open("rb") as fh:
            (b / name).write_bytes(fh.read(cut))
    caps = sorted(p for p in b.iterdir() if p.suffix == ".pcapng")
    shutil.copy(caps[0], root / "outside.pcapng")       # a capture outside the bundle: never to be read
    os.mkfifo(b / "fifo.pcapng")
    (b / "dir.pcapng").mkdir()
    (b / "link-out.pcapng").symlink_to(root / "outside.pcapng")
    (b / "link-in.pcapng").symlink_to(caps[0].name)
    (b / "sub").mkdir()
    return b


_SWALLOWED_OK = ("BundleError", "CaptureError")


def _internal(file: str, error: str) -> str | None:
    """Return the exception type name if describe() turned a non-input error into this text."""
    import builtins

    import polars.exceptions as ple

    head = error[len(file) + 2:] if error.startswith(f"{file}: ") else error
    name = head.split(":", 1)[0]
    if name in _SWALLOWED_OK or not name.isidentifier():
        return None
    cls = getattr(builtins, name, None) or getattr(ple, name, None)
    if isinstance(cls, type) and issubclass(cls, BaseException) and not issubclass(cls, OSError):
        return name
    return None


def _run_manifest(bundle: Path, data: bytes) -> tuple[str, str]:
    """Open and describe the bundle with this bundle.json; return (outcome, detail)."""
    from xlayer.bundle import BundleError, describe, open_bundle

    (bundle / "bundle.json").write_bytes(data)
    try:
        b = open_bundle(bundle)
    except BundleError as exc:
        return "refused", str(exc)[:200]
    d = describe(b)
    text = json.dumps(d, default=str, allow_nan=False)       # what `bundle show --json` prints
    for c in d["captures"]:
        f, err = str(c.get("file")), c.get("error")
        if err and _internal(f, err):
            return "failure", f"describe swallowed an internal error: {err[:300]}"
        if f in _OUTSIDE and c.get("records") is not None:
            return "failure", f"{f!r} read from outside the bundle ({c.get('records')} records)"
    errors = sum(1 for c in d["captures"] if c.get("error"))
    return "read", f"{len(d['captures'])} captures, {errors} with an error, {len(text)} bytes described"


def _run_state(work: Path, fmt: str, data: bytes) -> tuple[str, str]:
    """Read host-state text as `fmt`; return (outcome, detail)."""
    from parsers.hoststate import SCHEMA, ReadStats
    from xlayer.bundle import BundleError, read_state

    path = work / {"ss": "state-ss.txt", "tcpinfo-jsonl": "state.jsonl", "iperf3-json": "state.json"}[fmt]
    path.write_bytes(data)
    st = ReadStats()
    try:
        df = read_state(path, fmt, "host", stats=st)
    except BundleError as exc:
        return "refused", str(exc)[:200]
    if dict(df.schema) != dict(SCHEMA):
        return "failure", f"table schema differs from the host-state schema: {dict(df.schema)}"
    if st.malformed_lines:
        return "refused", f"{st.malformed_lines} lines counted unreadable, {st.rows} rows"
    return "read", f"{df.height} rows"


def _peak_reset() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")       # resets VmHWM (the peak RSS) to the current RSS
    except OSError:
        pass


def _status_mb(pid: int | str, key: str) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def run_one(target: str, payload: Any, root: Path, bundle: Path) -> dict:
    """Return the outcome of one input (in the calling process): outcome, detail, peak RSS (MB)."""
    _peak_reset()
    t0 = time.monotonic()
    try:
        if target == "manifest":
            outcome, detail = _run_manifest(bundle, payload)
        else:
            outcome, detail = _run_state(root, *payload)
    except Exception as exc:  # noqa: BLE001 - the point is to catch anything
        import traceback

        outcome, detail = "failure", f"{type(exc).__name__}: {exc}"[:300] + "\n" + traceback.format_exc(limit=-4)
    return {"outcome": outcome, "detail": detail, "seconds": time.monotonic() - t0,
            "peak_mb": _status_mb("self", "VmHWM")}


def _serve(conn, target: str, root: Path) -> None:
    """A worker: make the template in `root`, then run inputs sent over `conn` until it sends None."""
    try:
        bundle = _template(root)
        import xlayer.bundle  # noqa: F401 - imported before the first input, not timed with it
        import parsers.hoststate  # noqa: F401

        conn.send({"ready": _status_mb("self", "VmRSS")})
        while True:
            msg = conn.recv()
            if msg is None:
                return
            conn.send(run_one(target, msg, root, bundle))
    finally:
        shutil.rmtree(root, ignore_errors=True)


class _Worker:
    """One worker process and the input it is running (index, start time)."""

    def __init__(self, ctx, target: str):
        self.conn, child = ctx.Pipe()
        self.root = Path(tempfile.mkdtemp(prefix="xlayer-fuzz-"))    # removed here too: a killed worker cannot
        self.proc = ctx.Process(target=_serve, args=(child, target, self.root), daemon=True)
        self.proc.start()
        child.close()
        self.base_mb = self.conn.recv()["ready"]
        self.job: int | None = None
        self.started = 0.0

    def give(self, i: int, payload: Any) -> None:
        self.job, self.started = i, time.monotonic()
        self.conn.send(payload)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()
        shutil.rmtree(self.root, ignore_errors=True)


def run_inputs(target: str, inputs: list[tuple[str, Any]], jobs: int) -> dict:
    """Run the inputs over `jobs` workers; return the tally (failures with their inputs)."""
    ctx = mp.get_context("spawn")     # no fork of a process with polars' threads running
    tally: dict[str, Any] = {"inputs": 0, "refused": 0, "read": 0, "failures": [], "peak_mb": 0.0,
                             "base_mb": 0.0, "by_origin": {}}
    workers = [_Worker(ctx, target) for _ in range(max(1, jobs))]
    tally["base_mb"] = max(w.base_mb for w in workers)
    todo = list(range(len(inputs)))[::-1]
    shown, shown_at = -1, 0.0

    def settle(w: _Worker, res: dict) -> None:
        i = w.job
        w.job = None
        origin = inputs[i][0]
        tally["inputs"] += 1
        tally["by_origin"].setdefault(origin, {"inputs": 0, "refused": 0, "failures": 0})
        tally["by_origin"][origin]["inputs"] += 1
        tally["peak_mb"] = max(tally["peak_mb"], res.get("peak_mb", 0.0))
        out = res["outcome"]
        if out != "failure" and res.get("peak_mb", 0.0) > RSS_LIMIT_MB:
            out, res["detail"] = "failure", f"peak RSS {res['peak_mb']:.0f} MB > {RSS_LIMIT_MB} MB"
        if out == "failure":
            tally["failures"].append((i, res["detail"]))
            tally["by_origin"][origin]["failures"] += 1
        else:
            tally[out] += 1
            if out == "refused":
                tally["by_origin"][origin]["refused"] += 1

    try:
        while todo or any(w.job is not None for w in workers):
            for w in workers:
                if w.job is None and todo:
                    i = todo.pop()
                    w.give(i, inputs[i][1])
            busy = [w for w in workers if w.job is not None]
            for conn in wait([w.conn for w in busy], timeout=0.2):
                w = next(x for x in busy if x.conn is conn)
                try:
                    settle(w, conn.recv())
                except (EOFError, OSError):      # the worker died (a crash in C, the OOM killer)
                    w.proc.join(5)
                    settle(w, {"outcome": "failure", "detail": f"worker died (exit {w.proc.exitcode})"})
                    w.kill()
                    workers[workers.index(w)] = _Worker(ctx, target)
            now = time.monotonic()
            for k, w in enumerate(workers):
                if w.job is None:
                    continue
                rss = _status_mb(w.proc.pid, "VmRSS")
                why = (f"hang (> {PER_INPUT_S} s)" if now - w.started > PER_INPUT_S else
                       f"RSS {rss:.0f} MB > {KILL_RSS_MB} MB (killed)" if rss > KILL_RSS_MB else None)
                if why:
                    w.kill()
                    settle(w, {"outcome": "failure", "detail": why, "peak_mb": rss})
                    workers[k] = _Worker(ctx, target)
            if tally["inputs"] != shown and time.monotonic() - shown_at > 1:
                shown, shown_at = tally["inputs"], time.monotonic()
                print(f"\r{shown} inputs, {len(tally['failures'])} failures", end="", flush=True)
    finally:
        for w in workers:
            if w.proc.is_alive():
                try:
                    w.conn.send(None)
                except OSError:
                    pass
                w.proc.join(5)
            w.kill()
    print()
    return tally


def _save(target: str, i: int, payload: Any) -> Path:
    OUT.mkdir(exist_ok=True)
    if target == "manifest":
        p = OUT / f"manifest-{i}.json"
        p.write_bytes(payload)
    else:
        p = OUT / f"hoststate-{i}.{payload[0]}"
        p.write_bytes(payload[1])
    return p


def run_text_target(a: argparse.Namespace) -> int:
    """Run the manifest or host-state campaign; print counts, rate and failures; return 1 on failures."""
    t0 = time.time()
    inputs = make_inputs(a.target, a.inputs, a.seed)
    made = time.time() - t0
    t1 = time.time()
    tally = run_inputs(a.target, inputs, a.jobs)
    ran = time.time() - t1
    for i, detail in tally["failures"]:
        p = _save(a.target, i, inputs[i][1])
        print(f"FAIL input {i} ({inputs[i][0]}, saved as {p.relative_to(REPO)}): {detail}")
    print(f"target {a.target}: inputs: {tally['inputs']}, refused: {tally['refused']}, read: {tally['read']}, "
          f"failures: {len(tally['failures'])}; by origin: {tally['by_origin']}")
    print(f"peak RSS {tally['peak_mb']:.0f} MB (limit {RSS_LIMIT_MB} MB; a worker idles at {tally['base_mb']:.0f} MB); "
          f"inputs made in {made:.1f} s, run in {ran:.1f} s: {tally['inputs'] / max(ran, 1e-9):.1f} inputs/s "
          f"on {a.jobs} jobs")
    return 1 if tally["failures"] else 0


def replay(a: argparse.Namespace) -> int:
    """Run one saved input here (a traceback shows where it fails); return 1 if it fails."""
    path = Path(a.replay)
    payload: Any = path.read_bytes()
    if a.target == "hoststate":
        payload = (path.suffix.lstrip("."), payload)
    root = Path(tempfile.mkdtemp(prefix="xlayer-fuzz-"))
    try:
        res = run_one(a.target, payload, root, _template(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{res['outcome']} in {res['seconds']:.2f} s, peak RSS {res['peak_mb']:.0f} MB: {res['detail']}")
    return 1 if res["outcome"] == "failure" else 0


def main() -> int:
    """Run the fuzz campaign of --target and print the counts; return 1 if anything failed."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=TARGETS, default="capture")
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--replay", help="a saved manifest or host-state input to run once (not capture)")
    a = ap.parse_args()
    if a.replay:
        if a.target == "capture":
            ap.error("--replay is for --target manifest or hoststate")
        return replay(a)
    if a.target == "capture":
        return run_capture(a)
    return run_text_target(a)


if __name__ == "__main__":
    sys.exit(main())
