"""Issue 11, items 1 and 2, as the air tables and the rts_overhead cause see them.

1. The 802.11 frame starts at the radiotap header's it_len, which may run past the end of the fields
   the presence words name (AirPcap's 0x0000588e: fields up to byte 20, it_len 24).  The MPDU length,
   hence the airtime, was taken from the fields' end: 4 bytes too long on every frame (+32 us at
   1 Mbit/s).  Then it was learnt per layout, which cannot be right where records of one layout differ
   in padding; now each record's own it_len (packet column rt_len) is its header length.
2. A CTS-to-self (a CTS addressed to its own sender, no RTS before it) was counted as a CTS answering
   an RTS ("13 CTS, 0 RTS").  A CTS answers an RTS only as the next record after an RTS from the
   station it is addressed to, within SIFS + CTS airtime.
"""
from __future__ import annotations

import struct
import subprocess

import polars as pl
import pytest

import parsers
from tests.helpers.common import corpus_or_skip, manifest, tshark_or_skip
from tests.parsers.test_radiotap import DOT11, PAD_588E, _pcap, rt, with_fcs
from xlayer.attribution.causes import rts_overhead
from xlayer.attribution.causes.base import Context, Window
from xlayer.attribution.drops import DropConfig
from xlayer.metrics.air import air_frames
from xlayer.timeline.airtime import airtime

S = 1_000_000_000
ACK = bytes([0xD4, 0x00, 0x00, 0x00]) + bytes(range(1, 7))     # ACK to 01:02:03:04:05:06 (10 bytes + FCS)


# --- 1. radiotap padding: the MPDU starts at it_len ---------------------------------------------------


@pytest.mark.parametrize("decoder", ["fast", "reference"])
def test_padded_radiotap_header_airtime_crafted(tmp_path, decoder) -> None:
    """0x0000588e with 4 bytes of padding (it_len 24), 1 Mbit/s long preamble, FCS at the end."""
    recs = [rt([0x0000588E], PAD_588E) + with_fcs(DOT11), rt([0x0000588E], PAD_588E) + with_fcs(ACK)]
    path = tmp_path / "padded.pcap"
    path.write_bytes(_pcap(recs, 127))
    df = parsers.read_capture(path, decoder=decoder)
    assert df["wlan_type"].to_list() == [2, 1] and df["fcs_bad"].to_list() == [False, False]
    assert df["wlan_ra"][1] == "01:02:03:04:05:06"
    a = airtime(df)
    # the data MPDU: 24-byte header + LLC/SNAP + 11 bytes + FCS = 47 bytes (51 when read from byte 20)
    assert a["mpdu_bytes"].to_list() == [len(DOT11) + 4, 14]
    # 192 us PLCP + 8 us per byte at 1 Mbit/s: 568 us and the 304 us of an ACK (not 600 and 336)
    assert a["ppdu_ns"].to_list() == [192_000 + 8_000 * (len(DOT11) + 4), 304_000]


def _tshark_mpdu(path, tshark: str) -> list[int | None]:
    """Return each frame's MPDU length (FCS included) as tshark reads it: frame.len - radiotap.length
    (less the FCS the capture kept) + 4; None where tshark shows no radiotap.length."""
    out = subprocess.run([tshark, "-n", "-r", str(path), "-T", "fields", "-e", "frame.encap_type", "-e", "frame.len",
                          "-e", "radiotap.length", "-e", "radiotap.flags.fcs"],
                         capture_output=True, text=True, check=True).stdout
    want: list[int | None] = []
    for line in out.splitlines():
        encap, flen, it_len, fcs = line.split("\t")
        if not encap:       # a pcapng block tshark numbers as a frame: not a packet record
            continue
        want.append(int(flen) - int(it_len) - (4 if fcs in ("1", "True") else 0) + 4 if it_len else None)
    return want


@pytest.mark.parametrize("rel,layout,it_len", [
    ("radiotap/wireshark__wpa-Induction.pcap", "0000588e", 24),        # fields end at 20
    ("radiotap/libtrace__10_packets_radiotap.pcap", "0000586f", 32),   # fields end at 28
])
def test_padded_radiotap_header_airtime_corpus(rel, layout, it_len) -> None:
    path = corpus_or_skip() / rel
    tshark = tshark_or_skip()
    df = parsers.read_capture(path)
    assert set(df["rt_layout"].unique()) == {layout}
    a = airtime(df)
    assert a["mpdu_bytes"].to_list() == _tshark_mpdu(path, tshark)
    if "Induction" in rel:
        # frame 1: a 168-byte record with FCS = 144-byte beacon at 1 Mbit/s: 192 + 8 x 144 us
        assert (df["wirelen"][0], a["mpdu_bytes"][0], a["ppdu_ns"][0]) == (168, 144, 1_344_000)


# --- 1b. each record's own it_len (rt_len), not a length learnt per layout --------------------------

UNPAD_588E = PAD_588E[:-4]          # the same fields without the padding: it_len 20


def _mixed_padding_records() -> list[bytes]:
    """Return records of ONE layout (0x0000588e: FCS at the end, 1 Mbit/s) whose headers are padded to
    it_len 24 on some and not on others (it_len 20), carrying data frames of varied lengths: no frame of
    fixed MPDU length (ACK, CTS, RTS, Null) from which a per-layout length could be learnt."""
    recs = []
    for i in range(12):
        body = UNPAD_588E if i % 3 == 1 or i == 11 else PAD_588E
        recs.append(rt([0x0000588E], body) + with_fcs(DOT11 + bytes(range(5 * i))))
    return recs


def test_mixed_padding_in_one_layout_mpdu_from_each_records_it_len(tmp_path) -> None:
    recs = _mixed_padding_records()
    it_len = [r[2] | r[3] << 8 for r in recs]
    assert sorted(set(it_len)) == [20, 24]
    path = tmp_path / "mixed.pcap"
    path.write_bytes(_pcap(recs, 127))
    got = {}
    for decoder in ("fast", "reference"):
        df = parsers.read_capture(path, decoder=decoder)
        assert set(df["rt_layout"].to_list()) == {"0000588e"}
        assert df["wlan_type"].to_list() == [2] * len(recs) and not df["fcs_bad"].any()
        got[decoder] = (df["rt_len"].to_list(), airtime(df))
    assert got["fast"][0] == got["reference"][0] == it_len
    assert got["fast"][1].equals(got["reference"][1])
    a = got["fast"][1]
    # the FCS is in the record (Flags 0x10): the MPDU is everything after the record's own header
    assert a["mpdu_bytes"].to_list() == [len(r) - n for r, n in zip(recs, it_len)]
    assert a["ppdu_ns"].to_list() == [192_000 + 8_000 * (len(r) - n) for r, n in zip(recs, it_len)]


def test_tables_without_rt_len_keep_the_learnt_header_length(tmp_path) -> None:
    """Packet tables written before rt_len (column absent, or null of dtype Null as readers fill it):
    the header length is still learnt per layout, here from the ACK (fixed 14-byte MPDU)."""
    recs = [rt([0x0000588E], PAD_588E) + with_fcs(DOT11), rt([0x0000588E], PAD_588E) + with_fcs(ACK)]
    path = tmp_path / "padded.pcap"
    path.write_bytes(_pcap(recs, 127))
    df = parsers.read_capture(path)
    want = [len(DOT11) + 4, 14]
    assert airtime(df)["mpdu_bytes"].to_list() == want
    assert airtime(df.drop("rt_len"))["mpdu_bytes"].to_list() == want
    assert airtime(df.with_columns(pl.lit(None).alias("rt_len")))["mpdu_bytes"].to_list() == want


def _radiotap_captures() -> list[str]:
    return [r["file"] for r in manifest() if "DLT 127" in r.get("linktype", "") and "/vectors/" not in r["file"]]


@pytest.mark.parametrize("rel", _radiotap_captures() or ["(corpus absent)"])
def test_mpdu_bytes_equal_tshark_on_every_radiotap_capture(rel) -> None:
    """Every record of every radiotap capture of the corpus (malformed ones included): xlayer's MPDU
    length is tshark's frame.len - radiotap.length (+ 4 where the capture dropped the FCS)."""
    root = corpus_or_skip()
    tshark = tshark_or_skip()
    df = parsers.read_capture(root / rel)
    want = _tshark_mpdu(root / rel, tshark)
    assert len(want) == df.height
    ours = airtime(df)["mpdu_bytes"].to_list()
    # tshark shows no radiotap.length only where fewer than 4 bytes were captured: nor do we
    assert [w is None for w in want] == df["rt_len"].is_null().to_list()
    bad = [(i + 1, o, w) for i, (o, w) in enumerate(zip(ours, want)) if w is not None and o != w]
    assert not bad, f"{rel}: {len(bad)} of {df.height} records differ (frame, ours, tshark): {bad[:10]}"


# --- 2. CTS-to-self is not a CTS answering an RTS ----------------------------------------------------


STA, AP = "02:00:00:00:00:01", "02:00:00:00:00:a1"
AF_SCHEMA = {"capture_file": pl.String, "frame": pl.Int64, "ts_ns": pl.Int64, "wlan_type": pl.UInt8,
             "wlan_subtype": pl.UInt8, "wlan_ta": pl.String, "wlan_ra": pl.String, "fcs_bad": pl.Boolean,
             "airtime_ns": pl.Int64}


def _exchanges(n: int, protection: str) -> list[tuple]:
    """Return air_frames rows: n downlink data frames, each protected by an RTS/CTS exchange ("rts"),
    by a CTS-to-self of the AP ("self"), or by an unanswered RTS and then a CTS-to-self: 2.5 ms after
    it ("late"), or after another frame ("between")."""
    rows: list[tuple] = []
    t = S
    for _ in range(n):
        if protection == "rts":
            rows += [(11, AP, STA, t), (12, None, AP, t + 300_000)]
        elif protection == "self":
            rows += [(12, None, AP, t + 300_000)]
        elif protection == "late":
            rows += [(11, AP, STA, t), (12, None, AP, t + 2_500_000)]
        else:
            rows += [(11, AP, STA, t), (13, None, STA, t + 200_000), (12, None, AP, t + 400_000)]
        rows += [(2, AP, STA, t + 3_000_000), (13, None, AP, t + 3_300_000)]
        t += 10_000_000
    return [("air.pcap", i + 1, ts, 1 if sub != 2 else 2, sub if sub != 2 else 0, ta, ra, None, 50_000)
            for i, (sub, ta, ra, ts) in enumerate(rows)]


class _Tables:
    """A stand-in timeline: `table(name)` of the tables the rts_overhead cause reads."""

    def __init__(self, af: list[tuple], data: int) -> None:
        self.tables = {
            "air_frames": pl.DataFrame(af, schema=AF_SCHEMA, orient="row"),
            "attempts": pl.DataFrame({"station": [STA] * data, "ts_ns": [S + 3_000_000 + 10_000_000 * i
                                                                         for i in range(data)]}),
            "downlink": pl.DataFrame(schema={"flow": pl.String, "station": pl.String}),
            "uplink": pl.DataFrame(schema={"flow": pl.String, "station": pl.String}),
        }

    def table(self, name: str) -> pl.DataFrame:
        return self.tables[name]


@pytest.mark.parametrize("protection,rts,cts", [("rts", 60, 60), ("self", 0, 0), ("late", 60, 0),
                                                 ("between", 60, 0)])
def test_rts_overhead_counts_only_cts_answering_an_rts(protection, rts, cts) -> None:
    ctx = Context(_Tables(_exchanges(60, protection), 60), DropConfig())
    assert rts_overhead._control(ctx, 12).height == cts
    f = rts_overhead.score(ctx, Window(0, 10 * S, [], [STA], kind="sustained"))
    if rts == 0:
        assert f is None                    # CTS-to-self is protection, not an RTS/CTS exchange
        return
    assert f is not None and (f.numbers["rts"], f.numbers["cts"]) == (rts, cts)
    assert f"{rts:,} RTS and {cts:,} CTS for 60 data transmissions" in f.summary


def test_rts_overhead_explains_a_drop_only_where_protection_rose() -> None:
    # 60 exchanges, then 60 more data frames: protected in the first case, not in the second
    af = _exchanges(60, "rts")
    plain = [("air.pcap", len(af) + i + 1, S + 600_000_000 + 10_000_000 * i, 2, 0, AP, STA, None, 50_000)
             for i in range(60)]
    for later_protected in (True, False):
        rows = af + ([(f, n + len(af), ts + 600_000_000, *rest) for f, n, ts, *rest in af] if later_protected
                     else plain)
        t = _Tables(rows, 120)
        t.tables["attempts"] = pl.DataFrame({"station": [STA] * 120,
                                             "ts_ns": [S + 3_000_000 + 10_000_000 * i for i in range(120)]})
        ctx = Context(t, DropConfig())
        drop = Window(S, S + 600_000_000, [], [STA])          # the protected first half drops
        ctx.quiet = [(drop.start_ns, drop.end_ns)]
        f = rts_overhead.score(ctx, drop)
        # RTS/CTS before every frame outside the drop too: the steady state the drop fell from, no cause;
        # protection only inside the drop: it is what changed
        assert (f is None) == later_protected
        assert rts_overhead.score(ctx, Window(S, S + 600_000_000, [], [STA], kind="sustained")) is not None


def test_rts_overhead_on_a_capture_with_cts_to_self() -> None:
    """wpa-Induction.pcap: 165 CTS, all CTS-to-self (109 of the station, 56 of the AP), no RTS."""
    path = corpus_or_skip() / "radiotap/wireshark__wpa-Induction.pcap"
    af = air_frames(parsers.read_capture(path), "wpa-Induction.pcap")
    assert af.filter((pl.col("wlan_type") == 1) & (pl.col("wlan_subtype") == 12)).height == 165

    class _One:
        def table(self, name: str) -> pl.DataFrame:
            assert name == "air_frames"
            return af

    assert rts_overhead._control(Context(_One(), DropConfig()), 12).height == 0
    assert rts_overhead._control(Context(_One(), DropConfig()), 11).height == 0


def test_air_frames_airtime_is_null_not_nan() -> None:
    """air_frames holds no fraction; its airtime is null where unknown (DLT 105: no rate), never NaN."""
    root = corpus_or_skip()
    for rel, unknown in (("radiotap/wireshark__wpa-Induction.pcap", 0), ("radiotap/aircrack-ng__n-02.cap", 218)):
        af = air_frames(parsers.read_capture(root / rel), rel)
        assert af["airtime_ns"].dtype == pl.Int64 and af["airtime_ns"].null_count() == unknown
        assert not [c for c, t in af.schema.items() if t.is_float() and af[c].is_nan().any()]


def test_struct_helpers_are_what_the_tests_assume() -> None:
    """The crafted header's fields end at byte 20 and its it_len is 24 (what item 1 is about)."""
    from parsers.layers.radiotap import _layout

    hdr = rt([0x0000588E], PAD_588E)
    assert struct.unpack_from("<H", hdr, 2)[0] == 24 == len(hdr)
    assert _layout((0x0000588E,), ()).end == 20
