"""Clock alignment (xlayer.timeline.align): known clocks injected into copies of real and simulated bundles.

The lab bundles (`samples/lab-*`) were captured on one kernel clock.  Each test copies one, gives
every capture its own clock (offset within +-3 s, skew within +-50 ppm, Gaussian stamp jitter of
20 us, 10 % of one capture's packets dropped as a sniffer would miss them) by rewriting the
timestamps with our own reader and a small pcap writer, and checks the estimate against the truth
at every instant of the capture: offset error <= 200 us, skew error <= 5 ppm.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from parsers.formats.containers import open_capture
from tests.helpers.common import REPO
from xlayer.bundle.manifest import open_bundle
from xlayer.timeline.align import Alignment, ClockMap, align_bundle, to_reference_ns

ROOT = REPO
SAMPLES = ROOT / "samples"
LABS = sorted(p.name for p in SAMPLES.glob("lab-*") if (p / "bundle.json").is_file())
MAX_OFFSET_ERR_US = 200.0
MAX_SKEW_ERR_PPM = 5.0
NS = 1_000_000_000


# ---------------------------------------------------------------------------------------------
# a tiny pcap writer and the clock rewriting


def read_records(path: Path) -> tuple[np.ndarray, list[bytes], np.ndarray, int]:
    """Return (ts_ns, frame bytes, wirelen, linktype) of every record of a pcap/pcapng file."""
    ts, frames, wl, lts = [], [], [], set()
    with open_capture(path) as cf:
        for ch in cf.chunks():
            data = ch.data
            for off, cl in zip(ch.offset.tolist(), ch.caplen.tolist()):
                frames.append(bytes(data[off:off + cl]))
            ts.append(ch.ts_ns.copy())
            wl.append(ch.wirelen.copy())
            lts.update(int(x) for x in np.unique(ch.linktype))
    assert len(lts) == 1, f"{path}: one link type expected, got {lts}"
    return np.concatenate(ts), frames, np.concatenate(wl), lts.pop()


def write_pcap(path: Path, linktype: int, ts_ns: np.ndarray, frames: list[bytes], wirelen: np.ndarray) -> None:
    """Write a nanosecond-resolution pcap."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, linktype)]
    for t, f, w in zip(ts_ns.tolist(), frames, wirelen.tolist()):
        out.append(struct.pack("<IIII", t // NS, t % NS, len(f), w))
        out.append(f)
    path.write_bytes(b"".join(out))


def local_stamps(true_ns: np.ndarray, clock: ClockMap) -> np.ndarray:
    """Return the stamps a clock whose correction is `clock` gives to events at reference times true_ns."""
    return np.asarray(clock.inverse().to_reference_ns(true_ns), dtype=np.int64)


def make_bundle(src: Path, dst: Path, clocks: dict[str, ClockMap], *, jitter_us: float = 20.0,
                drop: dict[str, float] | None = None, seed: int = 0, extra_manifest: dict | None = None) -> dict:
    """Copy a bundle giving each packet capture the clock named by its vantage; return the truth.

    clocks: vantage -> the true correction of its clock (onto the lab's one kernel clock).
    """
    rng = np.random.default_rng(seed)
    dst.mkdir(parents=True, exist_ok=True)
    man = json.loads((src / "bundle.json").read_text())
    caps = []
    truth = {}
    for c in man["captures"]:
        c = dict(c)
        if c["kind"] in ("air", "wired"):
            ts, frames, wl, lt = read_records(src / c["file"])
            clk = clocks.get(c["vantage"], ClockMap.identity())
            t = local_stamps(ts, clk)
            if jitter_us:
                t = t + np.round(rng.normal(0.0, jitter_us * 1e3, len(t))).astype(np.int64)
            keep = np.ones(len(t), dtype=bool)
            if drop and c["vantage"] in drop:
                keep = rng.random(len(t)) >= drop[c["vantage"]]
            name = Path(c["file"]).stem + ".pcap"
            write_pcap(dst / name, lt, t[keep], [f for f, k in zip(frames, keep) if k], wl[keep])
            c.update(file=name, format="pcap", clock=c["vantage"])
            c.pop("packets", None)
            c.pop("bytes", None)
            truth[name] = clk
        else:
            shutil.copy(src / c["file"], dst / c["file"])
            c["clock"] = c["vantage"]
            truth[c["file"]] = clocks.get(c["vantage"], ClockMap.identity())
        caps.append(c)
    man["captures"] = caps
    man.pop("clocks", None)
    if extra_manifest:
        man.update(extra_manifest)
    (dst / "bundle.json").write_text(json.dumps(man, indent=1))
    return truth


def errors(al: Alignment, truth: dict[str, ClockMap], ref_file: str, bundle_dir: Path) -> dict[str, tuple[float, float]]:
    """Return per capture (max |offset error| over the capture in us, |skew error| in ppm)."""
    b = open_bundle(bundle_dir)
    ref = truth[ref_file]
    out = {}
    for c in al.captures:
        if c.offset_s is None or c.file == ref_file or b.entry(c.file).kind not in ("air", "wired"):
            continue
        # The true correction of this clock onto the reference clock: local -> true -> reference local.
        rel = truth[c.file].compose(ref.inverse())
        ts = np.asarray(read_records(bundle_dir / c.file)[0], dtype=np.int64)
        span = np.array([ts.min(), ts.max(), int(np.median(ts))], dtype=np.int64)
        est = np.asarray(c.to_reference_ns(span), dtype=np.int64)
        tru = np.asarray(rel.to_reference_ns(span), dtype=np.int64)
        off_err = float(np.max(np.abs(est - tru))) / 1e3
        skew_err = abs((c.skew_ppm or 0.0) - rel.skew_ppm)
        out[c.file] = (off_err, skew_err)
    return out


def random_clocks(rng: np.random.Generator, vantages: list[str], anchor_s: float,
                  fixed: str | None = None) -> dict[str, ClockMap]:
    out = {}
    for v in vantages:
        if v == fixed:
            out[v] = ClockMap.identity()
            continue
        out[v] = ClockMap.from_params(float(rng.uniform(-3, 3)), float(rng.uniform(-50, 50)),
                                      float(math.floor(anchor_s + rng.uniform(-100, 100))))
    return out


def _vantages(src: Path) -> tuple[list[str], float]:
    man = json.loads((src / "bundle.json").read_text())
    v = [c["vantage"] for c in man["captures"] if c["kind"] in ("air", "wired")]
    return v, man["capture"]["started_ns"] / 1e9


# ---------------------------------------------------------------------------------------------
# lab bundles with injected clocks

CASES = [(lab, seed) for lab in LABS for seed in (1, 2)]


@pytest.mark.parametrize("lab,seed", CASES, ids=[f"{lab}-seed{s}" for lab, s in CASES])
def test_lab_injected_clocks(tmp_path: Path, lab: str, seed: int) -> None:
    src = SAMPLES / lab
    rng = np.random.default_rng(seed)
    vantages, start = _vantages(src)
    # Seed 1 keeps the server on the true clock; seed 2 moves every clock, the reference's too.
    clocks = random_clocks(rng, vantages, start, fixed="server" if seed == 1 else None)
    drop_v = vantages[int(rng.integers(1, len(vantages)))]
    truth = make_bundle(src, tmp_path / "b", clocks, jitter_us=20.0, drop={drop_v: 0.10}, seed=seed)
    al = align_bundle(tmp_path / "b")
    assert al.reference == "server"
    ref_file = next(c.file for c in al.captures if c.vantage == "server" and c.kind == "wired")
    errs = errors(al, truth, ref_file, tmp_path / "b")
    report = {f: (round(o, 1), round(s, 2)) for f, (o, s) in errs.items()}
    print(f"\n{lab} seed {seed} (drop 10 % at {drop_v}): max offset error us, skew error ppm: {report}; "
          f"{al.seconds:.2f} s")
    print(al.table())
    assert len(errs) == len(vantages) - 1
    for f, (o, s) in errs.items():
        assert o <= MAX_OFFSET_ERR_US, (f, o, al.table())
        assert s <= MAX_SKEW_ERR_PPM, (f, s, al.table())
    for c in al.captures:
        assert c.method != "unmatched", c
        if c.kind != "tcp_state":
            assert c.matched > 0, c


# ---------------------------------------------------------------------------------------------
# a large synthetic bundle: speed


def _tcp_frames(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (frames as an (n, 54) uint8 array, wirelen, is_data) of a TCP download: 2 data : 1 ACK."""
    is_data = (np.arange(n) % 3) != 2
    f = np.zeros((n, 54), dtype=np.uint8)
    f[:, 0:6] = [2, 0, 0, 0, 0, 2]
    f[:, 6:12] = [2, 0, 0, 0, 0, 1]
    f[:, 12:14] = [8, 0]
    f[:, 14] = 0x45
    ip_len = np.where(is_data, 1500, 52).astype(np.uint16)
    f[:, 16] = ip_len >> 8
    f[:, 17] = ip_len & 0xFF
    ids = np.arange(n, dtype=np.uint32)
    f[:, 18] = (ids >> 8) & 0xFF
    f[:, 19] = ids & 0xFF
    f[:, 20] = 0x40
    f[:, 22] = 64
    f[:, 23] = 6
    src = np.where(is_data[:, None], [10, 0, 0, 1], [10, 0, 0, 2]).astype(np.uint8)
    f[:, 26:30] = src
    f[:, 30:34] = np.where(is_data[:, None], [10, 0, 0, 2], [10, 0, 0, 1]).astype(np.uint8)
    sp = np.where(is_data, 5201, 40000).astype(np.uint16)
    dp = np.where(is_data, 40000, 5201).astype(np.uint16)
    f[:, 34], f[:, 35], f[:, 36], f[:, 37] = sp >> 8, sp & 0xFF, dp >> 8, dp & 0xFF
    seq = (np.cumsum(is_data) * 1448).astype(np.uint32)
    for k in range(4):
        f[:, 38 + k] = (seq >> (24 - 8 * k)) & 0xFF
        f[:, 42 + k] = (seq >> (24 - 8 * k)) & 0xFF   # ack number: any distinct value per packet
    f[:, 46] = 0x50
    f[:, 47] = 0x10
    wl = np.where(is_data, 1514, 66).astype(np.uint32)
    return f, wl, is_data


def write_pcap_array(path: Path, ts_ns: np.ndarray, frames: np.ndarray, wirelen: np.ndarray) -> None:
    """Write fixed-size frames as a nanosecond pcap (Ethernet), vectorised."""
    n, flen = frames.shape
    rec = np.zeros((n, 16 + flen), dtype=np.uint8)
    hdr = np.zeros((n, 4), dtype="<u4")
    hdr[:, 0] = ts_ns // NS
    hdr[:, 1] = ts_ns % NS
    hdr[:, 2] = flen
    hdr[:, 3] = wirelen
    rec[:, :16] = hdr.view(np.uint8).reshape(n, 16)
    rec[:, 16:] = frames
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        fh.write(rec.tobytes())


def synthetic_bundle(dst: Path, n: int, clock: ClockMap, seed: int = 0) -> None:
    """Write a two-capture bundle (server, client) of n packets each; the client on `clock`.

    Data packets (server -> client) meet a queue (exponential, mean 5 ms) except one in 50; ACKs do
    not; the base one-way delay is 40 us both ways; both captures have 20 us of stamp jitter.
    """
    rng = np.random.default_rng(seed)
    frames, wl, is_data = _tcp_frames(n, rng)
    send = 1_795_000_000 * NS + np.cumsum(rng.exponential(20_000, n)).astype(np.int64)
    queue = np.where(rng.random(n) < 0.02, 0, rng.exponential(5e6, n)).astype(np.int64)
    delay = 40_000 + np.where(is_data, queue, 0)
    at_server = np.where(is_data, send, send + delay)
    at_client = np.where(is_data, send + delay, send)
    j = lambda: np.round(rng.normal(0, 20_000, n)).astype(np.int64)  # noqa: E731
    dst.mkdir(parents=True, exist_ok=True)
    write_pcap_array(dst / "server.pcap", at_server + j(), frames, wl)
    write_pcap_array(dst / "client.pcap", local_stamps(at_client, clock) + j(), frames, wl)
    man = {"xlayer_bundle": 1, "tags": {}, "captures": [
        {"kind": "wired", "vantage": "server", "file": "server.pcap", "format": "pcap"},
        {"kind": "wired", "vantage": "client", "file": "client.pcap", "format": "pcap"}]}
    (dst / "bundle.json").write_text(json.dumps(man))


def test_synthetic_large(tmp_path: Path) -> None:
    import time

    n = int(os.environ.get("XLAYER_ALIGN_PACKETS", "200000"))
    clock = ClockMap.from_params(-2.718281828, 31.4, 1_795_000_000.0)
    synthetic_bundle(tmp_path / "b", n, clock, seed=7)
    t0 = time.perf_counter()
    al = align_bundle(tmp_path / "b")
    took = time.perf_counter() - t0
    c = al.capture("client.pcap")
    ts = np.array([1_795_000_000 * NS, 1_795_000_000 * NS + n * 20_000], dtype=np.int64)
    err_us = float(np.max(np.abs(np.asarray(c.to_reference_ns(ts)) - np.asarray(clock.to_reference_ns(ts))))) / 1e3
    print(f"\nsynthetic {n} packets per capture: offset error {err_us:.1f} us, skew error "
          f"{abs(c.skew_ppm - clock.skew_ppm):.3f} ppm, {took:.2f} s (align_bundle, reading included)")
    assert c.method == "two-way:ip" and c.matched == n
    assert err_us <= MAX_OFFSET_ERR_US
    assert abs(c.skew_ppm - clock.skew_ppm) <= MAX_SKEW_ERR_PPM


# ---------------------------------------------------------------------------------------------
# the model, overrides, unmatched captures, the command line


def test_clock_map_int64_exact() -> None:
    from fractions import Fraction

    ts = np.array([1_795_243_375_246_495_572, 1_795_243_379_660_677_735, 1_795_250_000_000_000_001], dtype=np.int64)
    off, skew, anchor = 2.718281828, -37.25, 1_795_243_370.5
    got = to_reference_ns(ts, off, skew, anchor)
    for t, g in zip(ts.tolist(), got.tolist()):
        t_s = Fraction(t, NS)
        exact = (t_s - Fraction(off) - Fraction(skew) / 10 ** 6 * (t_s - Fraction(anchor))) * NS
        assert abs(g - exact) <= 1, (t, g, float(exact))
    # numpy, polars Series and Expr agree
    s = to_reference_ns(pl.Series("ts_ns", ts), off, skew, anchor)
    e = pl.DataFrame({"ts_ns": ts}).select(to_reference_ns(pl.col("ts_ns"), off, skew, anchor))
    assert s.to_list() == got.tolist() == e["ts_ns"].to_list()
    assert to_reference_ns(int(ts[0]), off, skew, anchor) == int(got[0])


def test_clock_map_compose_inverse() -> None:
    a = ClockMap.from_params(1.25, 40.0, 1_795_243_000.0)
    b = ClockMap.from_params(-2.5, -15.0, 1_795_240_000.0)
    ts = np.array([1_795_243_001_000_000_000, 1_795_243_900_123_456_789], dtype=np.int64)
    ab = a.compose(b)
    assert np.abs(ab.to_reference_ns(ts) - b.to_reference_ns(a.to_reference_ns(ts))).max() <= 1
    assert np.abs(a.inverse().to_reference_ns(a.to_reference_ns(ts)) - ts).max() <= 1


def _lab_copy(tmp_path: Path, seed: int = 3, extra_manifest: dict | None = None):
    src = SAMPLES / "lab-baseline"
    rng = np.random.default_rng(seed)
    vantages, start = _vantages(src)
    clocks = random_clocks(rng, vantages, start, fixed="server")
    truth = make_bundle(src, tmp_path / "b", clocks, jitter_us=20.0, seed=seed, extra_manifest=extra_manifest)
    return tmp_path / "b", truth


def test_override_wins(tmp_path: Path) -> None:
    ov = {"offset_s": 0.0123, "skew_ppm": -12.5, "anchor_ts": 1_700_000_000.0}
    d, truth = _lab_copy(tmp_path, extra_manifest={"clock_overrides": {"client": ov}})
    al = align_bundle(d)
    c = al.capture("client")
    assert (c.offset_s, c.skew_ppm, c.anchor_ts, c.method) == (0.0123, -12.5, 1_700_000_000.0, "override")
    assert c.matched > 0
    # the other clocks are still fitted, and not through the (made-up) override
    for v in ("router_in", "router_out"):
        assert al.capture(v).method.startswith("two-way:ip") and "via client" not in al.capture(v).method
    # an override of the reference clock moves everything with it
    d2 = tmp_path / "c"
    shutil.copytree(d, d2)
    man = json.loads((d2 / "bundle.json").read_text())
    man["clock_overrides"] = {"server": {"offset_s": 1.0, "skew_ppm": 0.0, "anchor_ts": 0.0}}
    (d2 / "bundle.json").write_text(json.dumps(man))
    al2 = align_bundle(d2)
    assert al2.capture("server-xlf16c83-srv.pcap").offset_s == 1.0
    assert abs(al2.capture("router_in").offset_s - al.capture("router_in").offset_s - 1.0) < 1e-9


def test_unmatched_capture(tmp_path: Path) -> None:
    from tests.helpers.pcapgen import write_udp_pcap

    d, truth = _lab_copy(tmp_path)
    write_udp_pcap(d / "elsewhere.pcap", 500)
    man = json.loads((d / "bundle.json").read_text())
    man["captures"].append({"kind": "wired", "vantage": "elsewhere", "file": "elsewhere.pcap", "format": "pcap"})
    (d / "bundle.json").write_text(json.dumps(man))
    al = align_bundle(d)
    c = al.capture("elsewhere.pcap")
    assert c.matched == 0 and c.method == "unmatched"
    assert c.offset_s is None and c.skew_ppm is None and c.anchor_ts is None and c.residual_us is None
    # the others are unaffected; the timeline leaves the unmatched capture's stamps as they are
    assert al.capture("client").method.startswith("two-way:ip")
    assert c.to_reference_ns(1_700_000_000_000_000_000) == 1_700_000_000_000_000_000
    from xlayer.metrics import open_timeline

    pk = open_timeline(d, cache=False).packets("elsewhere.pcap", columns=["ts_ns", "ts_local_ns"])
    assert pk.height == 500 and pk["ts_ns"].to_list() == pk["ts_local_ns"].to_list()


def test_apply_aligns_packets(tmp_path: Path) -> None:
    d, truth = _lab_copy(tmp_path, seed=5)
    from xlayer.metrics import open_timeline

    cols = ["ts_ns", "ts_local_ns", "capture_file", "vantage", "ip_id", "ip_src", "tcp_seq", "tcp_len", "tcp_ack",
            "tcp_flags"]
    pk = open_timeline(d, cache=False).packets(columns=cols)
    key = ["ip_id", "ip_src", "tcp_seq", "tcp_len", "tcp_ack", "tcp_flags"]
    srv = pk.filter(pl.col("vantage") == "server", pl.col("ip_src").is_not_null())
    rin = pk.filter(pl.col("vantage") == "router_in", pl.col("ip_src").is_not_null())
    j = srv.join(rin, on=key, suffix="_rin")
    delay_us = ((j["ts_ns_rin"] - j["ts_ns"]).abs() / 1e3)
    raw_us = ((j["ts_local_ns_rin"] - j["ts_local_ns"]).abs() / 1e3)
    # server and router_in sit on one veth pair: once aligned, the same packet is within jitter
    assert delay_us.median() < 100 and raw_us.median() > 1000
    assert pk["ts_ns"].dtype == pl.Int64


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xlayer.cli.main import main

    d, truth = _lab_copy(tmp_path)
    assert main(["align", str(d), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"reference", "captures"} and out["reference"] == "server"
    keys = {"file", "vantage", "offset_s", "skew_ppm", "anchor_ts", "matched", "residual_us", "method",
            "status", "confidence", "uncertainty_us", "equal_delay_us", "envelope_points", "skew_se_ppm"}
    assert len(out["captures"]) == 5
    for c in out["captures"]:
        assert set(c) == keys
        # every capture of this lab copy is aligned well: its status says so, with a number behind it
        assert c["status"] == "aligned", c
        assert 0.5 <= c["confidence"] <= 1.0
        assert c["method"] == "reference" or (0 <= c["uncertainty_us"] <= 100 and c["envelope_points"] > 0)
    assert main(["align", str(d)]) == 0
    text = capsys.readouterr().out
    assert "reference: server" in text and "two-way:ip" in text
    assert main(["align", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# air captures: the ns-3 sample (one simulated clock), with clocks injected, and made "protected"


def protect_frames(path: Path) -> None:
    """Rewrite a radiotap capture in place as if its data frames were CCMP-protected (keys unknown).

    Each unprotected data frame with a body gets the Protected bit, an 8-byte CCMP header after the
    802.11 header, an 8-byte MIC after the body and a recomputed FCS; nothing is decodable past the
    802.11 header any more.
    """
    import zlib

    import parsers

    tab = parsers.read_capture(path)
    ts, frames, wl, lt = read_records(path)
    out, wls = [], []
    rows = tab.select("wlan_type", "wlan_subtype", "wlan_protected", "wlan_to_ds", "wlan_from_ds",
                      "wlan_order", "rt_flags").iter_rows()
    for f, w, (typ, sub, prot, tods, fromds, order, flags) in zip(frames, wl.tolist(), rows):
        rt = struct.unpack("<H", f[2:4])[0]
        if typ != 2 or prot or (sub & 0x4) or not flags or not (flags & 0x10) or len(f) != w:
            out.append(f)
            wls.append(w)
            continue
        qos = bool(sub & 0x8)
        hdr = 24 + (6 if tods and fromds else 0) + (2 if qos else 0) + (4 if qos and order else 0)
        mac = bytearray(f[rt:-4])
        mac[1] |= 0x40
        new = bytes(mac[:hdr]) + bytes(8) + bytes(mac[hdr:]) + bytes(8)
        new += struct.pack("<I", zlib.crc32(new) & 0xFFFFFFFF)
        g = f[:rt] + new
        out.append(g)
        wls.append(len(g))
    write_pcap(path, lt, ts, out, np.asarray(wls))


def _ns3_case(tmp_path: Path, seed: int, protect: bool = False) -> tuple[Path, dict]:
    rng = np.random.default_rng(seed)
    # The sample's times start near 0 (simulation time): keep the injected offsets positive.
    clocks = {"sniffer": ClockMap.from_params(float(rng.uniform(0.5, 3)), float(rng.uniform(-50, 50)), 0.0),
              "server": ClockMap.identity()}
    truth = make_bundle(SAMPLES / "ns3-ht", tmp_path / "b", clocks, jitter_us=20.0, seed=seed)
    if protect:
        protect_frames(tmp_path / "b" / "air.pcap")
    return tmp_path / "b", truth


def test_ns3_sample_air_wired(tmp_path: Path) -> None:
    """Air <-> wired through unencrypted LLC: offset within the bound (the capture is 0.36 s long:
    too short to measure a skew, so the fit is offset-only)."""
    d, truth = _ns3_case(tmp_path, 4)
    al = align_bundle(d)
    c = al.capture("air.pcap")
    assert c.method.startswith("two-way:ip"), c
    (off, skew), = errors(al, truth, "wired.pcap", d).values()
    print(f"\nns3-ht sample, air vs wired (ip): max offset error {off:.1f} us, skew error {skew:.1f} ppm")
    assert off <= MAX_OFFSET_ERR_US


def test_ns3_sample_protected_uniform_sizes_unmatched(tmp_path: Path) -> None:
    """Protected frames of bulk traffic (three sizes in all) cannot be told apart by size: the
    capture must come out unmatched, not with a made-up fit."""
    d, truth = _ns3_case(tmp_path, 4, protect=True)
    import parsers

    assert parsers.read_capture(d / "air.pcap")["ip_version"].drop_nulls().len() == 0
    al = align_bundle(d)
    c = al.capture("air.pcap")
    assert c.method == "unmatched" and c.offset_s is None, c


def test_size_order_matching() -> None:
    """Protected frames of mixed sizes (CCMP) against a bridged AP's uplink capture: sizes and order."""
    import xlayer.timeline.align as A
    from xlayer.timeline.match import Observations
    from xlayer.timeline.size import match_sizes

    rng = np.random.default_rng(11)
    n = 1500
    sta = "02:00:00:00:00:0a"
    down = rng.random(n) < 0.6
    ip_len = np.where(rng.random(n) < 0.5, 1500, rng.integers(40, 1500, n))
    send = 1_795_000_000 * NS + np.cumsum(rng.exponential(2e6, n)).astype(np.int64)
    theta = ClockMap.from_params(1.75, 20.0, 1_795_000_000.0)     # the sniffer's clock
    air_dur = ((ip_len + 26 + 12 + 16) * 8 / 65.0 + 36).astype(np.int64) * 1000
    # down: wired (AP uplink port) first, then the air after the AP's FIFO queue (access delay 50 us
    # and more, one frame at a time); up: air end, then wired
    t_air_start = send.copy()
    busy = 0
    for i in np.flatnonzero(down):
        start = max(int(send[i]) + 50_000, busy) + int(rng.exponential(100_000))
        t_air_start[i] = start
        busy = start + int(air_dur[i])
    t_wired = np.where(down, send, send + air_dur + 30_000)
    air_end_local = local_stamps(t_air_start + air_dur, theta) + np.round(rng.normal(0, 20_000, n)).astype(np.int64)
    keep = rng.random(n) >= 0.1                                     # the sniffer misses 10 %
    mpdu = ip_len + 26 + 8 + 16 + 4
    sz = pl.DataFrame({
        "t_s": (air_end_local - air_dur)[keep], "t_e": air_end_local[keep],
        "sta": [sta] * int(keep.sum()), "down": down[keep], "sa": [None] * int(keep.sum()),
        "da": [None] * int(keep.sum()), "mpdu": mpdu[keep], "retry": np.zeros(int(keep.sum()), bool),
        "wlan_pn": np.arange(int(keep.sum()), dtype=np.uint64),
        "wlan_ta": np.where(down, "02:00:00:00:00:01", sta)[keep], "wlan_seq": (np.arange(n) % 4096)[keep],
        "hdr": np.full(int(keep.sum()), 26)}, strict=False)
    wired = pl.DataFrame({"t": t_wired + np.round(rng.normal(0, 20_000, n)).astype(np.int64),
                          "eth_src": np.where(down, "02:00:00:00:00:99", sta),
                          "eth_dst": np.where(down, sta, "02:00:00:00:00:99"), "ip_len": ip_len,
                          "key": np.arange(n, dtype=np.uint64)})
    air = Observations("air", "air", pl.DataFrame(), sz=sz)
    w = Observations("wired", "wired", pl.DataFrame(), wired_sz=wired)
    m = match_sizes(air, w)
    assert m is not None and m.height > 0.5 * keep.sum(), m
    j = m.rename({"tAirS": "tUs", "tAirE": "tUe", "tW": "tKs"}).with_columns(pl.col("tKs").alias("tKe")) \
        .rename({"ttl_a": "ttl_u", "ttl_b": "ttl_k"})
    fit, anchor, _ = A._fit_edge(A._Edge("wired", "air", [("wired", "air", j)], []), 3, size_only=True)
    est = ClockMap(anchor, fit.a, fit.s)
    ts = np.array([send[0], send[-1]], dtype=np.int64)
    err = float(np.abs(est.to_reference_ns(ts) - theta.to_reference_ns(ts)).max()) / 1e3
    print(f"\nsize/order matching: {m.height} of {int(keep.sum())} frames matched, {fit.method}, "
          f"offset error {err:.1f} us, skew error {abs(fit.s * 1e6 - 20.0):.2f} ppm")
    assert err <= MAX_OFFSET_ERR_US
    assert fit.method == "two-way:size"


# ---------------------------------------------------------------------------------------------
# ns-3 simulated bundles (xlayer.testbeds.sim): randomized clocks with a truth.json


def _truth_clocks(truth: dict) -> dict[str, dict]:
    clocks = truth.get("clocks", {})
    if isinstance(clocks, list):
        return {c["file"]: c for c in clocks if "file" in c}
    return {k: v for k, v in clocks.items() if isinstance(v, dict)}


def _stamp_span(path: Path) -> np.ndarray:
    """Return [first, last] record stamp (int64 ns) of a capture."""
    lo, hi = None, None
    with open_capture(path) as cf:
        for ch in cf.chunks():
            if len(ch.ts_ns):
                lo = int(ch.ts_ns.min()) if lo is None else min(lo, int(ch.ts_ns.min()))
                hi = int(ch.ts_ns.max()) if hi is None else max(hi, int(ch.ts_ns.max()))
    assert lo is not None, f"{path}: no records"
    return np.array([lo, hi], dtype=np.int64)


def sim_errors(bundle_dir: Path) -> tuple[Alignment, dict[str, tuple[float, float, str]]]:
    """Align a simulated bundle; return per packet capture not on the reference clock (max |offset
    error| over the capture's span in us, |skew error| in ppm, method) against truth.json."""
    truth = json.loads((bundle_dir / "truth.json").read_text())
    tclocks = _truth_clocks(truth)
    al = align_bundle(bundle_dir)
    b = open_bundle(bundle_dir)
    report = {}
    for c in al.captures:
        if b.entry(c.file).kind not in ("air", "wired") or c.clock == al.reference_clock:
            continue
        t = tclocks[c.file]
        true = ClockMap.from_params(t["offset_s"], t["skew_ppm"], t["anchor_ts"])
        if "offset_ns" in t and "anchor_ns" in t:
            true = ClockMap(int(t["anchor_ns"]), float(t["offset_ns"]), float(t["skew_ppm"]) * 1e-6)
        assert c.offset_s is not None, (c, al.table())
        span = _stamp_span(bundle_dir / c.file)
        err = float(np.abs(np.asarray(c.to_reference_ns(span)) - true.to_reference_ns(span)).max()) / 1e3
        report[c.file] = (round(err, 1), round(abs(c.skew_ppm - true.skew_ppm), 2), c.method)
    return al, report


# Every scenario at seed 1; the two that once broke alignment (RTS/CTS before every data frame: the
# sniffer 370 us off; a station walking out of range, its retransmissions heard by the sniffer after
# the AP already had the first attempt: 19 ms off) at two more seeds; and baseline (A-MPDUs whose
# later subframes reach the wire later and later: the skew was 11 ppm off on a 3 s capture) at seed
# 2.  (baseline seed 3 is left out: its TCP download collapses into RTOs, 72 packets in 3 s.)
SIM_SCENARIOS = ("baseline", "performance_anomaly", "udp_overflow", "fragmentation", "rts_cts", "delay_spike",
                 "walkaway")
SIM_CASES = ([(s, 1) for s in SIM_SCENARIOS] + [(s, n) for s in ("rts_cts", "walkaway") for n in (2, 3)]
             + [("baseline", 2)])


@pytest.mark.parametrize("scenario,seed", SIM_CASES, ids=[f"{s}-seed{n}" for s, n in SIM_CASES])
def test_sim_bundle(scenario: str, seed: int) -> None:
    """Simulated bundles (ns-3, clocks with offset, skew and 20 us stamp jitter, truth.json): every
    packet capture within 200 us over its whole span and 5 ppm of its true clock."""
    from tests.helpers.common import sim_bundle

    d = sim_bundle(scenario, seed)
    al, report = sim_errors(d)
    print(f"\nsim {scenario} seed {seed}: (max offset error us, skew error ppm, method): {report}; "
          f"{al.seconds:.2f} s\n{al.table()}")
    assert {"sniffer.pcap", "ap_wired.pcap", "client.pcap"} <= set(report), report
    for f, (err, skew_err, _) in report.items():
        assert err <= MAX_OFFSET_ERR_US, (f, err, al.table())
        assert skew_err <= MAX_SKEW_ERR_PPM, (f, skew_err, al.table())


def test_two_sniffers_simultaneous(tmp_path: Path) -> None:
    """Air <-> air: the same frames (and beacons) heard by two sniffers; the second one misses 10 %."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ("air.pcap", "wired.pcap"):
        shutil.copy(SAMPLES / "ns3-ht" / f, src / f)
    shutil.copy(SAMPLES / "ns3-ht" / "air.pcap", src / "air2.pcap")
    man = json.loads((SAMPLES / "ns3-ht" / "bundle.json").read_text())
    man["captures"].append({"kind": "air", "vantage": "sniffer2", "file": "air2.pcap", "format": "pcap"})
    (src / "bundle.json").write_text(json.dumps(man))
    clocks = {"sniffer": ClockMap.from_params(2.0, 30.0, 0.0), "sniffer2": ClockMap.from_params(0.75, -40.0, 0.0)}
    truth = make_bundle(src, tmp_path / "b", clocks, jitter_us=20.0, drop={"sniffer2": 0.10}, seed=9)
    al = align_bundle(tmp_path / "b")
    errs = errors(al, truth, "wired.pcap", tmp_path / "b")
    c2 = al.capture("air2.pcap")
    print(f"\ntwo sniffers: {c2.method}, {c2.matched} matched; errors (us, ppm): {errs}")
    # Against the wired clock both sniffers have an equally good air <-> wired fit of their own (the
    # same frames: the capture is too short for a skew); against the first sniffer, the second one
    # is reached through the frames both heard.
    for f, (o, s) in errs.items():
        assert o <= MAX_OFFSET_ERR_US, (f, o, al.table())
    al = align_bundle(tmp_path / "b", reference="sniffer")
    assert al.clocks["sniffer2"]["method"].startswith("simultaneous:802.11"), al.table()
    assert al.capture("air2.pcap").status == "aligned", al.table()
    (o, s), = [v for f, v in errors(al, truth, "air.pcap", tmp_path / "b").items() if f == "air2.pcap"]
    assert o <= MAX_OFFSET_ERR_US, (o, al.table())


def test_fragmented_msdu_leaves_the_air_with_its_last_fragment() -> None:
    """A fragmented MSDU's IP header is in its first fragment, but it reaches the station only with
    the last: observe() ends it there (the first copy of the fragment with More Fragments clear,
    same transmitter and sequence number), so the delay out of the air keeps its floor; on the
    fragmentation sample the station's clock, fitted through the sniffer, lands within 15 us."""
    from xlayer.timeline import align as align_mod
    from xlayer.timeline import match as mm

    d = SAMPLES / "sim-fragmentation"
    b = open_bundle(d)
    sn = next(e for e in b.captures if e.file == "sniffer.pcap")
    df = align_mod._read(b, sn, "fast")
    obs = mm.observe(df, sn.file, sn.kind, use_tsft=False, sizes=False, frames=False)
    # The same ends, found frame by frame: each first fragment carrying IP, then the next frame from
    # its transmitter with its sequence number, a fragment number > 0 and More Fragments clear.
    ts = df["ts_ns"].to_numpy().astype(np.int64)
    end = ts                       # stamps mark the PPDU's end; a fragment is never aggregated
    rows = df.select("wlan_type", "wlan_ta", "wlan_seq", "wlan_frag", "wlan_more_frag", "wlan_retry",
                     "ip_version").rows()
    want: dict[int, int | None] = {}
    for i, (typ, ta, seq, frag, mf, rt, ipv) in enumerate(rows):
        if typ != 2 or not mf or frag != 0 or ipv is None or rt or i in want:
            continue
        want[i] = None
        for j in range(i + 1, len(rows)):
            t2, ta2, seq2, frag2, mf2, rt2, _ = rows[j]
            if t2 == 2 and ta2 == ta and seq2 == seq and frag2 and not mf2:
                want[i] = None if rt2 else int(end[j])
                break
    firsts = [i for i in want if want[i] is not None]
    assert len(firsts) > 100, "the sample should hold many fragmented MSDUs"
    key = df.select(mm._key_expr().alias("key"))["key"]
    got = dict(zip(obs.ip["key"].to_list(), obs.ip["t_e"].to_list()))
    checked = 0
    for i in firsts[:300]:
        k = key[i]
        if k in got and got[k] is not None:
            assert got[k] == want[i], (i, got[k], want[i])
            checked += 1
    assert checked > 100
    al, report = sim_errors(d)
    assert report["client.pcap"][0] <= 15.0, (report, al.table())


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_the_skew_error_is_within_its_standard_errors(tmp_path: Path, seed: int) -> None:
    # 20,000 packets each way over 0.4 s with 20 us of stamp jitter: the skew is known to a few ppm, and
    # the standard error the fit reports must say how far (within 4 of them), not claim more or much less
    clock = ClockMap.from_params(0.8125, -23.0 + seed, 1_795_000_000.0)
    synthetic_bundle(tmp_path / "b", 20_000, clock, seed=seed)
    c = align_bundle(tmp_path / "b").capture("client.pcap")
    se = c.skew_se_ppm
    assert se is not None and 0.5 < se < 6.0, c
    assert abs(c.skew_ppm - clock.skew_ppm) <= 4.0 * se, (c.skew_ppm, clock.skew_ppm, se)
    ref = align_bundle(tmp_path / "b").capture("server.pcap")
    assert ref.skew_se_ppm == 0.0


def test_a_server_across_a_wan_and_a_queue_that_never_drains() -> None:
    """Random scenario 1360: the server 69 ms away each way, one station walking off with RTS/CTS, the
    AP's downlink queued most of the run.  The sniffer's own edge to the server is a bound (its
    downlink met the queue nearly all along); the AP's wired capture sees the server with credible
    floors both ways.  The sniffer's offset crosses the WAN there (it was 16-25 us off through its own
    edge on such runs), its skew comes from its own edge's floor, and no capture is called poor for the
    WAN's equal-delay assumption, which is said as such."""
    from tests.helpers.common import sim_bundle

    d = sim_bundle("random", 1360)
    al, report = sim_errors(d)
    print(f"\nrandom 1360: {report}\n{al.table()}")
    for f, (err, skew_err, _) in report.items():
        assert err <= 100.0 and skew_err <= 2.0, (f, err, skew_err, al.table())
    sn = al.capture("sniffer.pcap")
    assert sn.method.endswith("via ap"), al.table()
    assert any(n.startswith("skew from the chain server - sniffer,") for n in sn.notes), sn.notes
    for c in al.captures:
        assert c.status == "aligned", al.table()
        if c.vantage in ("sniffer", "ap_wired", "client"):
            assert 60_000 < c.equal_delay_us < c.uncertainty_us < c.equal_delay_us + 100, c
