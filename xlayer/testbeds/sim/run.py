"""Run a scenario: child process for ns-3, then captures checked, truth built, bundle written."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import xlayer.testbeds.sim.clocks as _clocks
from xlayer.testbeds.sim.encrypt import (
    check_passphrase,
    encrypt_air_capture,
    remap_frame_log,
)
from xlayer.testbeds.sim.pcapfile import count_pcap
from xlayer.testbeds.sim.scenarios import FILES, Scenario, check_ssid, get_scenario

# The files of a simulated bundle, by vantage ("tcp": the server's TCP state samples).
PART = ".part"
CHILD_TIMEOUT_S = 600
# ns-3's cost grows with the simulated time and the stations sending: a long run of several busy
# stations on a loaded machine takes well over the fixed guard; the guard is against a hang.
CHILD_TIMEOUT_PER_STATION_S = 20.0


def child_timeout(sc: Scenario) -> float:
    """Return how long (s) the ns-3 child of scenario `sc` may run before it is taken for hung."""
    return CHILD_TIMEOUT_S + CHILD_TIMEOUT_PER_STATION_S * sc.seconds * max(1, len(sc.stations))


class SimError(Exception):
    """A simulation could not be run or its output failed a check."""

    def __init__(self, msg: str, *, ns3_missing: bool = False) -> None:
        super().__init__(msg)
        self.ns3_missing = ns3_missing   # the child could not import ns-3 at all


def make_clocks(seed: int) -> dict[str, _clocks.Clock]:
    """Return the run's clocks by C++ clock name: server (reference), ap, sniffer, client, sniffer TSF."""
    return {
        "server": _clocks.random_clock(seed, "server", reference=True),
        "ap": _clocks.random_clock(seed, "ap"),
        "sniffer": _clocks.random_clock(seed, "sniffer"),
        "client": _clocks.random_clock(seed, "client"),
        "sniffer_tsf": _clocks.random_tsf_clock(seed, "sniffer_tsf"),
    }


def _native_clocks(cl: dict[str, _clocks.Clock], seed: int) -> dict[str, dict]:
    out = {}
    for i, (name, c) in enumerate(cl.items()):
        l0, rate = c.native()
        out[name] = {"l0_ns": l0, "rate": rate, "sigma_ns": c.jitter_us * 1e3,
                     "bound_ns": c.jitter_max_us * 1e3, "seed": _clocks.jitter_seed(seed, i)}
    return out


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    # After the caller's own path entries: whatever the parent imported xlayer from comes first.
    env["PYTHONPATH"] = (env["PYTHONPATH"] + os.pathsep if env.get("PYTHONPATH") else "") + root
    return env


# What ns-3 (and the C++ runtime) say when they stop a simulation on purpose.
_FAILURE_HEADS = ("NS_ASSERT", "NS_FATAL", "NS_ABORT", "msg=", "assert failed", "terminate called", "what():")
_FRAME = re.compile(r" in (ns3::[A-Za-z0-9_:<>~]+)\(")


def child_failure(stderr: str) -> str:
    """Return what a failed ns-3 child said, in short: ns-3's assertion or fatal lines and the first
    ns-3 function of the stack trace that follows them (a crash handler prints thousands of lines of
    threads and frames, whose tail says nothing), else the last lines of its output."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    heads = list(dict.fromkeys(ln for ln in lines if ln.startswith(_FAILURE_HEADS)))
    where = next((m.group(1) for ln in lines if (m := _FRAME.search(ln))
                  and not m.group(1).startswith(("ns3::Packet::", "ns3::Buffer::", "ns3::FatalImpl"))), None)
    if heads:
        return "; ".join(heads[:4]) + (f" (in {where})" if where else "")
    tail = [ln for ln in lines if not ln.startswith("#") and "Thread " not in ln][-8:]
    return " | ".join(tail)[-2000:] or "no output"


def run_child(job: dict, workdir: Path, log: Callable[[str], None], timeout: float = CHILD_TIMEOUT_S) -> dict:
    """Run `job` in a fresh `python -m xlayer.testbeds.sim.world` process; return its result.json."""
    # Imported here, not at the top: the package importing `world` before the child runs it as
    # __main__ makes runpy warn in every child.
    from xlayer.testbeds.sim.world import NO_NS3  # noqa: PLC0415
    # The child runs in `workdir`: a relative path (`xlayer sim -o out`) would then name a file under it.
    workdir = Path(workdir).resolve()
    job_path = workdir / "job.json"
    job_path.write_text(json.dumps(job, indent=1))
    cmd = [sys.executable, "-m", "xlayer.testbeds.sim.world", str(job_path)]
    try:
        proc = subprocess.run(cmd, env=_child_env(), cwd=workdir, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise SimError(f"ns-3 child did not finish within {timeout:.0f} s") from exc
    noise = ("Failed to materialize symbols", "runStaticInitializersOnce")
    err = "\n".join(ln for ln in proc.stderr.splitlines() if not any(n in ln for n in noise))
    if proc.returncode == NO_NS3:
        raise SimError(err.strip().splitlines()[-1] if err.strip() else "cannot import ns-3", ns3_missing=True)
    if proc.returncode != 0 or not (workdir / "result.json").exists():
        raise SimError(f"ns-3 child exited with status {proc.returncode}: {child_failure(err)}")
    if err.strip():
        log(f"ns-3 child said: {err.strip()[-2000:]}")
    return json.loads((workdir / "result.json").read_text())


def run_scenario(name: str, outdir: str | os.PathLike, *, seed: int = 1, seconds: float | None = None,
                 log: Callable[[str], None] | None = None, keep_work: bool = False,
                 scenario: Scenario | None = None, encrypt: str | None = None) -> dict[str, Any]:
    """Simulate scenario `name` into bundle directory `outdir`; return the truth (also truth.json).

    `seed` (>= 1) fixes everything: ns-3's random streams, the clocks, the jitter; the same seed gives
    byte-identical captures.  `seconds` is simulated time (the scenario's default if None).
    `encrypt`: a WPA2 passphrase; the air capture is then written as a sniffer of a WPA2-PSK network
    sees it (`xlayer.testbeds.sim.encrypt`); the passphrase is stored nowhere.
    """
    log = log or (lambda m: None)
    if seed < 1:
        raise SimError("seed must be >= 1 (ns-3 rejects seed 0)")
    sc = scenario or get_scenario(name, seconds, seed=seed)
    try:
        check_ssid(sc.ssid)       # a caller may have set it after the scenario was built
        passphrase = None if encrypt is None else check_passphrase(encrypt)
    except ValueError as exc:
        raise SimError(str(exc)) from None
    out = Path(outdir)
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    written = list(FILES.values()) + ["bundle.json", "truth.json", "truth_packets.parquet", "truth_attempts.parquet"]
    for f in written:
        (out / f).unlink(missing_ok=True)
    work = out / ".sim-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    t0 = time.monotonic()
    try:
        truth = _simulate(sc, seed, work, out, log, passphrase)
        truth["run"]["wall_s"] = round(time.monotonic() - t0, 2)
        (out / "truth.json").write_text(json.dumps(truth, indent=1, allow_nan=False) + "\n")
    except BaseException:
        # A failed or interrupted run leaves nothing half made: no work files, no captures without
        # their manifest, and no output directory it created itself.
        for f in written:
            (out / f).unlink(missing_ok=True)
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
            if made:
                with contextlib.suppress(OSError):
                    out.rmdir()
        raise
    if not keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return truth


def _simulate(sc: Scenario, seed: int, work: Path, out: Path, log: Callable[[str], None],
              passphrase: bytes | None) -> dict[str, Any]:
    """Return the truth of scenario `sc` simulated in `work` into bundle directory `out`."""
    from xlayer.testbeds.sim.truth import (
        build_truth,
        write_bundle,  # noqa: PLC0415 - polars only in the parent
    )

    cl = make_clocks(seed)
    job = {"seed": seed, "workdir": str(work.resolve()), "scenario": sc.physical(),
           "clocks": _native_clocks(cl, seed), "files": {k: v + PART for k, v in FILES.items()}}
    t0 = time.monotonic()
    log(f"simulating {sc.name} ({sc.seconds:g} s, seed {seed})")
    result = run_child(job, work, log, timeout=child_timeout(sc))
    encrypted = None if passphrase is None else _encrypt_air(work, sc, seed, passphrase, log)
    summaries = {}
    for vantage, fname in FILES.items():
        part = work / (fname + PART)
        if not part.exists():
            raise SimError(f"the child wrote no {fname}")
        if fname.endswith(".pcap"):
            try:
                summary = count_pcap(part)
            except ValueError as exc:
                raise SimError(str(exc)) from None
            # named as the bundle names it (truth.json's captures give the file name)
            summaries[vantage] = dataclasses.replace(summary, path=out / fname)
        os.replace(part, out / fname)
    truth = build_truth(sc, seed, cl, result, work, out, summaries, wall_s=time.monotonic() - t0)
    write_bundle(sc, seed, truth, out, summaries, result)
    if encrypted is not None:
        _mark_encrypted(out)
        truth["run"]["encryption"] = encrypted
    return truth


def _encrypt_air(work: Path, sc: Scenario, seed: int, passphrase: bytes, log: Callable[[str], None]) -> dict:
    """Rewrite the child's radiotap captures as WPA2-PSK ones; renumber the sniffer log; return the counts."""
    from parsers.formats.detect import pcap_magic  # noqa: PLC0415

    done: dict[str, Any] = {"kind": "wpa2-psk"}
    for vantage, fname in FILES.items():
        part = work / (fname + PART)
        head = b""
        if fname.endswith(".pcap") and part.exists():
            with open(part, "rb") as fh:
                head = fh.read(24)
        # only air captures (radiotap): a host's own interface sees its traffic decrypted
        if len(head) < 24 or pcap_magic(head[:4]) is None or int.from_bytes(head[20:24], "little") != 127:
            continue
        try:
            res = encrypt_air_capture(part, passphrase, sc.ssid.encode(), seed)
            if vantage == "sniffer":
                remap_frame_log(work / "log" / "sniff.csv", res.frame_map)   # truth's sniffer_frame follows
        except ValueError as exc:
            raise SimError(f"cannot encrypt {fname}: {exc}") from None
        except OSError as exc:      # a full disk: the rewrite left the open capture whole, and no temp file
            raise SimError(f"cannot encrypt {fname}: {exc.strerror or exc}") from None
        c = res.counts
        done[vantage] = c.as_dict()
        log(f"{fname}: WPA2-PSK: {c.handshakes} handshake(s), {c.encrypted_unicast + c.encrypted_group} data "
            f"frames encrypted" + (f", {c.left_clear} left in clear (padded headers or no key)" if c.left_clear
                                  else ""))
    return done


def _mark_encrypted(out: Path) -> None:
    """Say in bundle.json which captures are WPA2-protected and what decrypts them (never the key)."""
    from xlayer.bundle.manifest import load_manifest, write_manifest  # noqa: PLC0415

    b = load_manifest(out)
    for c in b.captures:
        if c.kind == "air":
            c.extra["encrypted"] = "wpa2-psk"
            c.notes += ("; WPA2-PSK (CCMP) as a sniffer of the protected network sees it: decrypt with "
                        "--wpa-pwd PASSPHRASE:SSID")
    write_manifest(out, b)
