"""The key options (--wpa-pwd, --wpa-psk, --tk, --keys) and a bundle's keys file, end to end through the CLI.

The capture is wpa-Induction (passphrase "Induction", SSID "Coherer"), copied into tmp_path under a name
that does not contain the passphrase, so that finding the passphrase's bytes in any output means a leak.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.helpers.common import REPO, corpus_or_skip

PASSPHRASE = "Induction"
SPEC = f"{PASSPHRASE}:Coherer"
SECRET = PASSPHRASE.encode()


def xlayer(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "XLAYER_CACHE_DIR": str(cwd / "cache"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, timeout=timeout,
                          cwd=cwd, env=env)


@pytest.fixture()
def air(tmp_path: Path) -> Path:
    src = corpus_or_skip() / "radiotap" / "wireshark__wpa-Induction.pcap"
    if not src.exists():
        pytest.skip("wpa-Induction.pcap not in the corpus")
    dst = tmp_path / "air.pcap"
    shutil.copyfile(src, dst)
    return dst


def _no_secret(*blobs: bytes) -> None:
    for b in blobs:
        assert SECRET not in b and SECRET.lower() not in b.lower()


def _files_bytes(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in root.rglob("*") if p.is_file() and p.suffix != ".pcap" and p.name != "keys.txt"]


def test_ingest_decrypts_and_leaks_no_secret(air: Path, tmp_path: Path):
    r = xlayer("ingest", str(air), "--wpa-pwd", SPEC, "-o", "out.parquet", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert b"decryption: decrypted 276 of 280 protected frames" in r.stdout
    df = pl.read_parquet(tmp_path / "out.parquet")
    dec = df.filter(pl.col("wlan_decrypted").fill_null(False))
    assert dec.height == 276 and dec["ip_src"].null_count() < 276 and dec["wlan_key"].is_in(["ptk", "gtk"]).all()
    _no_secret(r.stdout, r.stderr, (tmp_path / "out.parquet").read_bytes())
    assert not (tmp_path / "cache").exists()


def test_info_json_carries_the_counts(air: Path, tmp_path: Path):
    r = xlayer("info", str(air), "--json", "--wpa-pwd", SPEC, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    d = json.loads(r.stdout)["decryption"]
    assert d["decrypted"] == 276 and d["hs_ptks_derived"] >= 1 and d["mic_failures"] == 0
    _no_secret(r.stdout, r.stderr)


def test_analyze_metrics_report_decrypt_without_leaking(air: Path, tmp_path: Path):
    r = xlayer("analyze", str(air), "--wpa-pwd", SPEC, "--json", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    notes = json.loads(r.stdout)["notes"]
    assert any("decrypted 276 of 280 protected frames" in n for n in notes)
    assert not any("no capture carried IP packets" in n for n in notes)
    m = xlayer("metrics", str(air), "--wpa-pwd", SPEC, "-o", "m", "-q", cwd=tmp_path)
    assert m.returncode == 0, m.stderr.decode()[-2000:]
    assert (tmp_path / "m" / "metrics.json").is_file()
    h = xlayer("report", str(air), "--wpa-pwd", SPEC, "-o", "r.html", "-q", cwd=tmp_path)
    assert h.returncode == 0, h.stderr.decode()[-2000:]
    assert b"192.168.0.50" in (tmp_path / "r.html").read_bytes()     # decrypted flows are shown
    _no_secret(r.stdout, r.stderr, m.stdout, m.stderr, h.stdout, h.stderr, *_files_bytes(tmp_path))
    assert not (tmp_path / "cache").exists()        # with keys, nothing goes into the decode cache


def test_wrong_passphrase_counts_failed_handshakes(air: Path, tmp_path: Path):
    r = xlayer("ingest", str(air), "--wpa-pwd", "NotTheRightOne:Coherer", "-o", "out.parquet", "-q", cwd=tmp_path)
    assert r.returncode == 0 and b"Traceback" not in r.stderr
    assert b"decrypted 0 of 280 protected frames" in r.stdout and b"1 handshake failed" in r.stdout
    assert b"NotTheRightOne" not in r.stdout + r.stderr


@pytest.mark.parametrize("opt,value,secret", [
    ("--wpa-pwd", "Sh0rt:Coherer", "Sh0rt"),                        # passphrase too short
    ("--wpa-pwd", "LongEnoughButNoSsid", "LongEnoughButNoSsid"),    # no ':SSID'
    ("--wpa-psk", "00112233zz445566", "zz4455"),                   # not hex
    ("--tk", "0011223344556677", "0011223344556677"),              # 8 bytes, not 16 or 32
])
def test_bad_key_spec_one_line_exit_2_no_secret(air: Path, tmp_path: Path, opt, value, secret):
    r = xlayer("ingest", str(air), opt, value, "-o", "out.parquet", "-q", cwd=tmp_path)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert len(err.strip().splitlines()) == 1 and err.startswith("xlayer: bad key: ") and secret not in err
    assert not (tmp_path / "out.parquet").exists()
    a = xlayer("analyze", str(air), opt, value, "-q", cwd=tmp_path)
    assert a.returncode == 2 and secret not in a.stderr.decode() and b"Traceback" not in a.stderr


def test_bundle_keys_file_is_private_named_and_used(air: Path, tmp_path: Path):
    keys = tmp_path / "my.keys"
    keys.write_text(f'# 80211_keys\n"wpa-pwd","{SPEC}"\n')
    b = tmp_path / "b"
    r = xlayer("bundle", "new", str(b), "--air", f"sniffer={air}", "--keys", str(keys), cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    _no_secret(r.stdout, r.stderr, (b / "bundle.json").read_bytes())
    assert json.loads((b / "bundle.json").read_text())["keys_file"] == "keys.txt"
    assert (b / "keys.txt").stat().st_mode & 0o077 == 0
    a = xlayer("analyze", str(b), "--json", "-q", cwd=tmp_path)
    assert a.returncode == 0, a.stderr.decode()[-2000:]
    assert any("decrypted 276 of 280" in n for n in json.loads(a.stdout)["notes"])
    assert b"warning" not in a.stderr
    _no_secret(a.stdout, a.stderr)


def test_world_readable_bundle_keys_file_warns(air: Path, tmp_path: Path):
    b = tmp_path / "b"
    r = xlayer("bundle", "new", str(b), "--air", f"sniffer={air}", "--wpa-pwd", SPEC, cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    os.chmod(b / "keys.txt", 0o644)
    a = xlayer("analyze", str(b), "-q", cwd=tmp_path)
    assert a.returncode == 0, a.stderr.decode()[-2000:]
    warn = [ln for ln in a.stderr.decode().splitlines() if "warning" in ln]
    assert len(warn) == 1 and "keys.txt" in warn[0] and "other users" in warn[0]
    _no_secret(a.stdout, a.stderr)


@pytest.mark.parametrize("keys_file,why", [("../outside.txt", "leaves the bundle"), ("nothere.txt", "missing"),
                                           (7, "must be a string")])
def test_bad_keys_file_reference_exits_2(air: Path, tmp_path: Path, keys_file, why):
    b = tmp_path / "b"
    assert xlayer("bundle", "new", str(b), "--air", f"sniffer={air}", cwd=tmp_path).returncode == 0
    (tmp_path / "outside.txt").write_text(f'"wpa-pwd","{SPEC}"\n')
    m = json.loads((b / "bundle.json").read_text())
    m["keys_file"] = keys_file
    (b / "bundle.json").write_text(json.dumps(m))
    a = xlayer("analyze", str(b), "-q", cwd=tmp_path)
    err = a.stderr.decode()
    assert a.returncode == 2 and len(err.strip().splitlines()) == 1 and why in err, err
    assert PASSPHRASE not in err
