"""Issue 13, item 5: `xlayer analyze|report|metrics FILE...` on a user's own captures, without a bundle.

The files are read as an in-memory bundle (`xlayer.bundle.adhoc`): kinds from the link types, vantages
from the file names, said in one line on stderr with the `xlayer bundle new` command that keeps them as
a bundle; nothing is written beside them.  A missing, unknown or unreadable file is one line and exit 2.
An air capture of a WPA network says its data frames were protected and no keys were given.
"""
from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.common import REPO, corpus_or_skip
from xlayer.bundle.adhoc import adhoc_bundle, capture_kind, vantage_name
from xlayer.bundle.manifest import BundleError

LAB = REPO / "samples" / "lab-baseline"
SIM = REPO / "samples" / "sim-baseline"
LAB_FLOW = "tcp 10.71.1.2:5201>10.71.2.2:54138"        # the sample's download (its bundle's analyze names it)
SIM_FLOW = "tcp 10.10.1.1:49153>10.10.2.2:5001"


def xlayer(tmp: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the command line in a child process, its decode cache and working directory in `tmp`."""
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    env = {**os.environ, "XLAYER_CACHE_DIR": str(tmp / "cache"), "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=work, env=env, check=False)


def listing(d: Path) -> dict[str, tuple[int, int]]:
    """Return every entry under `d` (hidden ones included) with its size and modification time."""
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


def copied(tmp: Path, src: Path, names: list[str]) -> list[Path]:
    """Return copies of the sample files `names` in tmp/in (the user's directory)."""
    d = tmp / "in"
    d.mkdir(exist_ok=True)
    return [Path(shutil.copy2(src / n, d / n)) for n in names]


def lab_files(tmp: Path) -> list[Path]:
    names = sorted(p.name for p in LAB.glob("*.pcapng")) + ["server-ss.txt"]
    return copied(tmp, LAB, names)


def test_lab_captures_without_a_bundle(tmp_path: Path) -> None:
    """Four wired pcapng files and an ss text: one stderr line naming each as what it was read as."""
    files = lab_files(tmp_path)
    before = listing(tmp_path / "in")
    r = xlayer(tmp_path, "analyze", "-q", *map(str, files))
    assert r.returncode == 0, r.stderr[-2000:]
    err = r.stderr.splitlines()
    assert len(err) == 1, r.stderr
    assert err[0].startswith("xlayer: no bundle given: reading 5 captures as a temporary bundle (wired: "
                             "client-xlf16c83-cli.pcapng, router_in-xlf16c83-rin.pcapng, "
                             "router_out-xlf16c83-rout.pcapng, server-xlf16c83-srv.pcapng; tcp state: server-ss.txt "
                             "on the clock of server-xlf16c83-srv.pcapng); to keep it: xlayer bundle new DIR --wired "
                             f"client-xlf16c83-cli={files[0]} ")
    assert LAB_FLOW in r.stdout and "goodput at client-xlf16c83-cli" in r.stdout
    # the ss file shares the server capture's clock: aligned, not "cannot align"
    assert "cannot align" not in r.stdout
    assert listing(tmp_path / "in") == before
    assert set(os.listdir(tmp_path / "work")) == set()


def test_the_bundle_new_command_it_prints_makes_the_same_bundle(tmp_path: Path) -> None:
    """The command in the line is real `bundle new` syntax: its bundle gives the same flows and incidents,
    a gzipped capture included (read as the capture inside)."""
    files = lab_files(tmp_path)
    gz = files[0].with_name(files[0].name + ".gz")
    gz.write_bytes(gzip.compress(files[0].read_bytes()))
    files[0].unlink()
    files = [gz, *files[1:]]
    bare = xlayer(tmp_path, "analyze", "-q", "--json", *map(str, files))
    assert bare.returncode == 0, bare.stderr[-2000:]
    cmd = shlex.split(bare.stderr.strip().partition("to keep it: ")[2])
    assert cmd[:3] == ["xlayer", "bundle", "new"] and cmd[3] == "DIR"
    made = xlayer(tmp_path, *cmd[1:3], str(tmp_path / "kept"), *cmd[4:])
    assert made.returncode == 0, made.stderr
    kept = xlayer(tmp_path, "analyze", "-q", "--json", str(tmp_path / "kept"))
    assert kept.returncode == 0, kept.stderr[-2000:]
    a, b = json.loads(bare.stdout), json.loads(kept.stdout)
    assert a["flows"] == b["flows"] and a["flows"]
    assert a["incidents"] == b["incidents"] and a["notes"] == b["notes"]


def test_air_and_wired_by_link_type_gzip_included(tmp_path: Path) -> None:
    """The simulated sample's radiotap sniffer is air, its Ethernet captures wired, a gzipped one too."""
    files = copied(tmp_path, SIM, ["sniffer.pcap", "server.pcap", "client.pcap", "server-tcp.jsonl"])
    gz = files[1].with_suffix(".pcap.gz")
    gz.write_bytes(gzip.compress(files[1].read_bytes()))
    files[1].unlink()
    before = listing(tmp_path / "in")
    r = xlayer(tmp_path, "analyze", "-q", str(files[0]), str(gz), str(files[2]), str(files[3]))
    assert r.returncode == 0, r.stderr[-2000:]
    err = r.stderr.splitlines()
    assert len(err) == 1
    assert ("(air: sniffer.pcap; wired: server.pcap.gz, client.pcap; tcp state: server-tcp.jsonl on the clock of "
            "server.pcap.gz)") in err[0]
    assert f"--wired server={gz} " in err[0] and "gunzip" not in err[0]
    assert SIM_FLOW in r.stdout and "goodput at sniffer" in r.stdout
    assert listing(tmp_path / "in") == before


def test_report_and_metrics_on_captures(tmp_path: Path) -> None:
    """`report` and `metrics` take capture files the same way, and write only where asked."""
    files = lab_files(tmp_path)
    before = listing(tmp_path / "in")
    page = tmp_path / "out" / "page.html"
    page.parent.mkdir()
    r = xlayer(tmp_path, "report", "-q", "-o", str(page), *map(str, files))
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith("xlayer: no bundle given: reading 5 captures")
    html = page.read_text()
    assert "xlayer report: client-xlf16c83-cli.pcapng, router_in-xlf16c83-rin.pcapng" in html
    m = xlayer(tmp_path, "metrics", "-q", "-o", str(tmp_path / "out" / "m"), *map(str, files))
    assert m.returncode == 0, m.stderr[-2000:]
    doc = json.loads((tmp_path / "out" / "m" / "metrics.json").read_text())
    assert doc["tables"]["flows"]["rows"] > 0
    assert listing(tmp_path / "in") == before
    assert os.listdir(tmp_path / "work") == []


def test_wpa_air_capture_says_its_data_frames_were_protected(tmp_path: Path) -> None:
    """Wireshark's wpa-Induction.pcap: 280 of its 285 data frames are protected, and the note says so."""
    src = corpus_or_skip() / "radiotap" / "wireshark__wpa-Induction.pcap"
    (f,) = copied(tmp_path, src.parent, [src.name])
    r = xlayer(tmp_path, "analyze", "-q", str(f))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr.startswith("xlayer: no bundle given: reading 1 capture as a temporary bundle "
                               "(air: wireshark__wpa-Induction.pcap)")
    assert ("no capture carried IP packets (285 802.11 data frames on the air, none readable as IP: 280 were "
            "protected (WPA/WEP) and no keys were given") in r.stdout
    assert "flows (0):" in r.stdout


def test_corpus_wired_and_air_captures(tmp_path: Path) -> None:
    """A wired pcap with TCP and a radiotap pcap from the corpus: each read as its link type says."""
    corpus = corpus_or_skip()
    wired, air = corpus / "wired" / "zeek__tcp_timestamp.pcap", corpus / "radiotap" / "arkime__80211http.pcap"
    files = copied(tmp_path, wired.parent, [wired.name]) + copied(tmp_path, air.parent, [air.name])
    before = listing(tmp_path / "in")
    r = xlayer(tmp_path, "analyze", "-q", *map(str, files))
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"(air: {air.name}; wired: {wired.name})" in r.stderr and len(r.stderr.splitlines()) == 1
    assert "tcp 192.168.2.20:12345>192.168.1.10:60706" in r.stdout      # its TCP flow, named
    assert listing(tmp_path / "in") == before


@pytest.mark.parametrize("case", ["missing", "text", "directory_and_file", "twice", "linktype", "fifo", "empty"])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    d = tmp_path / "in"
    d.mkdir()
    good = copied(tmp_path, LAB, ["client-xlf16c83-cli.pcapng"])[0]
    args, said = {
        "missing": ([str(d / "nope.pcap")], f"{d / 'nope.pcap'}: no such file or directory"),
        "text": ([str(_write(d / "notes.txt", b"hello, not a capture\n"))], "cannot tell what it is"),
        "directory_and_file": ([str(LAB), str(good)], "give one bundle, or capture files without a bundle"),
        "twice": ([str(good), str(good)], "given twice"),
        # a pcap of link type 147 (user-defined): nothing xlayer decodes
        "linktype": ([str(_write(d / "usr.pcap", struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 147)))],
                     "link type 147 (LINKTYPE 147): not one xlayer reads"),
        "fifo": ([str(_fifo(d / "pipe.pcap"))], "is a FIFO, not a regular file"),
        "empty": ([str(_write(d / "empty.pcap", b""))], "cannot tell what it is"),
    }[case]
    before = listing(d)
    r = xlayer(tmp_path, "analyze", "-q", *args, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and said in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert listing(d) == before


def test_a_bundle_directory_reads_as_before(tmp_path: Path) -> None:
    """A directory argument is a bundle, as it was: no announcement line."""
    r = xlayer(tmp_path, "analyze", "-q", str(SIM))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr == "" and SIM_FLOW in r.stdout


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def _fifo(p: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    os.mkfifo(p)
    return p


# ---------------------------------------------------------------------------------------------
# the in-memory bundle itself

def _pcapng(linktypes: list[int]) -> bytes:
    """Return a pcapng section header and one interface block per link type (no packet)."""
    shb = struct.pack("<IIIHHqI", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1, 28)
    idbs = b"".join(struct.pack("<IIHHII", 1, 20, lt, 0, 65535, 20) for lt in linktypes)
    return shb + idbs


@pytest.mark.parametrize(("linktypes", "kind"), [([127], "air"), ([105], "air"), ([192], "air"), ([1], "wired"),
                                                  ([113], "wired"), ([101], "wired"), ([1, 276], "wired")])
def test_kind_from_pcapng_link_types(tmp_path: Path, linktypes: list[int], kind: str) -> None:
    p = _write(tmp_path / "c.pcapng", _pcapng(linktypes))
    assert capture_kind(str(p)) == (kind, "pcapng")
    gz = _write(tmp_path / "c.pcapng.gz", gzip.compress(p.read_bytes()))
    assert capture_kind(str(gz)) == (kind, "pcapng")


def test_air_and_wired_interfaces_in_one_file_are_refused(tmp_path: Path) -> None:
    p = _write(tmp_path / "both.pcapng", _pcapng([127, 1]))
    with pytest.raises(BundleError, match="both 802.11 and wired link types"):
        capture_kind(str(p))


def test_vantage_names_are_valid_and_unique(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    src = LAB / "client-xlf16c83-cli.pcapng"
    f1 = Path(shutil.copy2(src, a / "my capture (1).pcapng"))
    f2 = Path(shutil.copy2(src, b / "my capture (1).pcapng"))
    assert vantage_name(str(f1)) == "my_capture_1_"
    assert vantage_name("x.pcap.gz") == "x" and vantage_name("...pcap") == "capture"
    ad = adhoc_bundle([str(f1), str(f2)])
    assert [c.vantage for c in ad.bundle.captures] == ["my_capture_1_", "my_capture_1_-2"]
    # the bundle's directory holds both files; each is named below it, and read from there only
    assert ad.bundle.path == tmp_path.resolve()
    assert [c.file for c in ad.bundle.captures] == ["a/my capture (1).pcapng", "b/my capture (1).pcapng"]
    assert ad.bundle.file_path(ad.bundle.captures[1]) == f2.resolve()


def test_a_directory_of_captures_without_a_manifest_says_how_to_read_them(tmp_path: Path) -> None:
    files = lab_files(tmp_path)
    before = listing(files[0].parent)
    r = xlayer(tmp_path, "analyze", "-q", str(files[0].parent))
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert r.stderr.strip() == (f"xlayer: {files[0].parent}: no bundle.json here (not an xlayer bundle); to read "
                                f"captures without a bundle, name the files (xlayer analyze {files[0].parent}/*.pcap)")
    assert listing(files[0].parent) == before
