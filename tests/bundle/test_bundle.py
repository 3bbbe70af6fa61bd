"""Bundles: the manifest (round trip, hostile input), lazy tables on the real reader, `xlayer bundle`."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import parsers
from parsers import IngestStats, read_capture
from tests.helpers.common import REPO
from tests.helpers.pcapgen import write_udp_pcap
from xlayer.bundle import packets, scan, tcp_state
from xlayer.bundle.manifest import (
    MANIFEST,
    Bundle,
    BundleError,
    CaptureEntry,
    load_manifest,
    open_bundle,
    write_manifest,
)
from xlayer.text import safe_text

# Read in place from the shared checkout, never copied into the repository.
CORPUS = REPO.parent / "shared" / "corpus"
RADIOTAP = "radiotap/aircrack-ng__test1.pcap"           # 192 radiotap records
PCAPNG = "wired/zeek__tcp_retransmit-timeout.pcapng"
IPERF3 = "host/iperf3-python__results.json"
FLENT = "host/flent__test-rrul_be-socket_stats.flent.gz"

SS_TEXT = """\
# 1700000000.250
State Recv-Q Send-Q Local Address:Port  Peer Address:Port Process
ESTAB 0      0      10.0.0.1:5201 10.0.0.2:40000
\t cubic wscale:7,7 rto:204 rtt:3.5/1.2 mss:1448 cwnd:10 bytes_acked:1000 segs_out:10 segs_in:8 send 33.1Mbps
# 1700000000.300
State Recv-Q Send-Q Local Address:Port  Peer Address:Port Process
ESTAB 0      0      10.0.0.1:5201 10.0.0.2:40000
\t cubic wscale:7,7 rto:204 rtt:3.1/1.0 mss:1448 cwnd:14 bytes_acked:9000 segs_out:20 segs_in:15 send 52.3Mbps
"""

SPEC_EXAMPLE = {
    "xlayer_bundle": 1,
    "created": "2026-11-21T06:30:00.123456Z",
    "host": "labhost",
    "tags": {"access": "wifi", "device": "laptop-a", "os": "linux-6.1", "transport": "tcp", "run": "3"},
    "captures": [
        {"kind": "air", "vantage": "sniffer", "file": "sniffer-wlan0mon.pcapng", "channel": 6,
         "iface": "wlan0mon", "netns": None, "clock": "sniffer", "format": "pcapng", "notes": "",
         "complete": True, "packets": 12345, "if_drops": 0, "bytes": 4567890},
        {"kind": "wired", "vantage": "ap", "file": "ap-eth0.pcapng", "clock": "ap", "format": "pcapng"},
        {"kind": "tcp_state", "vantage": "server", "file": "server-ss.txt", "clock": "server", "format": "ss",
         "interval_s": 0.05, "filter": "dport = :5201"},
    ],
    "clocks": {"server": {"source": "chrony", "tracking": None}},
    "clock_overrides": {"sniffer": {"offset_s": 0.0123, "skew_ppm": -12.5, "anchor_ts": 1700000000.0}},
    "capture": {"started_ns": 1700000000000000000, "stopped_ns": 1700000030000000000,
                "stop_reason": "duration", "command": ["xlayer", "capture", "..."], "errors": []},
}


def corpus_file(rel: str) -> Path:
    """Return a corpus file's path, or skip the test saying where the corpus was looked for."""
    p = CORPUS / rel
    if not p.exists():
        pytest.skip(f"corpus file {rel} not found under {CORPUS} (tests read ../shared/corpus in place)")
    return p


def has_module(name: str) -> bool:
    """Return True if a parsers submodule is present (host-state readers are written separately)."""
    return importlib.util.find_spec(name) is not None


def xlayer(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the command line in a child process."""
    return subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def make_bundle(d: Path, files: dict[str, tuple[str, str]], **kw) -> Bundle:
    """Write a manifest for files already in d ({file: (kind, vantage)}); return the opened bundle."""
    b = Bundle(captures=[CaptureEntry(kind=k, vantage=v, file=f) for f, (k, v) in files.items()], **kw)
    write_manifest(d, b)
    return open_bundle(d)


def section(text: str, name: str) -> str:
    """Return the lines `bundle show` prints under one capture's "  NAME" heading."""
    lines = text.splitlines()
    start = lines.index(f"  {name}") + 1
    end = start
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    return "\n".join(lines[start:end])


def write_raw_manifest(d: Path, obj) -> None:
    """Write a manifest without validation, as a hostile or broken tool might."""
    (d / MANIFEST).write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# manifest

def test_spec_example_round_trips_and_keeps_unknown_keys(tmp_path) -> None:
    obj = json.loads(json.dumps(SPEC_EXAMPLE))
    obj["future_top"] = {"x": [1, 2]}
    obj["captures"][1]["future_key"] = "kept"
    write_raw_manifest(tmp_path, obj)
    b = load_manifest(tmp_path)
    assert b.tags["run"] == "3" and b.host == "labhost"
    sniffer = b.entry("sniffer")
    assert (sniffer.kind, sniffer.channel, sniffer.iface, sniffer.packets) == ("air", 6, "wlan0mon", 12345)
    assert b.entry("server").interval_s == 0.05 and b.entry("server").filter == "dport = :5201"
    assert b.clock_overrides["sniffer"]["skew_ppm"] == -12.5
    assert b.capture["stop_reason"] == "duration"

    out = tmp_path / "again"
    out.mkdir()
    write_manifest(out, b)
    again = load_manifest(out)
    assert again == b
    written = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert written["future_top"] == {"x": [1, 2]}
    assert written["captures"][1]["future_key"] == "kept"
    assert written["xlayer_bundle"] == 1


def test_write_manifest_is_atomic_and_validates_first(tmp_path) -> None:
    good = Bundle(captures=[CaptureEntry("wired", "ap", "ap.pcap")], tags={"run": "1"})
    write_manifest(tmp_path, good)
    before = (tmp_path / MANIFEST).read_bytes()
    bad = Bundle(captures=[CaptureEntry("wired", "ap", "../ap.pcap")])
    with pytest.raises(BundleError, match="leaves the bundle directory"):
        write_manifest(tmp_path, bad)
    with pytest.raises(BundleError, match="tags"):
        write_manifest(tmp_path, Bundle(tags={"run": 3}))  # tag values are strings by the spec
    assert (tmp_path / MANIFEST).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [MANIFEST]  # no temp files left behind
    assert json.loads(before)["captures"][0]["clock"] == "ap"


@pytest.mark.parametrize("file,why", [
    ("../../etc/passwd", "leaves the bundle directory"),
    ("sub/../../x.pcap", "leaves the bundle directory"),
    ("..\\..\\windows\\x.pcap", "leaves the bundle directory"),
    ("/etc/passwd", "absolute path"),
    ("C:\\x.pcap", "absolute path"),
    ("", "non-empty string"),
    (MANIFEST, "manifest"),
])
def test_manifest_file_outside_the_bundle_is_refused(tmp_path, file, why) -> None:
    write_raw_manifest(tmp_path, {"xlayer_bundle": 1,
                                  "captures": [{"kind": "wired", "vantage": "ap", "file": file}]})
    with pytest.raises(BundleError, match=why) as exc:
        open_bundle(tmp_path)
    assert "captures[0]" in str(exc.value)


def test_invalid_json_names_the_file(tmp_path) -> None:
    write_raw_manifest(tmp_path, '{"xlayer_bundle": 1, "captures": [')
    with pytest.raises(BundleError, match="not valid JSON") as exc:
        load_manifest(tmp_path)
    assert str(tmp_path / MANIFEST) in str(exc.value)
    (tmp_path / MANIFEST).write_bytes(b'{"xlayer_bundle": 1, "host": "\xff"}')
    with pytest.raises(BundleError, match="not UTF-8"):
        load_manifest(tmp_path)


@pytest.mark.parametrize("obj,why", [
    ({"xlayer_bundle": 1, "captures": [{"kind": "radio", "vantage": "a", "file": "a.pcap"}]},
     "unknown kind 'radio'"),
    ({"xlayer_bundle": 1, "captures": [{"kind": "air", "vantage": "a", "file": "a.pcap", "format": "ss"}]},
     "cannot have format 'ss'"),
    ({"xlayer_bundle": 1, "captures": [{"kind": "air", "vantage": "a"}]}, "missing required key 'file'"),
    ({"xlayer_bundle": 1, "captures": [{"kind": "air", "vantage": "a", "file": "a", "channel": "6"}]},
     "'channel' must be"),
    ({"xlayer_bundle": 1, "captures": {"kind": "air"}}, "'captures' must be an array"),
    ({"xlayer_bundle": 1, "capture": {"stop_reason": "bored"}}, "stop_reason"),
    ({"xlayer_bundle": 1, "clock_overrides": {"ap": {"offset_s": "soon"}}}, "offset_s must be a number"),
    ({"xlayer_bundle": 2}, "newer"),
    ({"captures": []}, "not an xlayer bundle"),
    ([1, 2], "must be a JSON object"),
])
def test_invalid_manifest_is_refused_clearly(tmp_path, obj, why) -> None:
    write_raw_manifest(tmp_path, obj)
    with pytest.raises(BundleError, match=why):
        load_manifest(tmp_path)


def test_missing_manifest_or_directory(tmp_path) -> None:
    with pytest.raises(BundleError, match="no bundle.json"):
        open_bundle(tmp_path)
    with pytest.raises(BundleError, match="no such directory"):
        open_bundle(tmp_path / "nope")


def test_same_vantage_shares_a_clock_unless_told_otherwise(tmp_path) -> None:
    write_raw_manifest(tmp_path, {"xlayer_bundle": 1, "captures": [
        {"kind": "wired", "vantage": "ap", "file": "ap-eth0.pcap"},
        {"kind": "air", "vantage": "ap", "file": "ap-mon.pcap"},
        {"kind": "wired", "vantage": "ap", "file": "ap-gps.pcap", "clock": "gps"},
        {"kind": "tcp_state", "vantage": "server", "file": "ss.txt", "clock": None},
    ]})
    b = open_bundle(tmp_path)
    assert [c.clock for c in b.captures] == ["ap", "ap", "gps", "server"]
    groups = b.clock_groups()
    assert [c.file for c in groups["ap"]] == ["ap-eth0.pcap", "ap-mon.pcap"]
    assert [c.file for c in groups["gps"]] == ["ap-gps.pcap"]


def test_entry_lookup_by_file_or_unique_vantage(tmp_path) -> None:
    b = Bundle(captures=[CaptureEntry("wired", "ap", "a.pcap"), CaptureEntry("air", "ap", "b.pcap"),
                         CaptureEntry("wired", "server", "s.pcap")])
    assert b.entry("server").file == "s.pcap"
    assert b.entry("b.pcap").kind == "air"
    with pytest.raises(BundleError, match="has 2 captures"):
        b.entry("ap")
    with pytest.raises(BundleError, match="no capture 'client'"):
        b.entry("client")


from xlayer.bundle import guess_format  # noqa: E402


def test_guess_format_from_content(tmp_path) -> None:
    cases = {
        "ss.txt": SS_TEXT,
        "plain-ss.txt": SS_TEXT.split("\n", 1)[1],
        "stamps.log": "# 1700000000.5\nESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n",
        "ti.jsonl": '{"ts_ns": 1, "tcp_info": {"tcpi_rtt": 5000}}\n{"ts_ns": 2}\n',
        "ti-comment.jsonl": '# sampler v1\n{"ts": 1.5, "sport": 5201, "dport": 40000, "snd_cwnd": 10}\n',
        "headerless-ss": "ESTAB 0 0 10.0.0.1:5201 10.0.0.2:40000\n\t cubic rtt:3.5/1.2 cwnd:10\n",
        "iperf.out": json.dumps({"start": {}, "intervals": [], "end": {}}, indent=1),
        "iperf-one-line.out": json.dumps({"start": {}, "intervals": [], "end": {}}),
    }
    want = {"ss.txt": "ss", "plain-ss.txt": "ss", "stamps.log": "ss", "ti.jsonl": "tcpinfo-jsonl",
            "ti-comment.jsonl": "tcpinfo-jsonl", "headerless-ss": "ss", "iperf.out": "iperf3-json",
            "iperf-one-line.out": "iperf3-json"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        assert guess_format(tmp_path / name) == want[name], name
    write_udp_pcap(tmp_path / "u.bin", 3)
    assert guess_format(tmp_path / "u.bin") == "pcap"
    import gzip

    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "zeros.gz").write_bytes(gzip.compress(bytes(1 << 20)))
    (tmp_path / "broken.gz").write_bytes(b"\x1f\x8b\x08garbage")
    for name in ("other.json", "empty", "zeros.gz", "broken.gz"):
        with pytest.raises(BundleError, match="cannot tell the format"):
            guess_format(tmp_path / name)


def test_guess_format_of_corpus_files() -> None:
    assert guess_format(corpus_file(RADIOTAP)) == "pcap"
    assert guess_format(corpus_file(PCAPNG)) == "pcapng"
    assert guess_format(corpus_file(IPERF3)) == "iperf3-json"
    assert guess_format(corpus_file(FLENT)) == "flent"


# ---------------------------------------------------------------------------------------------
# lazy tables on the real reader

def test_scan_adds_columns_and_matches_read_capture(tmp_path) -> None:
    write_udp_pcap(tmp_path / "ap.pcap", 500)
    b = make_bundle(tmp_path, {"ap.pcap": ("wired", "ap")})
    got = scan(b, "ap").collect()
    want = read_capture(tmp_path / "ap.pcap")
    assert got.drop("capture_file", "vantage", "clock").equals(want)
    assert got.get_column("vantage").unique().to_list() == ["ap"]
    assert got.get_column("clock").unique().to_list() == ["ap"]
    assert got.get_column("capture_file").unique().to_list() == ["ap.pcap"]
    # Pushed-down filter, projection and limit give what the eager table gives.
    lazy = scan(b, "ap.pcap").filter(pl.col("frame") > 100).select("frame", "vantage").head(7).collect()
    assert lazy.get_column("frame").to_list() == list(range(101, 108))


def test_scan_streams_chunks_and_stops_early(tmp_path, monkeypatch) -> None:
    write_udp_pcap(tmp_path / "big.pcap", 20_000)
    b = make_bundle(tmp_path, {"big.pcap": ("wired", "server")})
    chunks = []
    real = parsers.decode.ingest.iter_tables

    def small_chunks(path, **kw):
        for df in real(path, chunk_bytes=64 << 10, **{k: v for k, v in kw.items() if k != "chunk_bytes"}):
            chunks.append(df.height)
            yield df

    monkeypatch.setattr(parsers.decode.ingest, "iter_tables", small_chunks)
    assert scan(b, "server").head(10).collect().height == 10
    assert len(chunks) == 1              # the first chunk held enough rows: the rest was never read
    chunks.clear()
    assert scan(b, "server").select(pl.len()).collect().item() == 20_000
    assert len(chunks) > 1


def test_scan_reads_nothing_before_collect(tmp_path, monkeypatch) -> None:
    write_udp_pcap(tmp_path / "ap.pcap", 50)
    write_udp_pcap(tmp_path / "srv.pcap", 30)
    b = make_bundle(tmp_path, {"ap.pcap": ("wired", "ap"), "srv.pcap": ("wired", "server")})
    calls = []
    real = parsers.decode.ingest.iter_tables

    def counting(path, **kw):
        calls.append(os.path.basename(path))
        return real(path, **kw)

    monkeypatch.setattr(parsers.decode.ingest, "iter_tables", counting)
    lf = scan(b, "ap").filter(pl.col("wirelen") > 0)
    both = packets(b).group_by("vantage").len()
    assert lf.collect_schema()["vantage"] == pl.String
    assert calls == []
    # Change the file after scan(): the rows come from the file as it is at collect().
    write_udp_pcap(tmp_path / "ap.pcap", 70)
    assert lf.collect().height == 70
    assert calls == ["ap.pcap"]
    counts = dict(both.collect().iter_rows())
    assert counts == {"ap": 70, "server": 30}


def test_tcp_state_scan_reads_nothing_before_collect(tmp_path, monkeypatch) -> None:
    if not has_module("parsers.hoststate.ss"):
        pytest.skip("parsers.hoststate.ss (the ss -tin reader) is not in this tree yet")
    import parsers.hoststate

    (tmp_path / "server-ss.txt").write_text(SS_TEXT)
    b = make_bundle(tmp_path, {"server-ss.txt": ("tcp_state", "server")})   # format left to guess
    calls = []
    real = parsers.hoststate.READERS["ss"]

    def counting(path, *a, **kw):
        calls.append(path)
        return real(path, *a, **kw)

    monkeypatch.setitem(parsers.hoststate.READERS, "ss", counting)
    lf = tcp_state(b).filter(pl.col("cwnd") > 12).select("cwnd", "clock")
    assert lf.collect_schema()["clock"] == pl.String and calls == []
    assert lf.collect().rows() == [(14, "server")]
    assert len(calls) == 1


def test_packets_concatenates_corpus_captures(tmp_path) -> None:
    air, wired = corpus_file(RADIOTAP), corpus_file(PCAPNG)
    shutil.copyfile(air, tmp_path / "sniffer.pcap")
    shutil.copyfile(wired, tmp_path / "server.pcapng")
    b = make_bundle(tmp_path, {"sniffer.pcap": ("air", "sniffer"), "server.pcapng": ("wired", "server")})
    df = packets(b).collect()
    n_air, n_wired = read_capture(air).height, read_capture(wired).height
    assert n_air == 192
    assert df.height == n_air + n_wired
    per = dict(df.group_by("vantage").agg(pl.col("linktype").first()).iter_rows())
    assert per == {"sniffer": 127, "server": 1}
    assert tcp_state(b).collect().height == 0


def test_missing_capture_file_is_a_clear_error(tmp_path) -> None:
    b = make_bundle(tmp_path, {"gone.pcap": ("wired", "ap")})
    with pytest.raises(BundleError, match="gone.pcap: capture file is missing"):
        scan(b, "ap")


def test_tcp_state_from_ss_text(tmp_path) -> None:
    if not has_module("parsers.hoststate.ss"):
        pytest.skip("parsers.hoststate.ss (the ss -tin reader) is not in this tree yet")
    (tmp_path / "server-ss.txt").write_text(SS_TEXT)
    b = make_bundle(tmp_path, {"server-ss.txt": ("tcp_state", "server")})
    df = tcp_state(b).collect()
    assert df.height == 2
    assert df.get_column("vantage").to_list() == ["server", "server"]
    assert df.get_column("capture_file").unique().to_list() == ["server-ss.txt"]
    assert df.get_column("cwnd").to_list() == [10, 14]


def test_tcp_state_concatenates_every_host_format(tmp_path) -> None:
    for mod in ("parsers.hoststate.ss", "parsers.hoststate.iperf3", "parsers.hoststate.tcpinfo"):
        if not has_module(mod):
            pytest.skip(f"{mod} is not in this tree yet")
    shutil.copyfile(corpus_file(IPERF3), tmp_path / "client.json")
    shutil.copyfile(corpus_file(FLENT), tmp_path / "client.flent.gz")
    (tmp_path / "server-ss.txt").write_text(SS_TEXT)
    (tmp_path / "ti.jsonl").write_text(
        '{"ts_ns": 1700000000000000000, "src": "10.0.0.1", "sport": 5201, "dst": "10.0.0.2", '
        '"dport": 40000, "state": 1, "tcpi_snd_cwnd": 12, "tcpi_rtt": 5070}\n')
    b = make_bundle(tmp_path, {"client.json": ("tcp_state", "client"),
                               "client.flent.gz": ("tcp_state", "client"),
                               "server-ss.txt": ("tcp_state", "server"),
                               "ti.jsonl": ("tcp_state", "server")})
    df = tcp_state(b).collect()
    per = dict(df.group_by("capture_file").len().iter_rows())
    assert set(per) == {"client.json", "client.flent.gz", "server-ss.txt", "ti.jsonl"}
    assert per["server-ss.txt"] == 2 and per["ti.jsonl"] == 1 and per["client.json"] > 0
    assert per["client.flent.gz"] > 0
    assert set(df.filter(pl.col("capture_file") == "ti.jsonl").get_column("cwnd").to_list()) == {12}
    assert dict(df.select("capture_file", "clock").unique().iter_rows())["ti.jsonl"] == "server"
    from parsers.hoststate.iperf3 import read_iperf3_json

    assert per["client.json"] == read_iperf3_json(corpus_file(IPERF3), "client").height


# ---------------------------------------------------------------------------------------------
# command line

def test_cli_new_then_show(tmp_path) -> None:
    air, iperf = corpus_file(RADIOTAP), corpus_file(IPERF3)
    src = tmp_path / "src"
    src.mkdir()
    write_udp_pcap(src / "ap.pcap", 40)
    write_udp_pcap(src / "server.pcap", 25, t0_ns=1_700_000_001_000_000_000)
    out = tmp_path / "run3"
    p = xlayer("bundle", "new", str(out), "--air", f"sniffer={air}", "--wired", f"ap={src / 'ap.pcap'}",
               "--wired", f"server={src / 'server.pcap'}", "--tcp-state", f"server={iperf}",
               "--tag", "access=wifi", "--tag", "run=3", "--channel", "sniffer=6",
               "--clock", "ap=gps", "--note", "server=iperf3 -c 10.0.0.1 -J")
    assert p.returncode == 0, p.stderr
    m = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert m["xlayer_bundle"] == 1 and m["tags"] == {"access": "wifi", "run": "3"}
    caps = {c["file"]: c for c in m["captures"]}
    assert caps[air.name]["format"] == "pcap" and caps[air.name]["channel"] == 6
    assert caps["ap.pcap"]["clock"] == "gps"
    assert caps["server.pcap"]["clock"] == caps[iperf.name]["clock"] == "server"
    assert caps[iperf.name]["format"] == "iperf3-json" and caps[iperf.name]["kind"] == "tcp_state"
    assert caps["server.pcap"]["notes"] == "iperf3 -c 10.0.0.1 -J"
    assert (out / "ap.pcap").read_bytes() == (src / "ap.pcap").read_bytes()
    assert not (out / "ap.pcap").is_symlink()

    p = xlayer("bundle", "show", str(out))
    assert p.returncode == 0 or "needs parsers.hoststate.iperf3" in p.stdout, p.stdout + p.stderr
    text = p.stdout
    assert "  access: wifi" in text
    block = section(text, air.name)
    assert "records: 192" in block and "127 IEEE802_11_RADIOTAP (192)" in block
    assert "malformed: " in block and "first: 20" in block and "duration: " in block
    ap_block = section(text, "ap.pcap")
    assert "records: 40" in ap_block and "first: 2023-11-14 22:13:20.000000000 UTC" in ap_block
    assert "last: 2023-11-14 22:13:20.000390000 UTC" in ap_block and "duration: 0.000390 s" in ap_block
    clocks = text.split("\nclocks:\n", 1)[1]
    assert f"  server: server.pcap, {iperf.name}" in clocks and "  gps: ap.pcap" in clocks

    p = xlayer("bundle", "show", str(out), "--json")
    d = json.loads(p.stdout)
    by = {c["file"]: c for c in d["captures"]}
    st = IngestStats()
    read_capture(air, stats=st)
    assert by[air.name]["records"] == st.records and by[air.name]["malformed"] == st.malformed
    assert by[air.name]["first_ts_ns"] == st.first_ts_ns and by[air.name]["last_ts_ns"] == st.last_ts_ns
    assert by[air.name]["linktypes"] == {"127": 192}
    assert by["server.pcap"]["first_ts"] == "2023-11-14T22:13:21.000000000Z"


def test_cli_link_hard_links(tmp_path) -> None:
    write_udp_pcap(tmp_path / "ap.pcap", 5)
    p = xlayer("bundle", "new", str(tmp_path / "b"), "--wired", f"ap={tmp_path / 'ap.pcap'}", "--link")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "b" / "ap.pcap").stat().st_ino == (tmp_path / "ap.pcap").stat().st_ino
    assert "hard-linked ap.pcap" in p.stdout


def test_cli_new_refusals(tmp_path) -> None:
    write_udp_pcap(tmp_path / "ap.pcap", 5)
    (tmp_path / "x").mkdir()
    write_udp_pcap(tmp_path / "x" / "ap.pcap", 5)
    (tmp_path / "notes.txt").write_text("just words\n")
    out = tmp_path / "b"
    ap = f"ap={tmp_path / 'ap.pcap'}"
    cases = [
        (["--wired", f"ap={tmp_path / 'nope.pcap'}"], "no such file"),
        (["--wired", str(tmp_path / "ap.pcap")], "expected VANTAGE=FILE"),
        (["--wired", ap, "--wired", f"server={tmp_path / 'x' / 'ap.pcap'}"], "same file name 'ap.pcap'"),
        (["--tcp-state", ap], "looks like pcap"),
        (["--wired", f"ap={tmp_path / 'notes.txt'}"], "cannot tell the format"),
        (["--wired", ap, "--channel", "ap=6"], "has no air capture"),
        (["--wired", ap, "--clock", "client=gps"], "no capture at vantage"),
        (["--wired", ap, "--tag", "novalue"], "expected KEY=VALUE"),
        (["--wired", f"a p={tmp_path / 'ap.pcap'}"], "short name"),
        ([], "nothing to put in the bundle"),
    ]
    for extra, why in cases:
        p = xlayer("bundle", "new", str(out), *extra)
        assert p.returncode == 2, (extra, p.stdout, p.stderr)
        assert why in p.stderr, (extra, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not out.exists()   # refused before anything was created

    assert xlayer("bundle", "new", str(out), "--wired", ap).returncode == 0
    p = xlayer("bundle", "new", str(out), "--wired", ap)
    assert p.returncode == 2 and "already holds a bundle.json" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = xlayer("bundle", "new", str(out), "--wired", ap, "--tag", "run=2", "--force")
    assert p.returncode == 0, p.stderr
    assert load_manifest(out).tags == {"run": "2"}


def test_cli_new_leaves_nothing_behind_when_writing_fails(tmp_path, monkeypatch, capsys) -> None:
    import errno

    import xlayer.cli.bundle as bundle_cli
    from xlayer.cli.main import main

    write_udp_pcap(tmp_path / "ap.pcap", 5)
    write_udp_pcap(tmp_path / "srv.pcap", 5)

    def full(d, b):
        raise OSError(errno.ENOSPC, "No space left on device", str(d))

    monkeypatch.setattr(bundle_cli, "write_manifest", full)
    out = tmp_path / "b"
    rc = main(["bundle", "new", str(out), "--wired", f"ap={tmp_path / 'ap.pcap'}",
               "--wired", f"server={tmp_path / 'srv.pcap'}"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and len(err.strip().splitlines()) == 1
    assert list(out.iterdir()) == []


def test_cli_new_keeps_a_file_already_in_the_bundle(tmp_path) -> None:
    out = tmp_path / "b"
    out.mkdir()
    write_udp_pcap(out / "ap.pcap", 5)
    p = xlayer("bundle", "new", str(out), "--wired", f"ap={out / 'ap.pcap'}")
    assert p.returncode == 0, p.stderr
    assert "kept ap.pcap" in p.stdout and "with 1 capture\n" in p.stdout
    assert scan(open_bundle(out), "ap").collect().height == 5


def test_cli_show_escapes_terminal_control(tmp_path) -> None:
    evil = "evil\x1b[2J.pcap"
    write_udp_pcap(tmp_path / evil, 3)
    out = tmp_path / "b"
    p = xlayer("bundle", "new", str(out), "--wired", f"ap={tmp_path / evil}",
               "--tag", "color=\x1b[31mred", "--tag", "multi=line1\nline2",
               "--note", "ap=bell\x07 and C1 \x9b2J")
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout
    p = xlayer("bundle", "show", str(out))
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout and "\x9b" not in p.stdout
    assert "color: \\x1b[31mred" in p.stdout
    assert "multi: line1\\x0aline2" in p.stdout
    assert "evil\\x1b[2J.pcap" in p.stdout
    assert "notes: bell\\x07 and C1 \\x9b2J" in p.stdout
    p = xlayer("bundle", "show", str(out), "--json")
    assert "\x1b" not in p.stdout and json.loads(p.stdout)["tags"]["color"] == "\x1b[31mred"


def test_cli_show_hostile_manifest(tmp_path) -> None:
    hostile = {"xlayer_bundle": 1, "tags": {"k\x1b]0;title\x07": "v"},
               "captures": [{"kind": "wired", "vantage": "ap", "file": "../../etc/passwd"}]}
    write_raw_manifest(tmp_path, hostile)
    p = xlayer("bundle", "show", str(tmp_path))
    assert p.returncode == 2
    assert "leaves the bundle directory" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    write_raw_manifest(tmp_path, "{not json\x1b[31m")
    p = xlayer("bundle", "show", str(tmp_path))
    assert p.returncode == 2 and "not valid JSON" in p.stderr and str(tmp_path / MANIFEST) in p.stderr


def test_cli_show_prints_clocks_and_capture_run(tmp_path) -> None:
    write_udp_pcap(tmp_path / "sniffer-wlan0mon.pcapng", 3)   # content, not name, decides the format
    write_udp_pcap(tmp_path / "ap-eth0.pcapng", 3)
    (tmp_path / "server-ss.txt").write_text(SS_TEXT)
    obj = json.loads(json.dumps(SPEC_EXAMPLE))
    for c in obj["captures"]:
        c.pop("format")
    obj["clocks"]["server"]["tracking"] = "Reference ID    : C0A80001 (gw)\nStratum         : 3\x1b[0m"
    write_raw_manifest(tmp_path, obj)
    p = xlayer("bundle", "show", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    clocks = p.stdout.split("\nclocks:\n", 1)[1]
    assert "  sniffer: sniffer-wlan0mon.pcapng\n" in clocks
    assert "override: offset_s 0.0123, skew_ppm -12.5, anchor_ts 1700000000.0" in clocks
    assert "    source: chrony\n    tracking:\n      Reference ID    : C0A80001 (gw)\n" in clocks
    assert "      Stratum         : 3\\x1b[0m" in clocks
    assert "capture run:" in p.stdout and "stop reason: duration" in p.stdout
    assert "started: 2023-11-14 22:13:20.000000000 UTC" in p.stdout
    assert "format: pcap\n" in section(p.stdout, "ap-eth0.pcapng")
    assert "records: 2" in section(p.stdout, "server-ss.txt")


def test_cli_show_reports_unreadable_capture_and_goes_on(tmp_path) -> None:
    write_udp_pcap(tmp_path / "ok.pcap", 4)
    (tmp_path / "bad.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x00" * 3)  # pcap magic, header cut short
    make_bundle(tmp_path, {"bad.pcap": ("wired", "ap"), "gone.pcap": ("wired", "client"),
                           "ok.pcap": ("wired", "server")})
    p = xlayer("bundle", "show", str(tmp_path))
    assert p.returncode == 1
    assert "error: gone.pcap: capture file is missing" in p.stdout
    assert section(p.stdout, "bad.pcap").count("error:") == 1
    assert "records: 4" in section(p.stdout, "ok.pcap")
    assert "Traceback" not in p.stdout + p.stderr


def test_safe_text() -> None:
    assert safe_text("plain é ü 日本") == "plain é ü 日本"
    assert safe_text("a\x1b[31mb\nc\x7f") == "a\\x1b[31mb\\x0ac\\x7f"
    assert safe_text("csi\x9b") == "csi\\x9b"
    assert safe_text("rtl\u202eevil") == "rtl\\u202eevil"
    assert safe_text(b"\xffname".decode("utf-8", "surrogateescape")) == "\\xffname"
    assert safe_text(None) == "-"
