"""Issue 12: a bundle's files on disk -- symbolic links, files outside the bundle, FIFOs, devices and an
oversized manifest are refused with one line naming the file, never by reading (or echoing) them.

Every file is made by the tests inside pytest's tmp dirs; anything that could block (a FIFO) runs
under a deadline.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.pcapgen import write_udp_pcap
from xlayer.bundle import describe, guess_format, scan
from xlayer.bundle.manifest import (
    MANIFEST,
    MANIFEST_MAX_BYTES,
    Bundle,
    BundleError,
    CaptureEntry,
    load_manifest,
    open_bundle,
    write_manifest,
)

SECRET = b"root:x:0:0:SECRET-BYTES-NEVER-SHOWN:/root:/bin/bash\n"
DEADLINE_S = 10.0


def manifest(d: Path, files: list[str], follow_links: bool | None = None, **extra) -> None:
    obj = {"xlayer_bundle": 1, "tags": {},
           "captures": [{"kind": "wired", "vantage": f"v{i}", "file": f} for i, f in enumerate(files)],
           **extra}
    if follow_links is not None:
        obj["follow_links"] = follow_links
    (d / MANIFEST).write_text(json.dumps(obj), encoding="utf-8")


@pytest.fixture()
def secret(tmp_path) -> Path:
    p = tmp_path / "outside" / "passwd"
    p.parent.mkdir()
    p.write_bytes(SECRET)
    return p


@pytest.fixture()
def bdir(tmp_path) -> Path:
    d = tmp_path / "bundle"
    d.mkdir()
    return d


def within_deadline(fn):
    """Run fn() in a thread; fail (instead of hanging) if it has not returned in DEADLINE_S."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:       # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(DEADLINE_S)
    assert not t.is_alive(), f"still blocked after {DEADLINE_S} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def assert_refused(b: Bundle, name: str, match: str) -> None:
    with pytest.raises(BundleError, match=match) as info:
        scan(b, name)
    msg = str(info.value)
    assert name in msg and "SECRET" not in msg and "\n" not in msg
    err = describe(b)["captures"][[c.file for c in b.captures].index(name)]["error"]
    assert err and name in err and "SECRET" not in err


# ---------------------------------------------------------------------------------------------
# symbolic links

def test_symlink_inside_needs_follow_links(bdir) -> None:
    write_udp_pcap(bdir / "real.pcap", 3)
    os.symlink("real.pcap", bdir / "link.pcap")
    manifest(bdir, ["link.pcap"])
    assert_refused(open_bundle(bdir), "link.pcap", "symbolic link.*follow_links")
    manifest(bdir, ["link.pcap"], follow_links=True)
    b = open_bundle(bdir)
    assert b.follow_links is True and b.to_dict()["follow_links"] is True
    assert scan(b, "link.pcap").collect().height == 3


def test_symlinked_directory_inside_needs_follow_links(bdir) -> None:
    (bdir / "real").mkdir()
    write_udp_pcap(bdir / "real" / "x.pcap", 2)
    os.symlink("real", bdir / "alias")
    manifest(bdir, ["alias/x.pcap"])
    assert_refused(open_bundle(bdir), "alias/x.pcap", r"symbolic link \(through alias\)")
    manifest(bdir, ["alias/x.pcap"], follow_links=True)
    assert scan(open_bundle(bdir), "alias/x.pcap").collect().height == 2


@pytest.mark.parametrize("follow", [None, True])
def test_symlink_leaving_the_bundle_is_refused_and_never_read(bdir, secret, follow) -> None:
    os.symlink(secret, bdir / "sniffer.pcap")
    (secret.parent / "shadow").write_bytes(SECRET)
    (bdir / "sub").symlink_to(secret.parent)
    manifest(bdir, ["sniffer.pcap", "sub/shadow"], follow_links=follow)
    b = open_bundle(bdir)
    why = "outside the bundle" if follow else "symbolic link"
    assert_refused(b, "sniffer.pcap", why)
    assert_refused(b, "sub/shadow", why)
    # the command line says the same, without the target's bytes
    p = subprocess.run([sys.executable, "-m", "xlayer", "bundle", "show", str(bdir)], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "SECRET" not in p.stdout + p.stderr and "sniffer.pcap" in p.stdout + p.stderr


def test_follow_links_must_be_a_boolean(bdir) -> None:
    manifest(bdir, [], follow_links="yes")      # type: ignore[arg-type]
    with pytest.raises(BundleError, match="follow_links"):
        load_manifest(bdir)
    manifest(bdir, [])
    b = load_manifest(bdir)
    assert b.follow_links is False and "follow_links" not in b.to_dict()
    b.follow_links = True
    write_manifest(bdir, b)
    assert load_manifest(bdir).follow_links is True


# ---------------------------------------------------------------------------------------------
# only regular files

def test_fifo_capture_is_refused_without_blocking(bdir) -> None:
    os.mkfifo(bdir / "air.pcap")
    manifest(bdir, ["air.pcap"])
    b = open_bundle(bdir)
    with pytest.raises(BundleError, match="air.pcap: is a FIFO") as info:
        within_deadline(lambda: scan(b, "air.pcap"))
    assert "\n" not in str(info.value)
    err = within_deadline(lambda: describe(b))["captures"][0]["error"]
    assert "FIFO" in err
    with pytest.raises(BundleError, match="FIFO"):
        within_deadline(lambda: guess_format(bdir / "air.pcap"))


def test_directory_named_as_a_capture_is_refused(bdir) -> None:
    (bdir / "d.pcap").mkdir()
    manifest(bdir, ["d.pcap"])
    assert_refused(open_bundle(bdir), "d.pcap", "a directory")


def test_fifo_manifest_is_refused_without_blocking(bdir) -> None:
    os.mkfifo(bdir / MANIFEST)
    with pytest.raises(BundleError, match="FIFO.*without reading"):
        within_deadline(lambda: load_manifest(bdir))


def test_dev_zero_as_manifest_is_refused_without_reading_it(bdir, monkeypatch) -> None:
    os.symlink("/dev/zero", bdir / MANIFEST)
    reads: list = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda *a: reads.append(a) or real_read(*a))
    with pytest.raises(BundleError, match="outside the bundle"):
        within_deadline(lambda: load_manifest(bdir))
    assert reads == []


def test_manifest_symlink_inside_the_bundle_is_read(bdir) -> None:
    (bdir / "meta").mkdir()
    manifest(bdir, [])
    os.replace(bdir / MANIFEST, bdir / "meta" / "m.json")
    os.symlink("meta/m.json", bdir / MANIFEST)
    assert load_manifest(bdir).captures == []


def test_oversized_manifest_is_refused(bdir) -> None:
    with open(bdir / MANIFEST, "wb") as fh:      # sparse: no disk space used
        fh.truncate(MANIFEST_MAX_BYTES + 1)
    with pytest.raises(BundleError, match="more than a manifest may have"):
        load_manifest(bdir)


def test_manifest_growing_past_the_cap_is_cut_by_a_bounded_read(bdir, monkeypatch) -> None:
    import xlayer.bundle.manifest as m

    manifest(bdir, [], note="x" * 2000)
    monkeypatch.setattr(m, "MANIFEST_MAX_BYTES", 1000)
    with pytest.raises(BundleError, match="more than a manifest may have"):
        load_manifest(bdir)


# ---------------------------------------------------------------------------------------------
# one file listed twice

@pytest.mark.parametrize("names", [["x.pcap", "./x.pcap"], ["./x.pcap", "x.pcap"], ["a/x.pcap", "a//x.pcap"],
                                   ["a/x.pcap", "a/./x.pcap"]])
def test_same_file_under_two_spellings_is_a_duplicate(bdir, names) -> None:
    manifest(bdir, names)
    with pytest.raises(BundleError, match="listed twice"):
        load_manifest(bdir)
    b = Bundle(captures=[CaptureEntry("wired", "a", names[0]), CaptureEntry("wired", "b", names[1])])
    with pytest.raises(BundleError, match="listed twice"):
        write_manifest(bdir, b)


def test_link_and_its_target_are_a_duplicate_when_links_are_followed(bdir) -> None:
    write_udp_pcap(bdir / "x.pcap", 1)
    os.symlink("x.pcap", bdir / "y.pcap")
    manifest(bdir, ["x.pcap", "y.pcap"], follow_links=True)
    with pytest.raises(BundleError, match="'y.pcap' is listed twice"):
        load_manifest(bdir)
