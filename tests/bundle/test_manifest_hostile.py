"""Issue 12: hostile values inside bundle.json -- a capture file naming the bundle directory, wrong types in
the capture run, times that are not int64 nanoseconds, NaN/Infinity, 5,000-digit integers, lone surrogates,
absurd clock overrides, 100,000 entries -- and captures that are missing when a command needs them.

Each is refused when the manifest is loaded, with one line naming the key path (API: a BundleError;
command line: exit 2 and one line on stderr, no traceback), or accepted and marked where that is right.
Every manifest and capture is made here, in tmp_path.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.common import REPO
from tests.helpers.pcapgen import write_udp_pcap
from xlayer.bundle.manifest import (
    MANIFEST,
    MAX_CAPTURES,
    MAX_ENTRIES,
    Bundle,
    BundleError,
    CaptureEntry,
    load_manifest,
    write_manifest,
)
from xlayer.bundle.validate import MAX_ANCHOR_TS, MAX_OFFSET_S, MAX_SKEW_PPM, NS_MAX

TIMEOUT_S = 600         # a guard against a hang, not a timing test


def base(**extra) -> dict:
    """Return a valid manifest of two wired captures (their files are not made here)."""
    return {"xlayer_bundle": 1, "tags": {"run": "1"},
            "captures": [{"kind": "wired", "vantage": "a", "file": "a.pcap"},
                         {"kind": "wired", "vantage": "b", "file": "b.pcap"}], **extra}


def write(d: Path, manifest: dict | str) -> Path:
    """Write manifest (an object, or raw JSON text as the attacker typed it) as d/bundle.json; return d."""
    d.mkdir(parents=True, exist_ok=True)
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (d / MANIFEST).write_text(text, encoding="utf-8")
    return d


def xlayer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S, cwd=REPO, stdin=subprocess.DEVNULL, check=False)


def refused(d: Path, *words: str) -> str:
    """Assert the manifest in d is refused by the API and by `bundle show` with one line holding every
    word; return that line."""
    with pytest.raises(BundleError) as info:
        load_manifest(d)
    msg = str(info.value)
    assert "\n" not in msg and all(w in msg for w in words), msg
    p = xlayer("bundle", "show", str(d))
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), p.stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. a capture "file" naming the bundle directory itself

@pytest.mark.parametrize("name", [".", "./", "./.", ".//", ""])
def test_file_naming_the_bundle_directory_is_refused(tmp_path, name) -> None:
    m = base()
    m["captures"][1]["file"] = name
    refused(write(tmp_path / "b", m), "captures[1]")
    with pytest.raises(BundleError, match="captures"):
        write_manifest(tmp_path / "b", Bundle(captures=[CaptureEntry("wired", "a", name)]))


# ---------------------------------------------------------------------------------------------
# 2. wrong types in the capture run's metadata

@pytest.mark.parametrize("run,key", [
    ({"command": 5}, "capture.command"),
    ({"command": "xlayer capture"}, "capture.command"),
    ({"command": ["xlayer", 5]}, "capture.command[1]"),
    ({"errors": 5}, "capture.errors"),
    ({"errors": [{"why": "x"}]}, "capture.errors[0]"),
    ({"tool": ["dumpcap"]}, "capture.tool"),
    ({"snaplen": -1}, "capture.snaplen"),
])
def test_capture_run_of_wrong_types_is_refused(tmp_path, run, key) -> None:
    refused(write(tmp_path / "b", base(capture=run)), f"{key}:")


def test_capture_run_of_the_right_types_is_shown(tmp_path) -> None:
    run = {"started_ns": 1_700_000_000_000_000_000, "stopped_ns": NS_MAX, "command": ["xlayer", "capture"],
           "errors": ["ss: gone"], "tool": "dumpcap", "snaplen": 96, "filter": None, "stop_reason": "SIGINT",
           "interfaces": [{"name": "eth0"}]}
    d = write(tmp_path / "b", base(capture=run))
    assert load_manifest(d).capture == run
    p = xlayer("bundle", "show", str(d))
    assert p.returncode == 1 and "Traceback" not in p.stderr       # 1: both captures are missing
    assert "command: xlayer capture" in p.stdout and "error: ss: gone" in p.stdout
    assert "started: 2023-11-14 22:13:20.000000000 UTC" in p.stdout and "stopped: 2262-04-11" in p.stdout


# ---------------------------------------------------------------------------------------------
# 3. times that are not int64 nanoseconds; NaN and Infinity, which Python's json reads by default

@pytest.mark.parametrize("value,shown", [
    ("1e30", "1e+30"), ("1.5", "1.5"), ("-1", "-1"), ("true", "true"), ('"now"', '"now"'),
    (str(NS_MAX + 1), str(NS_MAX + 1)), ("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"),
    ("1e400", "1e400"),
])
def test_started_ns_must_be_an_int64_nanosecond_time(tmp_path, value, shown) -> None:
    text = json.dumps(base(capture={"started_ns": 0})).replace('"started_ns": 0', f'"started_ns": {value}')
    line = refused(write(tmp_path / "b", text), "capture.started_ns:")
    assert shown in line


@pytest.mark.parametrize("where", ["captures[0].packets", "captures[1].interval_s", "tags_extra", "xlayer_bundle"])
def test_nan_and_infinity_are_refused_anywhere(tmp_path, where) -> None:
    m = base(tags_extra=0)
    m["captures"][0]["packets"] = 0
    m["captures"][1]["interval_s"] = 0
    text = json.dumps(m)
    key = where.rsplit(".", 1)[-1]
    for bad in ("NaN", "Infinity", "-Infinity"):
        if where == "xlayer_bundle":
            t = text.replace('"xlayer_bundle": 1', f'"xlayer_bundle": {bad}')
        else:
            t = text.replace(f'"{key}": 0', f'"{key}": {bad}')
        line = refused(write(tmp_path / "b", t), f"{where}:", bad)
        assert "not a number" in line


# ---------------------------------------------------------------------------------------------
# 4. integers Python would refuse to convert (over 4,300 digits), or that do not fit in 64 bits

@pytest.mark.parametrize("digits", [21, 4301, 5000, 100_000])
def test_overlong_integer_is_one_line(tmp_path, digits) -> None:
    text = json.dumps(base(note=0)).replace('"note": 0', '"note": ' + "7" * digits)
    refused(write(tmp_path / "b", text), "note:", f"an integer of {digits} digits")
    neg = json.dumps(base()).replace('"xlayer_bundle": 1', '"xlayer_bundle": -' + "1" * digits)
    refused(write(tmp_path / "b", neg), "xlayer_bundle:", f"{digits} digits")


def test_integers_of_64_bits_are_kept_and_one_more_is_refused(tmp_path) -> None:
    m = base(lo=-(2**63), hi=2**64 - 1)
    m["captures"][0]["packets"] = 2**64 - 1
    b = load_manifest(write(tmp_path / "b", m))
    assert b.extra == {"lo": -(2**63), "hi": 2**64 - 1} and b.captures[0].packets == 2**64 - 1
    m["captures"][0]["packets"] = 2**64
    refused(write(tmp_path / "b", m), "captures[0].packets:", "does not fit in 64 bits")


# ---------------------------------------------------------------------------------------------
# 5. lone surrogates: valid JSON, valid Python text, but no UTF-8 (a report or Parquet write fails later)

@pytest.mark.parametrize("target,path", [
    (lambda m: m["captures"][0].update(vantage="a\\ud800"), "captures[0].vantage"),
    (lambda m: m["captures"][1].update(file="b\\udfff.pcap"), "captures[1].file"),
    (lambda m: m["tags"].update(run="\\udc80x"), "tags.run"),
    (lambda m: m["tags"].update({"k\\ud800": "v"}), 'tags["k\\ud800"]'),
    (lambda m: m.update(host="\\ud83d"), "host"),
    (lambda m: m.update(vendor={"deep": [["\\ude00"]]}), "vendor.deep[0][0]"),
])
def test_lone_surrogate_is_refused_at_load(tmp_path, target, path) -> None:
    m = base()
    target(m)
    # json.dumps would escape our backslash; write the \\uXXXX escape as an attacker's file holds it
    text = json.dumps(m).replace("\\\\u", "\\u")
    line = refused(write(tmp_path / "b", text), f"{path}", "surrogate")
    assert line.isascii() and line.isprintable()


def test_deeply_nested_value_is_checked_and_named(tmp_path) -> None:
    depth = 500
    text = json.dumps(base(vendor=0)).replace('"vendor": 0', '"vendor": ' + "[" * depth + '"\\udc00"' + "]" * depth)
    line = refused(write(tmp_path / "b", text), "vendor" + "[0]" * depth + ":", "surrogate")
    assert len(line.splitlines()) == 1


def test_surrogate_pair_is_text_and_is_kept(tmp_path) -> None:
    text = json.dumps(base()).replace('"run": "1"', '"run": "\\ud83d\\ude00"')
    d = write(tmp_path / "b", text)
    assert load_manifest(d).tags == {"run": "\U0001f600"}
    p = xlayer("bundle", "show", str(d))
    assert p.returncode == 1 and "run: \U0001f600" in p.stdout and "Traceback" not in p.stderr


def test_write_manifest_refuses_a_lone_surrogate_and_leaves_nothing(tmp_path) -> None:
    b = Bundle(captures=[CaptureEntry("wired", "a", "a.pcap")], tags={"run": "\ud800"})
    with pytest.raises(BundleError, match=r"tags.run: .*surrogate"):
        write_manifest(tmp_path, b)
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# 6. clock overrides: finite, within sane ranges, the bad key named

@pytest.mark.parametrize("ov,key", [
    ({"offset_s": 1e12}, "offset_s"), ({"offset_s": -1e308}, "offset_s"), ({"offset_s": MAX_OFFSET_S + 1}, "offset_s"),
    ({"skew_ppm": 1e12}, "skew_ppm"), ({"skew_ppm": -1001}, "skew_ppm"),
    ({"offset_s": 0, "anchor_ts": 1e300}, "anchor_ts"), ({"anchor_ts": -1}, "anchor_ts"),
    ({"anchor_ts": MAX_ANCHOR_TS + 1}, "anchor_ts"), ({"offset_s": True}, "offset_s"), ({"skew_ppm": "0"}, "skew_ppm"),
])
def test_clock_override_out_of_range_names_the_key(tmp_path, ov, key) -> None:
    line = refused(write(tmp_path / "b", base(clock_overrides={"b": ov})), f"clock_overrides.b.{key}")
    assert "out of range" in line or "must be a number" in line


def test_clock_override_with_a_spaced_name_is_named_in_brackets(tmp_path) -> None:
    refused(write(tmp_path / "b", base(clock_overrides={"gps clock": {"skew_ppm": 1e9}})),
            'clock_overrides["gps clock"].skew_ppm')


def test_clock_overrides_at_the_bounds_are_analyzed(tmp_path) -> None:
    d = tmp_path / "b"
    d.mkdir()
    write_udp_pcap(d / "a.pcap", 40)
    write_udp_pcap(d / "b.pcap", 40)
    ov = {"a": {"offset_s": MAX_OFFSET_S, "skew_ppm": MAX_SKEW_PPM, "anchor_ts": MAX_ANCHOR_TS},
          "b": {"offset_s": -MAX_OFFSET_S, "skew_ppm": -MAX_SKEW_PPM, "anchor_ts": 0}}
    write(d, base(clock_overrides=ov))
    assert load_manifest(d).clock_overrides == ov
    p = xlayer("analyze", str(d), "--json", "-q", "--no-cache")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    al = json.loads(p.stdout)["alignment"]
    assert {c["file"]: c["offset_s"] for c in al["captures"]} == {"a.pcap": MAX_OFFSET_S, "b.pcap": -MAX_OFFSET_S}


# ---------------------------------------------------------------------------------------------
# 7. caps on the number of entries, and `bundle show` linear at the cap

def test_more_captures_than_the_cap_are_refused_before_reading_them(tmp_path) -> None:
    caps = [{"kind": "tcp_state", "vantage": f"v{i}", "file": f"s{i}.txt"} for i in range(MAX_CAPTURES + 1)]
    line = refused(write(tmp_path / "b", {"xlayer_bundle": 1, "captures": caps}), "captures:",
                   f"{MAX_CAPTURES + 1} entries", f"({MAX_CAPTURES})")
    assert len(line) < 300
    big = Bundle(captures=[CaptureEntry("wired", f"v{i}", f"f{i}.pcap") for i in range(MAX_CAPTURES + 1)])
    with pytest.raises(BundleError, match="more than a bundle may have"):
        write_manifest(tmp_path, big)
    assert os.listdir(tmp_path) == ["b"]


@pytest.mark.parametrize("key", ["tags", "clocks", "clock_overrides"])
def test_more_tags_or_clocks_than_the_cap_are_refused(tmp_path, key) -> None:
    value = {f"k{i}": ("v" if key == "tags" else {}) for i in range(MAX_ENTRIES + 1)}
    refused(write(tmp_path / "b", base(**{key: value})), f"{key}:", "more than a bundle may have")
    with pytest.raises(BundleError, match=f"{key}: {MAX_ENTRIES + 1} entries"):
        write_manifest(tmp_path, Bundle(**{key: value}))
    assert os.listdir(tmp_path) == ["b"]


def test_show_at_the_cap_lists_every_missing_capture(tmp_path) -> None:
    """MAX_CAPTURES missing captures, each on a clock of its own (what took minutes when grouping was
    quadratic): every one is listed with its error, one line on stderr counts them, exit 1."""
    caps = [{"kind": "wired", "vantage": f"v{i}", "file": f"f{i}.pcap"} for i in range(MAX_CAPTURES)]
    d = write(tmp_path / "b", {"xlayer_bundle": 1, "captures": caps})
    p = xlayer("bundle", "show", str(d))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stdout.count("capture file is missing") == MAX_CAPTURES
    assert f"  v{MAX_CAPTURES - 1}: f{MAX_CAPTURES - 1}.pcap" in p.stdout
    assert p.stderr.splitlines() == [(f"xlayer bundle show: {MAX_CAPTURES} of {MAX_CAPTURES} captures could not "
                                      "be read (missing or unreadable: see their error)")]


# ---------------------------------------------------------------------------------------------
# 8. every command: exit 2 on a bad bundle; analyze: exit 2 when no packet capture can be read

@pytest.mark.parametrize("cmd,opts", [(["bundle", "show"], []), (["analyze"], ["-q", "--no-cache"]), (["align"], []),
                                      (["report"], ["-o", "{tmp}/r.html"]), (["metrics"], ["-o", "{tmp}/m"])])
def test_every_command_exits_2_on_a_bad_manifest(tmp_path, cmd, opts) -> None:
    text = json.dumps(base()).replace('"run": "1"', '"run": "\\ud800"')
    d = write(tmp_path / "b", text)
    write_udp_pcap(d / "a.pcap", 5)
    p = xlayer(*cmd, str(d), *(o.replace("{tmp}", str(tmp_path)) for o in opts))
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "tags.run" in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "r.html").exists()


def test_analyze_with_every_packet_capture_missing_exits_2_naming_them(tmp_path) -> None:
    m = base()
    m["captures"].append({"kind": "air", "vantage": "sniffer", "file": "air.pcap"})
    m["captures"].append({"kind": "tcp_state", "vantage": "a", "file": "ss.txt"})
    d = write(tmp_path / "b", m)
    (d / "ss.txt").write_text("ESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n")
    for args in (["-q"], ["--json", "-q"]):
        p = xlayer("analyze", str(d), "--no-cache", *args)
        assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == 1, p.stderr
        assert "none of its 3 packet captures could be read" in lines[0]
        assert all(f"{f} (missing)" in lines[0] for f in ("a.pcap", "b.pcap", "air.pcap"))


@pytest.mark.parametrize("cmd", [["align"], ["report", "-o", "{out}/r.html", "-q"], ["metrics", "-o", "{out}/m", "-q"]])
def test_align_report_metrics_with_every_packet_capture_missing_exit_2(tmp_path, cmd) -> None:
    d = write(tmp_path / "b", base())
    out = tmp_path / "out"
    out.mkdir()
    p = xlayer(cmd[0], str(d), *(a.format(out=out) for a in cmd[1:]))
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert "none of its 2 packet captures could be read" in p.stderr and "a.pcap (missing)" in p.stderr
    assert list(out.iterdir()) == []                   # nothing written


def test_metrics_of_host_state_alone_needs_no_packet_capture(tmp_path) -> None:
    m = base()
    m["captures"].append({"kind": "tcp_state", "vantage": "a", "file": "ss.txt"})
    d = write(tmp_path / "b", m)
    (d / "ss.txt").write_text("ESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n")
    p = xlayer("metrics", str(d), "-o", str(tmp_path / "m"), "--tables", "host_state", "-q")
    assert p.returncode == 0, p.stderr


def test_analyze_with_an_unreadable_packet_capture_and_the_others_missing_exits_2(tmp_path) -> None:
    d = write(tmp_path / "b", base())
    (d / "a.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x00" * 3)    # pcap magic, header cut short
    p = xlayer("analyze", str(d), "--no-cache", "-q")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and "Traceback" not in p.stderr
    assert "a.pcap (" in p.stderr and "b.pcap (missing)" in p.stderr


def test_analyze_of_a_bundle_without_packet_captures_exits_2(tmp_path) -> None:
    d = write(tmp_path / "b", {"xlayer_bundle": 1, "captures": [
        {"kind": "tcp_state", "vantage": "a", "file": "ss.txt"}]})
    (d / "ss.txt").write_text("ESTAB 0 0 10.0.0.1:1 10.0.0.2:2\n")
    p = xlayer("analyze", str(d), "--no-cache", "-q")
    assert p.returncode == 2 and "no packet capture" in p.stderr and len(p.stderr.splitlines()) == 1


def test_analyze_with_some_captures_missing_analyzes_the_rest_and_says_so(tmp_path) -> None:
    m = base()
    m["captures"].append({"kind": "tcp_state", "vantage": "a", "file": "ss.txt"})
    d = write(tmp_path / "b", m)
    write_udp_pcap(d / "a.pcap", 30)
    p = xlayer("analyze", str(d), "--no-cache", "--json", "-q")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr.splitlines() == [("xlayer analyze: note: 2 of 3 captures not read, the rest analyzed: "
                                      "b.pcap (missing), ss.txt (missing)")]
    out = json.loads(p.stdout)
    notes = " ".join(out["notes"])
    assert "b.pcap" in notes and "ss.txt" in notes and "a.pcap" not in notes
    assert any(n.startswith("no flow for drop detection: 30 flows seen") for n in out["notes"])   # a.pcap was read
    p = xlayer("analyze", str(d), "--no-cache", "-q")
    assert p.returncode == 0 and "note: b.pcap:" in p.stdout and "2 of 3 captures not read" in p.stderr


# ---------------------------------------------------------------------------------------------
# the valid manifests of the repository load as before

def test_sample_manifests_still_load_unchanged() -> None:
    samples = sorted((REPO / "samples").glob("*/bundle.json"))
    assert samples
    for mf in samples:
        raw = json.loads(mf.read_text(encoding="utf-8"))
        b = load_manifest(mf.parent)
        assert b.to_dict() == raw, mf
