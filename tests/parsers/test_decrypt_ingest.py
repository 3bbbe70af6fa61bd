"""Native WPA decryption inside both decoders (read_capture(..., keys=...)), with tshark as the oracle.

Frames tshark decrypts to IPv4 must carry the same IP and TCP columns in our tables, from the fast and
the reference decoders alike; the two decoders agree on every cell; decryption changes nothing but the
decrypted rows' body columns and the new wlan_decrypted / wlan_mic / wlan_key columns; without keys the
table is the one a plain read gives.  Cut and tampered frames are crafted in tmp_path from corpus records.
"""
from __future__ import annotations

import functools
import struct
import zlib
from pathlib import Path

import polars as pl
import pytest

from parsers.crypto import parse_key
from parsers.decode.ingest import IngestStats, read_capture
from parsers.formats.containers import open_capture
from tests.helpers.common import CORPUS, corpus_or_skip
from tests.helpers.wpa import corpus_file, tshark_decrypted

INDUCTION = "radiotap/wireshark__wpa-Induction.pcap"
KEY = "Induction:Coherer"
OTHERS = {  # more corpus captures with a known passphrase (MANIFEST.tsv), for decoder agreement
    "radiotap/libpcap__wpa2linkuppassphraseiswireshark.pcap": "wireshark:ikeriri-5g",
    "radiotap/aircrack-ng__wpa-psk-linksys.cap": "dictionary:linksys",
    "radiotap/aircrack-ng__test1.pcap": "15211521:ogogo",
}
DECRYPT_COLS = ["wlan_decrypted", "wlan_mic", "wlan_key"]
# Columns the plaintext of a decrypted frame adds (its body): everything after the 802.11 header.
BODY_PREFIXES = ("eth_", "vlan_", "ip_", "sport", "dport", "tcp_", "udp_", "icmp_")


@functools.lru_cache(maxsize=None)
def _read(rel: str, decoder: str, key: str | None) -> tuple[pl.DataFrame, dict | None]:
    st = IngestStats()
    keys = [parse_key(key)] if key else None
    df = read_capture(corpus_or_skip() / rel, decoder=decoder, stats=st, keys=keys)
    return df, st.decryption


@pytest.mark.parametrize("decoder", ["fast", "reference"])
def test_decrypted_frames_have_tshark_ip_columns(decoder):
    corpus_file(INDUCTION)
    theirs = tshark_decrypted(INDUCTION, KEY)
    assert len(theirs) > 100
    df, counts = _read(INDUCTION, decoder, KEY)
    ours = {r["frame"]: (r["ip_src"], r["ip_dst"], r["ip_len"], r["ip_id"], r["sport"], r["dport"])
            for r in df.filter(pl.col("frame").is_in(list(theirs))).iter_rows(named=True)}
    for n, want in theirs.items():
        assert ours[n] == want, f"frame {n}"
    got = df.filter(pl.col("frame").is_in(list(theirs)))
    assert got["wlan_decrypted"].all() and got["wlan_protected"].all()
    assert set(got["wlan_mic"]) == {"ok"} and set(got["wlan_key"]) <= {"ptk", "gtk"}
    assert counts["decrypted"] == 276 and counts["mic_failures"] == 0 and counts["hs_ptks_derived"] >= 1
    assert counts["decrypted"] == df["wlan_decrypted"].sum()


@pytest.mark.parametrize("rel", [INDUCTION, *sorted(OTHERS)])
def test_fast_and_reference_agree_with_keys(rel):
    corpus_file(rel)
    key = OTHERS.get(rel, KEY)
    fast, fc = _read(rel, "fast", key)
    ref, rc = _read(rel, "reference", key)
    assert fc == rc
    assert fast.equals(ref, null_equal=True), _first_difference(fast, ref)
    if rel == INDUCTION or fc["decrypted"]:
        assert fast["wlan_decrypted"].sum() == fc["decrypted"] > 0


def _first_difference(a: pl.DataFrame, b: pl.DataFrame) -> str:
    for c in a.columns:
        ne = a[c].ne_missing(b[c]) if a[c].dtype != pl.List else pl.Series([x != y for x, y in zip(a[c], b[c])])
        if ne.any():
            i = ne.arg_true()[0]
            return f"column {c} row {i}: {a[c][i]!r} != {b[c][i]!r}"
    return "same"


@pytest.mark.parametrize("decoder", ["fast", "reference"])
def test_keys_change_only_the_decrypted_rows_bodies(decoder):
    corpus_file(INDUCTION)
    plain, _ = _read(INDUCTION, decoder, None)
    assert plain.equals(read_capture(CORPUS / INDUCTION, decoder=decoder, keys=[]), null_equal=True)
    assert plain.select(DECRYPT_COLS).null_count().row(0) == (plain.height,) * 3
    keyed, _ = _read(INDUCTION, decoder, KEY)
    assert keyed.columns == plain.columns
    dec = keyed["wlan_decrypted"].fill_null(False)
    same = [c for c in plain.columns if c not in DECRYPT_COLS and not c.startswith(BODY_PREFIXES)]
    assert keyed.select(same).equals(plain.select(same), null_equal=True)
    assert keyed.filter(~dec).drop(DECRYPT_COLS).equals(plain.filter(~dec).drop(DECRYPT_COLS), null_equal=True)
    # protected rows are marked either way; open rows carry no verdict
    prot = keyed["wlan_protected"].fill_null(False)
    assert keyed.filter(prot)["wlan_decrypted"].null_count() == 0
    assert keyed.filter(~prot)["wlan_decrypted"].null_count() == int((~prot).sum())
    assert plain.filter(dec)["ip_src"].null_count() == int(dec.sum())


@pytest.mark.parametrize("decoder", ["fast", "reference"])
def test_wrong_passphrase_counts_failed_handshakes(decoder):
    corpus_file(INDUCTION)
    st = IngestStats()
    df = read_capture(CORPUS / INDUCTION, decoder=decoder, stats=st, keys=[parse_key("NotThePassword:Coherer")])
    assert st.decryption["decrypted"] == 0 and st.decryption["hs_handshakes_failed"] >= 1
    assert not df["wlan_decrypted"].fill_null(False).any()
    assert df.filter(pl.col("wlan_protected").fill_null(False))["ip_src"].null_count() == \
        int(df["wlan_protected"].fill_null(False).sum())


# -- crafted captures --------------------------------------------------------------------------------

def _records(path: Path) -> list[tuple[bytes, int]]:
    """Return (captured bytes, wire length) of every record of a capture."""
    out = []
    with open_capture(path) as cap:
        for ch in cap.chunks():
            for o, cl, wl in zip(ch.offset.tolist(), ch.caplen.tolist(), ch.wirelen.tolist()):
                out.append((bytes(ch.data[o:o + cl]), wl))
    return out


def _write_pcap(path: Path, records: list[tuple[bytes, int]], linktype: int = 127) -> None:
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for i, (data, wl) in enumerate(records):
            fh.write(struct.pack("<IIII", 1_000_000 + i, 0, len(data), wl))
            fh.write(data)


def _first_decrypted_tcp(df: pl.DataFrame) -> int:
    """Return the 0-based index of the first decrypted TCP frame of 100+ bytes."""
    rows = df.filter(pl.col("wlan_decrypted").fill_null(False) & pl.col("tcp_seq").is_not_null()
                     & (pl.col("caplen") > 100))
    return int(rows["frame"][0]) - 1


@pytest.fixture()
def crafted(tmp_path):
    """Return (records of wpa-Induction, index of a decrypted TCP frame, tmp_path)."""
    corpus_file(INDUCTION)
    df, _ = _read(INDUCTION, "fast", KEY)
    return _records(CORPUS / INDUCTION), _first_decrypted_tcp(df), tmp_path


def test_frame_cut_by_snaplen_decrypts_its_prefix_unverified(crafted):
    recs, i, tmp = crafted
    data, wl = recs[i]
    recs = list(recs)
    recs[i] = (data[:len(data) - 30], wl)        # the MIC and FCS and some payload not captured
    path = tmp / "cut.pcap"
    _write_pcap(path, recs)
    full, _ = _read(INDUCTION, "fast", KEY)
    tables = []
    for decoder in ("fast", "reference"):
        st = IngestStats()
        df = read_capture(path, decoder=decoder, stats=st, keys=[parse_key(KEY)])
        row = df.row(i, named=True)
        assert (row["wlan_decrypted"], row["wlan_mic"]) == (True, "unverified")
        want = full.row(i, named=True)
        assert [row[c] for c in ("ip_src", "ip_dst", "ip_len", "ip_id", "sport", "dport", "tcp_seq")] == \
            [want[c] for c in ("ip_src", "ip_dst", "ip_len", "ip_id", "sport", "dport", "tcp_seq")]
        assert st.decryption["mic_unverified"] == 1
        tables.append(df)
    assert tables[0].equals(tables[1], null_equal=True), _first_difference(*tables)


def test_mic_failure_keeps_no_ip_columns_and_is_counted(crafted):
    recs, i, tmp = crafted
    data, wl = recs[i]
    body = bytearray(data[:-4])
    body[-20] ^= 0x01                            # one ciphertext bit: the MIC no longer verifies
    recs = list(recs)
    recs[i] = (bytes(body) + zlib.crc32(bytes(body[_rt_len(data):])).to_bytes(4, "little"), wl)
    path = tmp / "tampered.pcap"
    _write_pcap(path, recs)
    tables = []
    for decoder in ("fast", "reference"):
        st = IngestStats()
        df = read_capture(path, decoder=decoder, stats=st, keys=[parse_key(KEY)])
        row = df.row(i, named=True)
        assert (row["wlan_decrypted"], row["wlan_mic"], row["wlan_key"]) == (False, "failed", None)
        assert row["ip_src"] is None and row["eth_type"] is None and row["fcs_bad"] is not True
        assert st.decryption["mic_failures"] == 1 and st.decryption["decrypted"] == 275
        tables.append(df)
    assert tables[0].equals(tables[1], null_equal=True), _first_difference(*tables)


def _rt_len(data: bytes) -> int:
    return int.from_bytes(data[2:4], "little")


def test_bare_records_match_the_full_radio_header_walk():
    """The decryption pass's short way to a record's bare 802.11 frame gives what the full walk gives."""
    from parsers.crypto.frames import _record
    from parsers.decode.decrypt import bare_record

    corpus = corpus_or_skip()
    seen = 0
    for path in sorted((corpus / "radiotap").iterdir()):
        try:
            with open_capture(path) as cap:
                chunks = list(cap.chunks())
        except Exception:  # noqa: BLE001 - files the container reader refuses are not this test's business
            continue
        for ch in chunks:
            for i, (o, cl, wl, lt) in enumerate(zip(ch.offset.tolist(), ch.caplen.tolist(), ch.wirelen.tolist(),
                                                     ch.linktype.tolist())):
                raw = bytes(ch.data[o:o + cl])
                assert bare_record(i, raw, max(wl, cl), lt) == _record(i, raw, max(wl, cl), lt), f"{path.name} #{i}"
                seen += 1
    assert seen > 1000


def test_projected_reads_decrypt_alike():
    """A read of a few columns decrypts as a full read does, in both decoders."""
    corpus_file(INDUCTION)
    cols = ["ip_src", "sport", "wlan_decrypted", "wlan_mic"]
    full, _ = _read(INDUCTION, "fast", KEY)
    for decoder in ("fast", "reference"):
        part = read_capture(CORPUS / INDUCTION, decoder=decoder, columns=cols, keys=[parse_key(KEY)])
        assert part.select(cols).equals(full.select(cols), null_equal=True), decoder


@pytest.mark.parametrize("taken", [True, False])
def test_no_walk_thread_for_keys_when_the_cpus_are_taken(monkeypatch, taken: bool) -> None:
    """With keys, a large file is walked by a thread ahead of the decoding only while a core is free;
    either way the table and the decryption counts are the same."""
    from parsers.columnar import accel
    from parsers.decode import ingest

    if not accel.AVAILABLE:
        pytest.skip("parsers.columnar._walk is not built: no walk thread")
    made = []
    real = ingest._Prepared
    monkeypatch.setattr(ingest, "_Prepared", lambda *a, **k: made.append(1) or real(*a, **k))
    monkeypatch.setattr(ingest, "_cpus_taken", lambda: taken)
    monkeypatch.setattr(ingest, "BUSY_CHECK_BYTES", 1)
    monkeypatch.setattr(ingest, "PREP_MIN_BYTES", 1)
    path, keys = corpus_file(INDUCTION), [parse_key(f"wpa-pwd:{KEY}")]
    st = IngestStats()
    df = read_capture(path, threads=2, keys=keys, stats=st, chunk_bytes=4096)
    assert made == ([] if taken else [1])
    one = IngestStats()
    assert df.equals(read_capture(path, threads=1, keys=keys, stats=one, chunk_bytes=4096), null_equal=True)
    assert st.decryption == one.decryption and st.decryption["decrypted"] > 0
