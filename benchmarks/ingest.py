#!/usr/bin/env python3
"""Ingest benchmark: one capture, several readers, in one run; prints frames/s, ratios and peak RSS.

    python benchmarks/ingest.py FILE [--repeat 3] [--scapy-frames 20000] [--skip dpkt,scapy]
    python benchmarks/ingest.py --encrypted [--work DIR] [--frames 500000] [--repeat 1]

Each method runs in its own child process (so its peak RSS is its own, with its children's) and
produces a polars table. tshark, dpkt and scapy are asked for the ~38 columns of COLUMNS (timestamps,
radiotap rate/MCS/signal/channel/FCS, 802.11 type/retry/addresses/seq/duration, IP and TCP fields;
tshark with wlan.check_checksum on, so the FCS is verified). The headline row, `xlayer`, reads the
same columns (`columns=COLUMNS`: FCS verified, since fcs_bad is among them); `xlayer-all` decodes
every one of the ~90 schema columns; `xlayer-stream` streams all columns to Parquet in bounded
memory (zstd, as `xlayer ingest`; `xlayer-stream-lz4` the same with lz4). The ratio column is the method's frames/s over tshark's; `x tshark CPU` is the same with
CPU seconds per frame (the method's process, its threads and its children), which a shared
machine's load disturbs less.

--encrypted: the same columns from a WPA2-PSK capture, decrypted with its passphrase: `xlayer-keys`
(read_capture with keys=, every CCMP frame decrypted natively) against `tshark-keys` (tshark with
wlan.enable_decryption and the same wpa-pwd key), ratio over tshark-keys. The capture is made once and
cached in --work: `xlayer sim baseline` (3 s, seed 1, open), its sniffer records repeated with shifted
times up to --frames (a single ns-3 run of 500 k frames takes many minutes), then the whole file
encrypted by `xlayer.testbeds.sim.encrypt` as `xlayer sim --encrypt` does (a handshake after each
repeated association, PNs counting on across copies).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

COLUMNS = ["frame", "ts_ns", "caplen", "wirelen", "tsft", "phy_rate_mbps", "mcs", "bw_mhz", "sgi",
           "freq_mhz", "signal_dbm", "noise_dbm", "fcs_bad", "ampdu_ref", "wlan_type", "wlan_subtype",
           "wlan_retry", "wlan_protected", "wlan_duration", "wlan_ra", "wlan_ta", "wlan_seq",
           "wlan_frag", "wlan_tid", "ip_src", "ip_dst", "ip_id", "ip_len", "ip_proto", "sport", "dport",
           "tcp_seq", "tcp_ack", "tcp_flags", "tcp_len", "tcp_win", "eth_src", "eth_dst"]
# The --encrypted capture's key: a benchmark constant, not a secret.
BENCH_PASSPHRASE, BENCH_SSID = "xlayer-bench-passphrase", "xlayer-sim"
BENCH_KEY = f"{BENCH_PASSPHRASE}:{BENCH_SSID}"


def _peak_rss_mb() -> float:
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (self_kb + child_kb) / 1024.0


def run_xlayer(path: str, limit: int | None) -> int:
    """Decode the whole file into one polars table of the COLUMNS tshark extracts; return rows."""
    from parsers import read_capture

    return read_capture(path, columns=COLUMNS).height


def run_xlayer_all(path: str, limit: int | None) -> int:
    """Decode the whole file into one polars table of every schema column; return rows."""
    from parsers import read_capture

    return read_capture(path).height


def run_xlayer_1t(path: str, limit: int | None) -> int:
    """The COLUMNS read on one thread (no walk thread or helper process); return rows."""
    from parsers import read_capture

    return read_capture(path, threads=1, columns=COLUMNS).height


def run_xlayer_stream(path: str, limit: int | None) -> int:
    """Stream the file to Parquet with the fast path (bounded memory); return rows."""
    import tempfile

    from xlayer.ingest import ingest_to_parquet

    with tempfile.TemporaryDirectory() as d:
        return ingest_to_parquet(path, os.path.join(d, "out.parquet"), progress=False)


def run_xlayer_stream_lz4(path: str, limit: int | None) -> int:
    """run_xlayer_stream with lz4 instead of the default zstd (the codec choice, measured); return rows."""
    import tempfile

    from xlayer.ingest import ingest_to_parquet

    with tempfile.TemporaryDirectory() as d:
        return ingest_to_parquet(path, os.path.join(d, "out.parquet"), progress=False, compression="lz4")


def run_xlayer_keys(path: str, limit: int | None) -> int:
    """The COLUMNS of a WPA2 capture, decrypted natively with the benchmark passphrase; return rows."""
    from parsers import read_capture
    from parsers.crypto import parse_key

    return read_capture(path, columns=COLUMNS, keys=[parse_key(f"wpa-pwd:{BENCH_KEY}")]).height


def run_tshark_keys(path: str, limit: int | None) -> int:
    """run_tshark with 802.11 decryption on and the benchmark passphrase; return rows."""
    return run_tshark(path, limit, ["wlan.enable_decryption:TRUE", f'uat:80211_keys:"wpa-pwd","{BENCH_KEY}"'])


def run_tshark(path: str, limit: int | None, extra_prefs: list[str] | None = None) -> int:
    """tshark -T fields (the same columns, FCS checked) to a TSV file, read with pl.read_csv; return rows."""
    import tempfile

    import polars as pl

    from parsers.tshark import FIELDS, PREFS

    assert "wlan.check_checksum:TRUE" in PREFS     # fcs_bad must mean a verified FCS, as ours does
    fields = list(dict.fromkeys(f for c in COLUMNS for f in FIELDS[c].fields))
    cmd = ["tshark", "-n", "-r", path, "-T", "fields", "-E", "header=y", "-E", "separator=/t",
           "-E", "occurrence=f", "-E", "quote=n"]
    for p in [*PREFS, *(extra_prefs or [])]:
        cmd += ["-o", p]
    for f in fields:
        cmd += ["-e", f]
    with tempfile.NamedTemporaryFile(suffix=".tsv") as tmp:
        with open(tmp.name, "wb") as fh:
            subprocess.run(cmd, stdout=fh, stderr=subprocess.DEVNULL, check=True)
        return pl.read_csv(tmp.name, separator="\t", quote_char=None, infer_schema_length=10000).height


def _dpkt_rows(path: str, limit: int | None):
    import dpkt

    with open(path, "rb") as fh:
        rd = dpkt.pcap.UniversalReader(fh)
        lt = rd.datalink()
        for i, (ts, buf) in enumerate(rd):
            if limit is not None and i >= limit:
                break
            row = {"frame": i + 1, "ts_ns": int(ts * 1e9), "caplen": len(buf)}
            try:
                if lt == 127:
                    rt = dpkt.radiotap.Radiotap(buf)
                    row["rate"] = getattr(rt, "rate", None) and rt.rate.val
                    row["freq"] = getattr(rt, "channel", None) and rt.channel.freq
                    row["signal"] = getattr(rt, "ant_sig", None) and rt.ant_sig.db
                    w = rt.data
                    row.update(wlan_type=w.type, wlan_subtype=w.subtype, wlan_retry=w.retry,
                               wlan_duration=w.duration)
                    if w.type == 2 and hasattr(w, "data_frame"):
                        row["wlan_ra"] = w.data_frame.dst
                        row["wlan_ta"] = w.data_frame.src
                    pl = getattr(w, "data", None)
                    ip = getattr(pl, "data", None) if pl is not None else None
                else:
                    eth = dpkt.ethernet.Ethernet(buf)
                    row.update(eth_src=eth.src, eth_dst=eth.dst)
                    ip = eth.data
                if isinstance(ip, dpkt.ip.IP):
                    row.update(ip_src=ip.src, ip_dst=ip.dst, ip_id=ip.id, ip_len=ip.len, ip_proto=ip.p)
                    tcp = ip.data
                    if isinstance(tcp, dpkt.tcp.TCP):
                        row.update(sport=tcp.sport, dport=tcp.dport, tcp_seq=tcp.seq, tcp_ack=tcp.ack,
                                   tcp_flags=tcp.flags, tcp_len=len(tcp.data), tcp_win=tcp.win)
            except (dpkt.UnpackError, AttributeError, ValueError, TypeError, KeyError):
                row["malformed"] = True
            yield row


def run_dpkt(path: str, limit: int | None) -> int:
    """dpkt, one object per packet, rows collected into polars; return rows."""
    import polars as pl

    return pl.DataFrame(list(_dpkt_rows(path, limit)), infer_schema_length=None).height


def run_scapy(path: str, limit: int | None) -> int:
    """scapy on the first `limit` frames, fields collected into polars; return rows."""
    import polars as pl
    from scapy.all import IP, TCP, Dot11, PcapReader, RadioTap  # noqa: F401 - registers layers

    rows = []
    with PcapReader(path) as rd:
        for i, p in enumerate(rd):
            if limit is not None and i >= limit:
                break
            row = {"frame": i + 1, "ts": float(p.time)}
            if p.haslayer(Dot11):
                d = p[Dot11]
                row.update(wlan_type=d.type, wlan_subtype=d.subtype, wlan_ra=d.addr1, wlan_ta=d.addr2)
            if p.haslayer(IP):
                ip = p[IP]
                row.update(ip_src=ip.src, ip_dst=ip.dst, ip_id=ip.id)
            if p.haslayer(TCP):
                t = p[TCP]
                row.update(sport=t.sport, dport=t.dport, tcp_seq=t.seq)
            rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None).height


METHODS = {"xlayer": run_xlayer, "xlayer-all": run_xlayer_all, "xlayer-1thread": run_xlayer_1t,
           "xlayer-stream": run_xlayer_stream, "xlayer-stream-lz4": run_xlayer_stream_lz4, "tshark": run_tshark, "dpkt": run_dpkt, "scapy": run_scapy,
           "xlayer-keys": run_xlayer_keys, "tshark-keys": run_tshark_keys}
ENCRYPTED_METHODS = ("xlayer-keys", "tshark-keys")


_IMPORTS = {"xlayer": ["parsers.decode.ingest"], "xlayer-all": ["parsers.decode.ingest"], "xlayer-1thread": ["parsers.decode.ingest"],
            "xlayer-stream": ["xlayer.ingest"], "xlayer-stream-lz4": ["xlayer.ingest"], "tshark": ["polars", "parsers.tshark"],
            "dpkt": ["dpkt", "polars"], "scapy": ["scapy.all", "polars"],
            "xlayer-keys": ["parsers.decode.ingest"], "tshark-keys": ["polars", "parsers.tshark"]}


def make_encrypted(work: str, frames: int) -> str:
    """Return the cached WPA2 capture of >= `frames` records in `work`, making it if absent."""
    import shutil
    import struct

    from xlayer.testbeds.sim import run_scenario
    from xlayer.testbeds.sim.encrypt import encrypt_air_capture

    out = os.path.join(work, f"baseline-wpa2-{frames}.pcap")
    if os.path.exists(out):
        return out
    os.makedirs(work, exist_ok=True)
    src = os.path.join(work, "baseline-s1-3s")
    if not os.path.exists(os.path.join(src, "truth.json")):
        shutil.rmtree(src, ignore_errors=True)
        print("simulating baseline (3 s, seed 1) for the encrypted capture ...", flush=True)
        run_scenario("baseline", src, seed=1, seconds=3)
    with open(os.path.join(src, "sniffer.pcap"), "rb") as fh:
        raw = fh.read()
    head, body = raw[:24], raw[24:]
    recs, off = [], 0
    while off + 16 <= len(body):        # (sec, nsec, incl, orig) records of a nanosecond pcap
        sec, ns, incl, orig = struct.unpack_from("<IIII", body, off)
        recs.append((sec * 10**9 + ns, body[off + 16:off + 16 + incl], orig))
        off += 16 + incl
    span = recs[-1][0] - recs[0][0] + 10**6
    tmp = out + ".part"
    with open(tmp, "wb") as fh:
        fh.write(head)
        for k in range(-(-frames // len(recs))):
            for t, data, orig in recs:
                t += k * span
                fh.write(struct.pack("<IIII", t // 10**9, t % 10**9, len(data), orig) + data)
    t0 = time.perf_counter()
    res = encrypt_air_capture(tmp, BENCH_PASSPHRASE.encode(), BENCH_SSID.encode(), 1)
    dt = time.perf_counter() - t0
    print(f"encrypted {res.counts.records_out} records ({res.counts.handshakes} handshakes) in {dt:.1f} s "
          f"({res.counts.records_in / dt:,.0f} records/s)", flush=True)
    os.replace(tmp, out)
    return out


def child(method: str, path: str, limit: int | None) -> None:
    """Run one method in this process and print a JSON line with rows, seconds and peak RSS."""
    import importlib

    for mod in _IMPORTS[method]:  # module import time is not decoding time, for any method
        importlib.import_module(mod)
    c0 = _cpu_s()
    t0 = time.perf_counter()
    rows = METHODS[method](path, limit)
    dt = time.perf_counter() - t0
    print(json.dumps({"rows": rows, "seconds": dt, "cpu_s": _cpu_s() - c0, "rss_mb": _peak_rss_mb()}))


def _cpu_s() -> float:
    """Return the CPU seconds of this process and its waited children (tshark): wall time on a shared
    machine measures the neighbours too."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def measure(method: str, path: str, limit: int | None) -> dict:
    """Run one method in a child process; return its JSON result."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", method, path]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    """Run the benchmark and print the table; return the exit code."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help="capture to read (not with --encrypted)")
    ap.add_argument("--encrypted", action="store_true", help="read a WPA2 capture with its key: xlayer-keys "
                    "against tshark-keys (the capture is made once in --work)")
    ap.add_argument("--work", default="/tmp/xlayer-bench", help="cache of the --encrypted capture")
    ap.add_argument("--frames", type=int, default=500_000, help="records of the --encrypted capture")
    ap.add_argument("--repeat", type=int, default=3, help="runs per method (median is reported)")
    ap.add_argument("--scapy-frames", type=int, default=20000, help="scapy reads only this many frames")
    ap.add_argument("--skip", default="", help="comma-separated methods to leave out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.file, a.limit)
        return 0
    if a.encrypted:
        a.file = make_encrypted(a.work, a.frames)
    elif not a.file:
        ap.error("give FILE, or --encrypted")
    skip = set(filter(None, a.skip.split(",")))
    skip |= set(METHODS) - set(ENCRYPTED_METHODS) if a.encrypted else set(ENCRYPTED_METHODS)
    size = os.path.getsize(a.file)
    print(f"file: {a.file} ({size / 2**20:.1f} MiB), {a.repeat} run(s) per method, median shown")
    results = {}
    for m in METHODS:
        if m in skip:
            continue
        limit = a.scapy_frames if m == "scapy" else None
        runs = [measure(m, a.file, limit) for _ in range(a.repeat if m != "scapy" else 1)]
        sec = statistics.median(r["seconds"] for r in runs)
        results[m] = {"rows": runs[0]["rows"], "seconds": sec,
                      "fps": runs[0]["rows"] / sec if sec > 0 else float("inf"),
                      "rss_mb": max(r["rss_mb"] for r in runs),
                      "cpu_s": statistics.median(r["cpu_s"] for r in runs)}
        print(f"  measured {m}: {results[m]['rows']} rows in {sec:.2f} s", flush=True)
    ref = results.get("tshark-keys" if a.encrypted else "tshark", {})
    base = ref.get("fps")
    # CPU seconds per frame too: on a shared machine a short run's wall time measures the neighbours'
    # bursts more than a 50 s one's does
    base_cpu = ref["cpu_s"] / ref["rows"] if ref.get("rows") and ref.get("cpu_s") else None
    print(f"\n{'method':<17} {'frames':>9} {'seconds':>8} {'frames/s':>12} {'x tshark':>9} {'peak RSS':>9}"
          f" {'CPU s':>7} {'x tshark CPU':>13}")
    for m, r in results.items():
        ratio = f"{r['fps'] / base:8.1f}x" if base else "       -"
        cpu_ratio = "            -"
        if base_cpu and r["cpu_s"] > 0:
            cpu_ratio = f"{base_cpu / (r['cpu_s'] / r['rows']):12.1f}x"
        note = " (subset)" if m == "scapy" else ""
        print(f"{m:<17} {r['rows']:>9} {r['seconds']:>8.2f} {r['fps']:>12,.0f} {ratio:>9} "
              f"{r['rss_mb']:>7.0f}MB {r['cpu_s']:>7.2f} {cpu_ratio:>13}{note}")
    if base and a.encrypted and "xlayer-keys" in results:
        x, t = results["xlayer-keys"], results["tshark-keys"]
        print(f"xlayer-keys / tshark-keys, WPA2-PSK decrypted, the same {len(COLUMNS)} columns: "
              f"{x['fps'] / base:.1f}x (wall), {t['cpu_s'] / x['cpu_s']:.1f}x (CPU: "
              f"{x['cpu_s']:.1f} s against {t['cpu_s']:.1f} s)")
    elif base:
        for m, what in (("xlayer", f"the same {len(COLUMNS)} columns as tshark"),
                        ("xlayer-all", "all schema columns")):
            if m in results:
                print(f"xlayer / tshark, {what}: {results[m]['fps'] / base:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
