"""Host-state files made to hurt (xlayer issue 12): huge lines, decompression bombs, unreadable files, and the
counts of what could not be read reaching `bundle show`, metrics.json and analyze's notes."""
from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import parsers.formats.containers as containers
import parsers.hoststate.common as common
from parsers.hoststate.common import LINE_TOO_LONG, MAX_LINE_BYTES, LongLine, ReadStats, bounded_lines
from parsers.hoststate.iperf3 import read_flent, read_iperf3_json
from parsers.hoststate.ss import read_ss
from parsers.hoststate.tcpinfo import read_tcpinfo_jsonl
from tests.helpers.common import REPO

SAMPLE = REPO / "samples" / "lab-baseline"
SS_BLOCK = ("# 1718000000.25\n"
            "State Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
            "ESTAB 0 0 10.0.0.1:5201 10.0.0.2:40000\n"
            "\t cubic wscale:7,7 rto:204 rtt:3.5/1.2 mss:1448 cwnd:10\n")
TCPINFO_LINE = '{"ts_ns": 1718000000000000000, "src": "10.0.0.1", "sport": 1, "dst": "10.0.0.2", "dport": 2}\n'
HUGE = 100 << 20        # the attacker's 100 MB line
RSS_BOUND_KB = 256 << 10


def _gzip_of_zeros(n_mib: int, head: bytes = b"") -> bytes:
    """Return a gzip stream of `head` then n_mib MiB of zeros: gzip members concatenated, so a 1 GiB bomb
    costs ~1 KB per MiB to make."""
    member = gzip.compress(b"\0" * (1 << 20), compresslevel=9)
    return (gzip.compress(head) if head else b"") + member * n_mib


# ------------------------------------------------------------------------------------------------
# 1. a line longer than MAX_LINE_BYTES is skipped while read, counted, never held whole
# ------------------------------------------------------------------------------------------------
# The child's peak RSS is VmHWM of its own memory map: ru_maxrss would start from the parent's peak (Linux
# keeps the larger of the two across exec, and subprocess may vfork from the big pytest process).
_PEAK = "int(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')))"
_CHILD = """
import json, sys
from parsers.hoststate.common import ReadStats
from parsers.hoststate.ss import read_ss
from parsers.hoststate.tcpinfo import read_tcpinfo_jsonl
st = ReadStats()
reader = read_ss if sys.argv[1] == "ss" else read_tcpinfo_jsonl
df = reader(sys.argv[2], "v", stats=st)
print(json.dumps({"rows": df.height, "unreadable": st.malformed_lines, "reasons": dict(st.reasons),
                  "line_nos": df["line_no"].to_list(),
                  "maxrss_kb": PEAK}))
""".replace("PEAK", _PEAK)


@pytest.mark.parametrize("fmt", ["ss", "tcpinfo"])
def test_one_huge_line_takes_bounded_memory(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / f"huge.{fmt}"
    with open(p, "wb") as f:
        if fmt == "ss":
            f.write(SS_BLOCK.encode() + b"ESTAB 0 0 10.0.0.1:1 10.0.0.2:2 ")
        else:
            f.write(TCPINFO_LINE.encode() + b'{"src": "')
        block = b"x" * (1 << 20)
        for _ in range(HUGE // len(block)):
            f.write(block)
        f.write(b"\n" + (SS_BLOCK if fmt == "ss" else TCPINFO_LINE).encode())
    out = subprocess.run([sys.executable, "-c", _CHILD, fmt, str(p)], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["maxrss_kb"] <= RSS_BOUND_KB, f"peak RSS {got['maxrss_kb'] / 1024:.0f} MB on a 100 MB line"
    assert got["unreadable"] == 1 and got["reasons"] == {LINE_TOO_LONG: 1}
    # what is around the line is read as if it were not there, with the same line numbers
    assert got["rows"] == 2
    assert got["line_nos"] == ([3, 8] if fmt == "ss" else [1, 3])


def test_bounded_lines_limit_is_exact() -> None:
    data = b"12345678\n123456789\nabc\n" + b"y" * 50 + b"\n12345678"
    got = list(bounded_lines(io.BufferedReader(io.BytesIO(data), 4), 8))
    assert got[0] == b"12345678\n" and got[2] == b"abc\n" and got[4] == b"12345678"
    assert type(got[1]) is LongLine and got[1] == "123456789"   # the line's start, for the examples
    assert type(got[3]) is LongLine and len(got) == 5
    # a last line without newline one byte over the limit is too long as well
    tail = list(bounded_lines(io.BytesIO(b"a\n123456789"), 8))
    assert tail[0] == b"a\n" and type(tail[1]) is LongLine


def test_ss_long_lines_counted_same_from_path_text_and_bytes(tmp_path: Path) -> None:
    long_socket = "ESTAB 0 0 10.0.0.1:9 10.0.0.2:9 " + "z" * MAX_LINE_BYTES + "\n"
    long_cont = "\t cubic " + "q" * MAX_LINE_BYTES + "\n"
    text = SS_BLOCK + long_socket + "\t cubic cwnd:5\n" + SS_BLOCK.split("\n", 1)[1] + long_cont + "ESTAB 0 0 10.0.0.1:7 10.0.0.2:7\n"
    p = tmp_path / "ss.txt"
    p.write_text(text)
    results = []
    for src in (p, text, text.encode()):
        st = ReadStats()
        df = read_ss(src, "v", stats=st)
        results.append((df.to_dicts(), st.malformed_lines, st.malformed_rows, dict(st.reasons)))
        # the long socket line goes with its continuation (counted too); the long continuation marks its row
        assert df.height == 3 and st.malformed_lines == 3
        assert st.reasons == {LINE_TOO_LONG: 2, "continuation line without a socket line": 1}
        assert df["malformed"].to_list() == [None, LINE_TOO_LONG, None]
        assert df["cwnd"].to_list() == [10, 10, None] and df["line_no"].to_list() == [3, 8, 11]
        assert all(len(e) < 300 for e in st.examples)
    assert results[0] == results[1] == results[2]


def test_tcpinfo_long_line_counted(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(TCPINFO_LINE + '{"pad": "' + "a" * MAX_LINE_BYTES + '"}\n' + TCPINFO_LINE)
    st = ReadStats()
    df = read_tcpinfo_jsonl(p, "v", stats=st)
    assert df["line_no"].to_list() == [1, 3] and st.malformed_lines == 1 and st.reasons == {LINE_TOO_LONG: 1}


# ------------------------------------------------------------------------------------------------
# 2. decompression is capped: a bomb is counted as unreadable, what came before it is kept
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Caps low enough for bombs of a few MiB to set them off quickly."""
    monkeypatch.setattr(containers, "RATIO_FREE_BYTES", 1 << 20)
    monkeypatch.setattr(containers, "MAX_RATIO", 50)
    monkeypatch.setattr(common, "MAX_JSON_BYTES", 2 << 20)


def test_ss_gz_bomb_stops_at_the_cap(tmp_path: Path, small_caps: None) -> None:
    p = tmp_path / "ss.txt.gz"
    p.write_bytes(_gzip_of_zeros(16, head=SS_BLOCK.encode()))   # 16 MiB from ~16 KB: ratio ~1000
    st = ReadStats()
    df = read_ss(p, "v", stats=st)
    assert df.height == 1 and df["cwnd"].to_list() == [10]
    cap = containers.decompressed_cap(p.stat().st_size)
    assert cap == 1 << 20
    assert st.reasons == {f"decompresses to more than {cap:,} bytes (a decompression bomb?), rest not read": 1}


def test_ss_gz_bomb_real_size(tmp_path: Path) -> None:
    # 1 GiB of zeros in ~1 MB, default caps: refused after ~200 MB, not read to the end
    p = tmp_path / "ss.txt.gz"
    p.write_bytes(_gzip_of_zeros(1024, head=SS_BLOCK.encode()))
    st = ReadStats()
    df = read_ss(p, "v", stats=st)
    cap = containers.decompressed_cap(p.stat().st_size)
    assert cap < 300 << 20
    assert df.height == 1 and st.malformed_lines == 1
    assert list(st.reasons) == [f"decompresses to more than {cap:,} bytes (a decompression bomb?), rest not read"]


def test_ss_gz_cut_short_keeps_what_was_read(tmp_path: Path) -> None:
    whole = gzip.compress("".join(SS_BLOCK.replace("40000", str(i)) for i in range(3000)).encode())
    p = tmp_path / "ss.txt.gz"
    p.write_bytes(whole[: len(whole) // 2])
    st = ReadStats()
    df = read_ss(p, "v", stats=st)
    assert 0 < df.height < 3000 and st.reasons == {"corrupt or cut compressed stream, rest not read": 1}


def test_ss_gz_under_the_cap_reads_like_plain(tmp_path: Path, small_caps: None) -> None:
    text = SS_BLOCK * 100
    g = tmp_path / "ss.txt.gz"
    g.write_bytes(gzip.compress(text.encode()))
    st = ReadStats()
    assert read_ss(g, "v", stats=st).equals(read_ss(text, "v")) and st.malformed_lines == 0


def test_flent_bomb_is_refused(tmp_path: Path, small_caps: None) -> None:
    # valid JSON all the way: a parser that got it whole would take ~10x its 16 MiB
    body = b'{"metadata": {}, "raw_values": {"x": [' + b"0," * (8 << 20) + b'0]}}'
    p = tmp_path / "bomb.flent.gz"
    p.write_bytes(gzip.compress(body, compresslevel=9))
    st = ReadStats()
    assert read_flent(p, "v", stats=st).height == 0
    cap = min(2 << 20, containers.decompressed_cap(p.stat().st_size))
    assert st.malformed_lines == 1
    assert list(st.reasons) == [f"decompresses to more than {cap:,} bytes (a decompression bomb?), not read"]


def test_flent_real_size_bomb_bounded(tmp_path: Path) -> None:
    # 2 GiB of a valid JSON array in ~2 MB (the attacker's file), default caps: refused at MAX_JSON_BYTES
    member = gzip.compress(b"0," * (1 << 19), compresslevel=9)
    p = tmp_path / "bomb.flent.gz"
    p.write_bytes(gzip.compress(b'{"raw_values": {"x": [') + member * 2048 + gzip.compress(b"0]}}"))
    child = ("import json, sys\nfrom parsers.hoststate.common import ReadStats\n"
             "from parsers.hoststate.iperf3 import read_flent\nst = ReadStats()\n"
             "n = read_flent(sys.argv[1], 'v', stats=st).height\n"
             f"print(json.dumps([n, st.malformed_lines, {_PEAK}]))")
    out = subprocess.run([sys.executable, "-c", child, str(p)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows, bad, rss_kb = json.loads(out.stdout)
    assert rows == 0 and bad == 1 and rss_kb <= RSS_BOUND_KB


def test_iperf3_oversize_and_deep_nesting_counted(tmp_path: Path, small_caps: None) -> None:
    p = tmp_path / "big.json"
    p.write_bytes(b'{"start": {}, "intervals": [' + b"{}," * (1 << 20) + b"{}]}")
    st = ReadStats()
    assert read_iperf3_json(p, "v", stats=st).height == 0
    assert list(st.reasons) == [f"larger than {2 << 20:,} bytes, not read"]
    p.write_text("[" * 200_000 + "]" * 200_000)
    st = ReadStats()
    assert read_iperf3_json(p, "v", stats=st).height == 0 and st.malformed_lines == 1


# ------------------------------------------------------------------------------------------------
# 3. and 4. what could not be read reaches bundle show, metrics.json, analyze; unreadable files warn
# ------------------------------------------------------------------------------------------------
def test_iperf3_lone_surrogate_escape_is_text_not_a_crash(tmp_path: Path) -> None:
    # found by benchmarks/fuzz.py --target hoststate: JSON may escape a lone surrogate into a host name
    doc = {"start": {"connected": [{"socket": 5, "local_host": "10.0.0.1", "local_port": 40000,
                                    "remote_host": "@@", "remote_port": 5201}],
                     "timestamp": {"timesecs": 1700000000}},
           "intervals": [{"streams": [{"socket": 5, "start": 0.0, "end": 1.0, "seconds": 1.0, "bytes": 125000,
                                       "bits_per_second": 1e6, "snd_cwnd": 14480, "rtt": 2000, "rttvar": 500}]}]}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc).replace('"@@"', '"\\udc80"'))
    assert "\\udc80" in p.read_text()
    df = read_iperf3_json(p, "v")
    assert df.height == 1 and df["dst"][0] == "\ufffd"


def _xlayer(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlayer", *args], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture
def bundle_env(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    if not (SAMPLE / "bundle.json").is_file():
        pytest.skip("samples/lab-baseline is missing")
    b = tmp_path / "b"
    shutil.copytree(SAMPLE, b)
    env = dict(os.environ, XLAYER_CACHE_DIR=str(tmp_path / "cache"))
    return b, env


def test_unreadable_lines_reach_show_metrics_and_analyze(bundle_env: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    b, env = bundle_env
    rows_before = read_ss(b / "server-ss.txt", "v").height
    with open(b / "server-ss.txt", "a") as f:
        f.writelines(f"garbage {i}\n" for i in range(19_718))
    show = _xlayer("bundle", "show", str(b), env=env)
    assert show.returncode == 0, show.stderr
    assert "19,718 unreadable lines (not an ss socket line x19,718)" in show.stdout
    assert "malformed: 19718" in show.stdout
    js = _xlayer("bundle", "show", "--json", str(b), env=env)
    c = next(c for c in json.loads(js.stdout)["captures"] if c["file"] == "server-ss.txt")
    assert c["records"] == rows_before and c["unreadable"] == 19_718
    note = "server-ss.txt: 19,718 of "
    for run in (1, 2):     # the second from the decode cache, which must keep the counts too
        out = tmp_path / f"m{run}"
        m = _xlayer("metrics", str(b), "-o", str(out), "--tables", "host_state", "-q", env=env)
        assert m.returncode == 0, m.stderr
        man = json.loads((out / "metrics.json").read_text())
        assert man["tables"]["host_state"]["rows"] == rows_before
        assert any(n.startswith(note) and "not an ss socket line x19718" in n for n in man["read_notes"]), man
    a = _xlayer("analyze", str(b), "--json", "-q", env=env)
    assert a.returncode == 0, a.stderr
    assert any(n.startswith(note) for n in json.loads(a.stdout)["notes"])


@pytest.mark.parametrize("how", ["garbage", "directory", "no-permission"])
def test_unreadable_host_state_file_warns(bundle_env: tuple[Path, dict[str, str]], tmp_path: Path, how: str) -> None:
    b, env = bundle_env
    ss = b / "server-ss.txt"
    if how == "garbage":
        ss.write_bytes(bytes(range(256)) * 400)
    elif how == "directory":
        ss.unlink()
        ss.mkdir()
    else:
        if os.geteuid() == 0:
            pytest.skip("root reads a file whatever its mode; the other cases cover the path")
        ss.chmod(0)
    for run in (1, 2):     # the second from the decode cache
        out = tmp_path / f"m{run}"
        m = _xlayer("metrics", str(b), "-o", str(out), "--tables", "host_state", "-q", env=env)
        if how == "directory" and m.returncode == 2:
            # the bundle's paths are checked before anything is read: a directory refuses the whole
            # bundle, with one line naming it (xlayer.bundle.manifest.checked_path)
            assert m.stderr.count("\n") == 1 and "server-ss.txt: is a directory" in m.stderr, m.stderr
            return
        # documented choice: the tables asked for are written (here 0 rows), exit 0, with a warning
        assert m.returncode == 0, m.stderr
        warned = [ln for ln in m.stderr.splitlines() if ln.startswith("warning: server-ss.txt:")]
        assert len(warned) == 1, m.stderr
        man = json.loads((out / "metrics.json").read_text())
        assert "server-ss.txt" in man["read_errors"] and man["tables"]["host_state"]["rows"] == 0
        if how == "garbage":
            assert man["read_errors"]["server-ss.txt"].startswith("nothing readable: ")


def test_ss_digits_that_int_cannot_read_are_unreadable_not_a_crash() -> None:
    # str.isdigit() holds for superscripts and other Unicode digits that int() refuses (fuzz input)
    st = ReadStats()
    text = ("State Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
            "ESTAB 0 0 10.0.0.1:\u00b2 10.0.0.2:5201\n"
            "ESTAB 0 0 10.0.0.1:5201 10.0.0.2:\u00b9\u00b2\n"
            "ESTAB 0 0 10.0.0.1:5201 10.0.0.2:40000\n")
    df = read_ss(text, "server", ts_ns=1_700_000_000_000_000_000, stats=st)
    assert df["dport"].to_list() == [40000]                 # the good line read
    assert st.malformed_lines == 2 and st.lines == 4         # the two others counted, not lost
