"""Shared test helpers: where the third-party corpus lives, and which of its files are captures."""
from __future__ import annotations

import csv
import hashlib
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".dump")


def corpus_or_skip() -> Path:
    """Return the corpus folder, or skip the test saying it is absent."""
    if not (CORPUS / "MANIFEST.tsv").exists():
        pytest.skip(f"third-party corpus not found at {CORPUS} (tests read it in place from ../shared)")
    return CORPUS


def tshark_or_skip() -> str:
    """Return the tshark path, or skip the test saying it is missing."""
    path = shutil.which("tshark")
    if path is None:
        pytest.skip("tshark is not installed (apt-get install tshark)")
    return path


def manifest() -> list[dict]:
    """Return MANIFEST.tsv rows (empty if the corpus is absent)."""
    p = CORPUS / "MANIFEST.tsv"
    if not p.exists():
        return []
    with p.open(newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def capture_files(include_malformed: bool = True) -> list[str]:
    """Return corpus-relative paths of every capture file listed in the manifest."""
    out = []
    for row in manifest():
        f = row["file"]
        if "/vectors/" in f or f.startswith("host/") or not f.endswith(CAPTURE_SUFFIXES):
            continue
        if not include_malformed and "/malformed/" in f:
            continue
        out.append(f)
    return out


def tshark_refuses(rel: str) -> bool:
    """Return True if the manifest says tshark cannot open the file."""
    for row in manifest():
        if row["file"] == rel:
            return "FAILS to open" in row.get("notes", "")
    return False


@contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging) when the body runs longer than `seconds`."""
    def boom(signum, frame):  # noqa: ARG001
        raise TimeoutError(f"no result within {seconds} s: a hang")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


SIM_CACHE = Path(os.environ.get("XLAYER_TEST_SIMS", "/tmp/xlayer-test-sims"))


def signal_once(proc: subprocess.Popen, path: Path, sig: int, timeout: float = 120.0) -> tuple[str, str]:
    """Return (stdout, stderr) of `proc` signalled with `sig` once `path` exists (however busy the machine:
    a fixed sleep would sometimes land before the moment the test means), or as soon as it ended."""
    end = time.monotonic() + timeout
    while not path.exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.001)
    assert path.exists(), proc.communicate(timeout=60)
    proc.send_signal(sig)
    return proc.communicate(timeout=timeout + 60)


def sim_tag(scenario: str, seed: int = 1, seconds: float | None = None, encrypt: str | None = None,
            standard: str | None = None) -> str:
    """Return the name of `sim_bundle`'s cached bundle for these arguments (under SIM_CACHE)."""
    return (f"{scenario}-s{seed}" + ("" if seconds is None else f"-{seconds:g}s")
            + ("" if standard is None else f"-{standard}")
            + ("" if encrypt is None else "-wpa2-" + hashlib.sha256(encrypt.encode()).hexdigest()[:8]))


def sim_bundle(scenario: str, seed: int = 1, seconds: float | None = None, encrypt: str | None = None,
               standard: str | None = None) -> Path:
    """Return the directory of an ns-3 simulated bundle (xlayer sim), made once per machine and cached.

    Workers of one pytest-xdist run share the cache under a file lock, so each (scenario, seed,
    seconds) is simulated once; skipped, saying why, where ns-3 cannot be imported.  `encrypt`: a
    WPA2 passphrase (`xlayer sim --encrypt`), cached apart from the open bundle; `standard`: run on
    that standard (`xlayer sim --standard`).
    """
    import fcntl

    from xlayer.testbeds.sim import SimError, get_scenario, run_scenario

    tag = sim_tag(scenario, seed, seconds, encrypt, standard)
    out = SIM_CACHE / tag
    SIM_CACHE.mkdir(parents=True, exist_ok=True)
    with open(SIM_CACHE / f"{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "truth.json").is_file():
            if out.exists():
                shutil.rmtree(out)
            try:
                sc = None if standard is None else get_scenario(scenario, seconds, seed=seed, standard=standard)
                run_scenario(scenario, out, seed=seed, seconds=seconds, encrypt=encrypt, scenario=sc)
            except SimError as exc:
                if exc.ns3_missing:
                    pytest.skip(f"ns-3 cannot be imported: {exc}")
                raise
    return out
