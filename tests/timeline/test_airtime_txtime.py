"""PPDU airtime against the IEEE 802.11-2020 TXTIME formulas, on cases computed by hand.

HT mixed format (19.4.3), VHT (21.4.3) and HE SU (27.4.3): preamble once per PPDU, then N_SYM data
symbols, N_SYM = ceil((16 + 8 L + 6 N_ES) / N_DBPS), L the PSDU length (VHT/HE: APEP_LENGTH, the
A-MPDU before its EOF padding, every subframe padded to 4 bytes; HT: the last subframe unpadded).

Preambles (µs):
  HT-MF:  L-STF 8 + L-LTF 8 + L-SIG 4 + HT-SIG 8 + HT-STF 4 + 4 per HT-LTF  = 32 + 4 N_LTF
  VHT:    L-STF 8 + L-LTF 8 + L-SIG 4 + VHT-SIG-A 8 + VHT-STF 4 + 4 per VHT-LTF + VHT-SIG-B 4 = 36 + 4 N_LTF
  HE SU:  L-STF 8 + L-LTF 8 + L-SIG 4 + RL-SIG 4 + HE-SIG-A 8 + HE-STF 4 + N_LTF (HE-LTF + GI), the
          2x HE-LTF (6.4 µs) with GI 0.8 and 1.6 µs, the 4x (12.8 µs) with GI 3.2 = 36 + N_LTF (6.4|12.8 + GI)
Data symbols: 4 µs (HT/VHT long GI), 3.6 µs (short GI; the standard's TXTIME rounds the data part up to
whole 4 µs, `lsig_rounding`), 12.8 µs + GI (HE).  N_DBPS per spatial stream: VHT 80 MHz (234 data
subcarriers) MCS 0 = 234 x 1 x 1/2 = 117, MCS 9 = 234 x 8 x 5/6 = 1560; HE 80 MHz (980) MCS 0 = 490, MCS 11 =
980 x 10 x 5/6 = 8166.67; HT 20 MHz MCS 7 = 260, 40 MHz MCS 7 = 540, MCS 15 = 1080.  N_ES (BCC encoders)
from the MCS tables: 1 below about 320 Mbit/s (long GI) or 350 (short), VHT 80 MHz MCS 9: 2 (1 SS), 3 (2 SS);
HE: 1.
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from xlayer.timeline.airtime import airtime, ppdu_duration_ns, table_ndbps

MPDU = 1538            # QoS data: 26 header + 8 LLC/SNAP + 1500 IP + 4 FCS
SUB = 4 + 1540         # A-MPDU subframe: delimiter + MPDU padded to 4 bytes = 1544


def _rate(ndbps: float, tsym_us: float) -> float:
    return ndbps / tsym_us


def _dur_us(psdu: int, phy: str, mcs: int, nss: int, bw: int, *, sgi: bool = False, he_gi: float = math.nan,
            g24: bool = False, lsig: bool = False, rate: float | None = None) -> float:
    nd = table_ndbps(np.array([phy]), np.array([mcs], float), np.array([nss]), np.array([bw], float))
    if rate is None:
        tsym = 12.8 + he_gi if phy == "he" else 3.6 if sgi else 4.0
        rate = _rate(nd[0], tsym)
    out = ppdu_duration_ns(np.array([psdu], float), np.array([rate], float), np.array([phy]), np.array([nss]),
                           np.array([False]), np.array([sgi]), np.array([he_gi]), np.array([g24]),
                           lsig_rounding=lsig, ndbps=nd if phy in ("vht", "he") else None)
    return float(out[0]) / 1000.0


# (PSDU bytes, phy, MCS, NSS, MHz, short GI, HE GI µs, signal end µs, TXTIME µs)
CASES = [
    # VHT 80 MHz, one MPDU (an S-MPDU: APEP 1544 bytes = 12352 bits)
    # MCS 0, 1 SS: (16 + 12352 + 6) / 117 = 105.8 -> 106 symbols; 40 + 106 x 4 = 464; short GI 40 + 381.6,
    # TXTIME 40 + 4 x ceil(95.4) = 40 + 384
    (SUB, "vht", 0, 1, 80, False, math.nan, 464.0, 464.0),
    (SUB, "vht", 0, 1, 80, True, math.nan, 421.6, 424.0),
    # MCS 9, 1 SS, N_ES 2: (16 + 12352 + 12) / 1560 = 7.94 -> 8; 40 + 32 = 72; short GI 40 + 28.8, TXTIME 40 + 32
    (SUB, "vht", 9, 1, 80, False, math.nan, 72.0, 72.0),
    (SUB, "vht", 9, 1, 80, True, math.nan, 68.8, 72.0),
    # MCS 9, 2 SS (2 VHT-LTFs: 44 µs), N_DBPS 3120, N_ES 3: (16 + 12352 + 18) / 3120 = 3.97 -> 4; 44 + 16;
    # short GI 44 + 14.4, TXTIME 44 + 16
    (SUB, "vht", 9, 2, 80, False, math.nan, 60.0, 60.0),
    (SUB, "vht", 9, 2, 80, True, math.nan, 58.4, 60.0),
    # MCS 0, 2 SS, N_DBPS 234: 12374 / 234 = 52.9 -> 53; 44 + 212
    (SUB, "vht", 0, 2, 80, False, math.nan, 256.0, 256.0),
    # VHT 80 MHz MCS 9 1 SS A-MPDUs of 3, 32 and 64 such MPDUs (APEP 3, 32, 64 x 1544 bytes)
    # 3:  (16 + 37056 + 12) / 1560 = 23.8 -> 24; long GI 40 + 96; short 40 + 86.4, TXTIME 40 + 4 x ceil(21.6) = 40 + 88
    (3 * SUB, "vht", 9, 1, 80, False, math.nan, 136.0, 136.0),
    (3 * SUB, "vht", 9, 1, 80, True, math.nan, 126.4, 128.0),
    # 32: (16 + 395264 + 12) / 1560 = 253.4 -> 254; long 40 + 1016; short 40 + 914.4, TXTIME 40 + 4 x 229
    (32 * SUB, "vht", 9, 1, 80, False, math.nan, 1056.0, 1056.0),
    (32 * SUB, "vht", 9, 1, 80, True, math.nan, 954.4, 956.0),
    # 64: (16 + 790528 + 12) / 1560 = 506.8 -> 507; long 40 + 2028; short 40 + 1825.2, TXTIME 40 + 4 x 457
    (64 * SUB, "vht", 9, 1, 80, False, math.nan, 2068.0, 2068.0),
    (64 * SUB, "vht", 9, 1, 80, True, math.nan, 1865.2, 1868.0),
    # 3 at MCS 0: (16 + 37056 + 6) / 117 = 316.9 -> 317; 40 + 1268
    (3 * SUB, "vht", 0, 1, 80, False, math.nan, 1308.0, 1308.0),
    # HE SU 80 MHz, one MPDU (APEP 1544)
    # MCS 0, N_DBPS 490: 12374 / 490 = 25.3 -> 26 symbols
    #   GI 0.8: 36 + 7.2 + 26 x 13.6 = 43.2 + 353.6;  GI 1.6: 36 + 8 + 26 x 14.4 = 44 + 374.4;
    #   GI 3.2 (4x HE-LTF): 36 + 16 + 26 x 16 = 52 + 416
    (SUB, "he", 0, 1, 80, False, 0.8, 396.8, 396.8),
    (SUB, "he", 0, 1, 80, False, 1.6, 418.4, 418.4),
    (SUB, "he", 0, 1, 80, False, 3.2, 468.0, 468.0),
    # MCS 11, N_DBPS 8166.67: 12374 / 8166.67 = 1.52 -> 2 symbols: 43.2 + 27.2; 44 + 28.8; 52 + 32
    (SUB, "he", 11, 1, 80, False, 0.8, 70.4, 70.4),
    (SUB, "he", 11, 1, 80, False, 1.6, 72.8, 72.8),
    (SUB, "he", 11, 1, 80, False, 3.2, 84.0, 84.0),
    # MCS 11, 2 SS (2 HE-LTFs), GI 0.8: 12374 / 16333.3 -> 1 symbol; 36 + 2 x 7.2 + 13.6
    (SUB, "he", 11, 2, 80, False, 0.8, 64.0, 64.0),
    # MCS 11, GI 3.2, 64-MPDU A-MPDU: (16 + 790528 + 6) / 8166.67 = 96.8 -> 97; 52 + 97 x 16
    (64 * SUB, "he", 11, 1, 80, False, 3.2, 1604.0, 1604.0),
    # HT mixed format, one MPDU of 1538 bytes (not aggregated: PSDU = MPDU)
    # HT20 MCS 7, N_DBPS 260: (16 + 12304 + 6) / 260 = 47.4 -> 48; long GI 36 + 192; short 36 + 172.8,
    # TXTIME 36 + 4 x ceil(43.2) = 36 + 176
    (MPDU, "ht", 7, 1, 20, False, math.nan, 228.0, 228.0),
    (MPDU, "ht", 7, 1, 20, True, math.nan, 208.8, 212.0),
    # HT40 MCS 7, N_DBPS 540: 12326 / 540 = 22.8 -> 23; 36 + 92
    (MPDU, "ht", 7, 1, 40, False, math.nan, 128.0, 128.0),
    # HT40 MCS 15 short GI (300 Mbit/s, N_ES 1), N_DBPS 1080, 2 HT-LTFs: 12326 / 1080 = 11.4 -> 12;
    # 40 + 43.2, TXTIME 40 + 4 x ceil(10.8) = 40 + 44
    (MPDU, "ht", 15, 2, 40, True, math.nan, 83.2, 84.0),
]

HT_NDBPS = {(7, 20): 260, (7, 40): 540, (15, 40): 1080}


@pytest.mark.parametrize("psdu,phy,mcs,nss,bw,sgi,gi,end_us,txtime_us", CASES)
def test_txtime_table(psdu, phy, mcs, nss, bw, sgi, gi, end_us, txtime_us):
    rate = None
    if phy == "ht":      # HT rates as radiotap gives them: N_DBPS / symbol time
        rate = HT_NDBPS[(mcs, bw)] / (3.6 if sgi else 4.0)
    assert math.isclose(_dur_us(psdu, phy, mcs, nss, bw, sgi=sgi, he_gi=gi, rate=rate), end_us, abs_tol=1e-6)
    assert math.isclose(_dur_us(psdu, phy, mcs, nss, bw, sgi=sgi, he_gi=gi, rate=rate, lsig=True), txtime_us,
                        abs_tol=1e-6)


def test_rounded_rates_give_the_table_ndbps():
    # radiotap readers give HE and VHT rates rounded to 0.1 Mbit/s: HE MCS 0 80 MHz GI 0.8 is 490 / 13.6 =
    # 36.03 -> 36.0, and 36.0 x 13.6 = 489.6 would lose a bit per symbol; N_DBPS from the MCS table keeps
    # 26 symbols (12374 / 490 = 25.3; / 489 = 25.3 too, but 64 MPDUs: 790550 / 490 = 1613.4 -> 1614 symbols,
    # / 489 = 1616.7 -> 1617)
    assert math.isclose(_dur_us(64 * SUB, "he", 0, 1, 80, he_gi=0.8, rate=36.0), 43.2 + 1614 * 13.6, abs_tol=1e-6)


def _frames(mpdus: list[int], phy: str, mcs: int, nss: int, bw: int, rate: float, *, ref: int | None = 7,
            sgi: bool = False, gi: float | None = None) -> pl.DataFrame:
    """Records of one PPDU as a radiotap reader gives them (40-byte radiotap header, FCS kept)."""
    n = len(mpdus)
    return pl.DataFrame({
        "wirelen": [40 + m for m in mpdus], "linktype": [127] * n, "rt_len": [40] * n, "rt_flags": [0x10] * n,
        "phy_rate_mbps": [rate] * n, "phy": [phy] * n, "mcs": [mcs] * n, "nss": [nss] * n, "bw_mhz": [bw] * n,
        "sgi": [sgi] * n, "he_gi_us": [gi] * n, "freq_mhz": [5210] * n,
        "ampdu_ref": [ref] * n, "ampdu_flags": [0x04] * (n - 1) + [0x0C],
        "wlan_type": [2] * n, "wlan_subtype": [8] * n, "wlan_to_ds": [False] * n, "wlan_from_ds": [True] * n,
        "wlan_order": [False] * n, "wlan_amsdu": [False] * n, "wlan_seq": list(range(100, 100 + n)),
        "ip_len": [m - 38 for m in mpdus], "fcs_bad": [False] * n,
    }, schema_overrides={"ampdu_ref": pl.UInt32, "he_gi_us": pl.Float32, "mcs": pl.UInt8, "nss": pl.UInt8,
                         "bw_mhz": pl.UInt16, "rt_len": pl.UInt16, "rt_flags": pl.UInt8, "ampdu_flags": pl.UInt16,
                         "wlan_type": pl.UInt8, "wlan_subtype": pl.UInt8, "wlan_seq": pl.UInt16})


@pytest.mark.parametrize("n,want_us", [(3, 126.4), (32, 954.4), (64, 1865.2)])
def test_ampdu_is_one_ppdu_shared_by_its_mpdus(n, want_us):
    # VHT 80 MHz MCS 9 1 SS short GI (433.3 Mbit/s as radiotap readers round it): the table's cases above
    df = _frames([MPDU] * n, "vht", 9, 1, 80, 433.3, sgi=True)
    a = airtime(df)
    assert a["ppdu_bytes"].to_list() == [n * SUB] * n
    assert a["ppdu_ns"].to_list() == [round(want_us * 1000)] * n
    # each MPDU its byte share; together one PPDU (not n preambles)
    assert abs(a["share_ns"].sum() - round(want_us * 1000)) <= n
    assert a["upto_ns"][n - 1] == round(want_us * 1000)


def test_ampdu_padding_vht_vs_ht():
    # MPDUs of 1538, 100 and 62 bytes.  VHT/HE (APEP_LENGTH): 1544 + 104 + 68 = 1716, the last padded too;
    # HT: 1544 + 104 + 66 = 1714, the last unpadded.
    vht = airtime(_frames([MPDU, 100, 62], "vht", 9, 1, 80, 390.0))
    ht = airtime(_frames([MPDU, 100, 62], "ht", 7, 1, 20, 65.0))
    assert vht["ppdu_bytes"].to_list() == [1716] * 3
    assert ht["ppdu_bytes"].to_list() == [1714] * 3
    # VHT MCS 9 long GI: (16 + 13728 + 12) / 1560 = 8.8 -> 9 symbols: 40 + 36 = 76 µs
    assert vht["ppdu_ns"][0] == 76_000
    # HT20 MCS 7: (16 + 13712 + 6) / 260 = 52.8 -> 53 symbols: 36 + 212 = 248 µs
    assert ht["ppdu_ns"][0] == 248_000


def test_lone_vht_mpdu_is_an_s_mpdu():
    # no A-MPDU status in the record: a VHT PPDU still carries its MPDU as an S-MPDU (delimiter + padding)
    a = airtime(_frames([MPDU], "vht", 9, 1, 80, 390.0, ref=None))
    assert a["ppdu_bytes"].to_list() == [SUB]
    assert a["ppdu_ns"].to_list() == [72_000]
    # an HT MPDU outside an A-MPDU is the PSDU itself: 228 µs (table above)
    assert airtime(_frames([MPDU], "ht", 7, 1, 20, 65.0, ref=None))["ppdu_ns"].to_list() == [228_000]


def test_two_ampdus_do_not_mix():
    a = _frames([MPDU] * 3, "he", 11, 1, 80, 510.4, gi=3.2, ref=1)
    b = _frames([MPDU] * 64, "he", 11, 1, 80, 510.4, gi=3.2, ref=2)
    out = airtime(pl.concat([a, b]))
    # 3 MPDUs: (16 + 37056 + 6) / 8166.67 = 4.5 -> 5 symbols: 52 + 80 = 132 µs; 64: 1604 µs (table)
    assert out["ppdu_ns"].to_list() == [132_000] * 3 + [1_604_000] * 64


def test_an_ampdu_split_by_other_records_is_still_one_ppdu():
    # Its records are found by reference number, not by being consecutive (two radios in one file).
    a = _frames([MPDU] * 3, "ht", 7, 1, 20, 65.0, ref=5)
    other = _frames([MPDU], "ht", 7, 1, 20, 65.0, ref=6)
    out = airtime(pl.concat([a.slice(0, 2), other, a.slice(2, 1)]))
    # HT, 3 subframes: 1544 + 1544 + 1542 bytes
    assert out["ppdu_bytes"].to_list() == [4630, 4630, 1542, 4630]
    assert out["ppdu_ns"][0] == out["ppdu_ns"][3] != out["ppdu_ns"][2]


@pytest.mark.parametrize("seed", range(6))
def test_consecutive_ampdus_are_measured_as_when_grouped_by_reference(seed):
    # `_per_ppdu_runs` (sums over runs of consecutive records) against `_per_ppdu` (grouping by
    # reference number) on random A-MPDUs and records outside any, with unknown lengths, missing
    # sequence numbers and flags.
    from xlayer.timeline.airtime import _per_ppdu, _per_ppdu_runs, _runs
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, 400)
    n = int(sizes.sum())
    ref = np.repeat(np.where(rng.random(len(sizes)) < 0.15, np.nan, np.arange(len(sizes))), sizes)
    seq = np.cumsum(rng.choice([1, 1, 1, 2, 4095], n)) % 4096
    d = pl.DataFrame({
        "ampdu_ref": pl.Series(ref, dtype=pl.Float64, nan_to_null=True).cast(pl.UInt32),
        "ampdu_flags": pl.Series(rng.choice([0, 0x04, 0x0C, 0x08], n), dtype=pl.Int32)
        .set(pl.Series(rng.random(n) < 0.1), None),
        "wlan_seq": pl.Series(seq, dtype=pl.Int32).set(pl.Series(rng.random(n) < 0.05), None),
        "phy": rng.choice(["ht", "vht", "he", "ofdm", ""], n),
        "mpdu": pl.Series(rng.integers(14, 2000, n), dtype=pl.Int64).set(pl.Series(rng.random(n) < 0.05), None),
    })
    runs = _runs(d["ampdu_ref"])
    assert runs is not None
    cols = ["sub", "ppdu_bytes", "upto_bytes", "tail_ok"]
    want = _per_ppdu(d).select(cols)
    got = _per_ppdu_runs(d, runs).select(cols)
    assert got.equals(want, null_equal=True)
    assert want["tail_ok"].sum() not in (0, n) and want["upto_bytes"].null_count() > 0
