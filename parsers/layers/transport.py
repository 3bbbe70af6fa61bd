"""TCP, UDP, ICMP and ICMPv6 headers: transport columns (the last layer we decode).

Rules shared by the vectorized and per-frame decoders (matching tshark 4.0):
  * the segment ends at the Span's `claimed` (IP length, bounded by the frame); bytes past `end`
    were cut by the snap length; a first fragment (MF set) may end anywhere, so headers it cuts
    short are not malformed (tshark: "unreassembled fragment");
  * TCP: ports need 4 captured bytes; sequence .. window need 16 (tshark reads them together);
    data offset < 5 shows the sequence number, header length and tcp.len only (and is malformed);
    tcp_len = segment length - header length, absent when the IP packet is a first fragment (MF set)
    or the segment is shorter than the header;
  * TCP options are walked up to the header length: EOL stops, NOP is one byte, a length byte past
    the header, a length < 2 or an option running past the header stop the walk (malformed); an
    option cut by the snap length stops it (not malformed). MSS / window scale / timestamps with
    a wrong length are skipped; SACK-permitted counts with any length, even cut; a SACK length
    other than 2 + 8n is malformed, and ends the walk when the first SACK option has no whole block
    (tshark throws there); so does an MPTCP option shorter than 4 bytes; the first occurrence of
    each option wins (SACK: the first option's blocks, at most 4);
  * UDP: ports need 4 bytes, the length field 6; length < 8 (0 is allowed for > 64 KiB payloads)
    and length > segment (unless a first fragment) are malformed;
  * ICMP shows type and code from 6 bytes (tshark reads them with the checksum and 2 more bytes);
    ICMPv6 shows the type from 1 byte, the code from 2; a message under 8 bytes is malformed.
    Quoted headers inside ICMP errors are not decoded (they would overwrite the outer columns).
"""
from __future__ import annotations

import functools
import struct
from collections.abc import Callable

import numpy as np
# dpkt is imported inside the per-frame decoders that use it: the vectorized path never calls them, and
# importing dpkt costs ~0.1 s of every run's start-up

from parsers.columnar import accel
from parsers.columnar.columns import ColumnBuilder
from parsers.columnar.gather import Window
from parsers.layers.link import ByteViews, put_index, views
from parsers.columnar.span import Span

TCP, UDP, ICMP, ICMPV6 = 6, 17, 1, 58
MAX_OPTION_BYTES = 40
SACK_MAX_BLOCKS = 4
R_TCP_SHORT = "tcp: segment shorter than its 20-byte header"
R_TCP_OFF = "tcp: header length < 20"
R_TCP_LONG = "tcp: header length past end of segment"
R_OPT_LENBYTE = "tcp: option length byte past end of header"
R_OPT_SHORT = "tcp: option length < 2"
R_OPT_PAST = "tcp: option length past end of header"
R_OPT_SACK = "tcp: SACK option length is not 2 + 8n"
R_OPT_MPTCP = "tcp: MPTCP option length < 4"
R_UDP_SHORT = "udp: datagram shorter than its 8-byte header"
R_UDP_LEN = "udp: length < 8"
R_UDP_PAST = "udp: length past end of IP payload"
R_ICMP = "icmp: message shorter than 8 bytes"
R_ICMPV6 = "icmpv6: message shorter than 8 bytes"

_EMPTY = np.zeros(0, np.int64)


def _empty() -> Span:
    return Span(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, np.zeros(0, bool))


def _segment_decoder(fill: Callable[[ByteViews, Span, ColumnBuilder], None]) -> Callable[..., Span]:
    """Return the layer decoder (buf, span, out) -> Span that runs fill(views, rows, out) on the rows whose
    IP payload holds at least one byte (the others have no transport header). No layer after the
    transport layer is decoded: it hands on an empty Span."""
    @functools.wraps(fill)
    def decode(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
        nonempty = span.claimed > span.start
        sp = span if nonempty.all() else span.take(nonempty)
        if len(sp):
            fill(views(buf), sp, out)
        return _empty()
    return decode


def _first_fragment(out: ColumnBuilder, rows: np.ndarray) -> np.ndarray:
    """Return a mask: the IP packet of each row has More Fragments set (its segment is incomplete)."""
    got = out.get("ip_mf")
    if got is None:
        return np.zeros(len(rows), bool)
    vals, mask = got
    return mask[rows] & vals[rows]


# --- TCP --------------------------------------------------------------------------------------------

@_segment_decoder
def decode_tcp(v: ByteViews, sp: Span, out: ColumnBuilder) -> None:
    """Write TCP header and option columns."""
    st = sp.start
    seg = sp.claimed - st
    avail = sp.end - st
    frag = _first_fragment(out, sp.rows)     # a fragment may end anywhere: short is not malformed
    out.malformed(sp.rows[(seg < 20) & ~frag], R_TCP_SHORT)
    full = avail >= 16                  # tshark reads sequence .. window before showing any of them
    if not full.all():
        part = ~full & (avail >= 4)
        out.put("sport", sp.rows[part], v.be16[st[part]])
        out.put("dport", sp.rows[part], v.be16[st[part] + 2])
        sp, seg, frag = sp.take(full), seg[full], frag[full]
        st = sp.start
    rows = sp.rows
    at = put_index(rows)
    h = v.window(st, 16)
    out.put("sport", at, h.be16(0))
    out.put("dport", at, h.be16(2))
    out.put("tcp_seq", at, h.be32(4))
    ack = h.be32(8)
    word = h.be32(12).astype(np.int64)     # data offset, flags, window
    hl = (word >> 26) & 0x3C
    out.put("tcp_hdr_len", at, hl)
    tcp_len = seg - hl
    has_len = (tcp_len >= 0) & ~frag
    out.put("tcp_len", at if has_len.all() else rows[has_len], tcp_len if has_len.all() else tcp_len[has_len])
    bogus = hl < 20
    if bogus.any():
        out.malformed(rows[bogus], R_TCP_OFF)
        good = ~bogus
        sp, seg, hl, word, ack, frag = sp.take(good), seg[good], hl[good], word[good], ack[good], frag[good]
        st, rows = sp.start, sp.rows
        at = put_index(rows)
    out.put("tcp_ack", at, ack)
    out.put("tcp_flags", at, (word >> 16) & 0x0FFF)
    out.put("tcp_win", at, word & 0xFFFF)
    out.malformed(rows[(seg < hl) & ~frag], R_TCP_LONG)
    opt = np.flatnonzero((hl > 20) & (sp.end > st + 20)) if out.decodes("tcp_options") else ()
    if len(opt):
        _tcp_options(v, rows[opt], st[opt] + 20, st[opt] + hl[opt], sp.end[opt], out)


NOP_NOP_TS = 0x0101080A     # the usual first option word (Linux, BSD, Windows): NOP, NOP, timestamps
TS_FIRST = 0x080A           # timestamps option (kind 8, length 10) with no NOPs before it (ns-3)
NOP_NOP = 0x0101
SACK = 5


def _tcp_options(v, rows: np.ndarray, pos: np.ndarray, hend: np.ndarray, end: np.ndarray,
                 out: ColumnBuilder) -> None:
    """Write option columns: the usual layouts read in place (NOP NOP timestamps or timestamps first,
    then end-of-list or a closing NOP NOP SACK), anything else walked (with the compiled loops, every
    row walked in C: the same findings, one pass)."""
    if accel.AVAILABLE and len(rows):
        got = accel.tcp_options(v.u8, pos, hend, end)
        if got is not None:
            _put_walked(v, out, rows, *got)
            return
    n = len(rows)
    tsval = np.full(n, -1, np.int64)
    tsecr = np.full(n, -1, np.int64)
    pos = pos.copy()
    _leading_timestamps(v, pos, hend, end, tsval, tsecr)
    live = (pos < hend) & (pos < end)
    k = np.flatnonzero(live)
    live[k[v.u8[pos[k]] == 0]] = False     # end of option list: the walk would stop there
    sack_pos, sack_cnt = _closing_sack(v, pos, hend, end)
    walk = np.flatnonzero(live & (sack_cnt == 0))
    state = _walk_options(v, rows[walk], pos[walk], hend[walk], end[walk], tsval[walk], tsecr[walk], out)
    tsval[walk], tsecr[walk] = state.pop("tsval"), state.pop("tsecr")
    _put_valid(out, "tcp_tsval", rows, tsval)
    _put_valid(out, "tcp_tsecr", rows, tsecr)
    wrows = rows[walk]
    for name in ("tcp_mss", "tcp_wscale"):
        _put_valid(out, name, wrows, state[name])
    out.put("tcp_sack_perm", wrows[state["sack_perm"]], True)
    sack_pos[walk], sack_cnt[walk] = state["sack_pos"], state["sack_cnt"]
    _put_sack(v, out, rows, sack_pos, np.minimum(sack_cnt, SACK_MAX_BLOCKS))


_OPT_REASONS = (None, R_OPT_LENBYTE, R_OPT_SHORT, R_OPT_PAST, R_OPT_MPTCP, R_OPT_SACK)  # accel codes


def _put_walked(v, out: ColumnBuilder, rows: np.ndarray, tsval: np.ndarray, tsecr: np.ndarray,
                mss: np.ndarray, wscale: np.ndarray, sack_perm: np.ndarray, sack_pos: np.ndarray,
                sack_cnt: np.ndarray, reason: np.ndarray) -> None:
    """Write what accel.tcp_options found, as _tcp_options writes its own findings."""
    bad = np.flatnonzero(reason)
    if len(bad):
        codes = reason[bad]
        for code in np.unique(codes).tolist():
            out.malformed(rows[bad[codes == code]], _OPT_REASONS[code])
    _put_valid(out, "tcp_tsval", rows, tsval)
    _put_valid(out, "tcp_tsecr", rows, tsecr)
    for name, vals in (("tcp_mss", mss), ("tcp_wscale", wscale)):
        _put_valid(out, name, rows, vals)
    out.put("tcp_sack_perm", rows[sack_perm], True)
    _put_sack(v, out, rows, sack_pos, np.minimum(sack_cnt, SACK_MAX_BLOCKS))


def _leading_timestamps(v, pos: np.ndarray, hend: np.ndarray, end: np.ndarray, tsval: np.ndarray,
                        tsecr: np.ndarray) -> None:
    """Read a timestamps option that comes first (after two NOPs, or right away) and is captured
    whole, as the walk would; move pos past it."""
    pre = np.flatnonzero((hend >= pos + 10) & (end >= pos + 10))
    if not len(pre):
        return
    h = Window(v.u8, pos[pre], 12)
    w0 = h.ube(0, 4)
    room = (hend[pre] >= pos[pre] + 12) & (end[pre] >= pos[pre] + 12)
    nop_ts = room & (w0 == NOP_NOP_TS)
    ts = ~nop_ts & ((w0 >> np.uint64(16)) == TS_FIRST)
    for sel, at in ((nop_ts, 2), (ts, 0)):
        if sel.any():
            k = pre[sel]
            tsval[k] = h.ube(at + 2, 4)[sel]
            tsecr[k] = h.ube(at + 6, 4)[sel]
            pos[k] += at + 10


def _closing_sack(v, pos: np.ndarray, hend: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (where the blocks start, block count) of rows whose remaining options are exactly
    NOP, NOP and one well-formed SACK option ending the header, all captured (count 0 elsewhere).

    That is what the walk would find for them (Linux sends it so), one step instead of four.
    """
    n = len(pos)
    sack_pos = np.full(n, -1, np.int64)
    sack_cnt = np.zeros(n, np.int64)
    cand = np.flatnonzero((pos + 4 <= hend) & (hend <= end))
    if not len(cand):
        return sack_pos, sack_cnt
    h = v.window(pos[cand], 4)
    size = h.u8(3).astype(np.int64)
    hit = (h.be16(0) == NOP_NOP) & (h.u8(2) == SACK) & (size >= 10) & ((size - 2) % 8 == 0) \
        & (pos[cand] + 2 + size == hend[cand])
    k = cand[hit]
    sack_pos[k] = pos[k] + 4
    sack_cnt[k] = (size[hit] - 2) // 8
    return sack_pos, sack_cnt


def _walk_options(v, rows: np.ndarray, pos: np.ndarray, hend: np.ndarray, end: np.ndarray,
                  tsval: np.ndarray, tsecr: np.ndarray, out: ColumnBuilder) -> dict[str, np.ndarray]:
    """Walk the option bytes of all rows at once, one option per step (at most 40 steps)."""
    n = len(rows)
    u8 = v.u8
    mss = np.full(n, -1, np.int64)
    wscale = np.full(n, -1, np.int64)
    sack_perm = np.zeros(n, bool)
    sack_seen = np.zeros(n, bool)
    sack_pos = np.full(n, -1, np.int64)   # where the first SACK option's blocks start
    sack_cnt = np.zeros(n, np.int64)       # how many complete blocks of it are captured
    pos = pos.copy()
    act = np.arange(n)
    for _ in range(MAX_OPTION_BYTES):
        p = pos[act]
        live = (p < hend[act]) & (p < end[act])
        act, p = act[live], p[live]
        if not len(act):
            break
        kind = u8[p].astype(np.int64)
        nop = kind == 1
        pos[act[nop]] = p[nop] + 1
        more = kind > 1                       # EOL (0) ends the walk
        nops = act[nop]
        act, p, kind = act[more], p[more], kind[more]
        he, en = hend[act], end[act]
        lenbyte_bad = p + 1 >= he
        out.malformed(rows[act[lenbyte_bad]], R_OPT_LENBYTE)
        ok = ~lenbyte_bad & (p + 1 < en)
        act, p, kind, he, en = act[ok], p[ok], kind[ok], he[ok], en[ok]
        size = u8[p + 1].astype(np.int64)
        bad = size < 2
        out.malformed(rows[act[bad]], R_OPT_SHORT)
        past = ~bad & (p + size > he)
        out.malformed(rows[act[past]], R_OPT_PAST)
        ok = ~bad & ~past
        act, p, kind, size, en = act[ok], p[ok], kind[ok], size[ok], en[ok]
        mptcp = (kind == 30) & (size < 4)      # tshark throws reading the subtype's fields
        out.malformed(rows[act[mptcp]], R_OPT_MPTCP)
        whole = (p + size <= en) & ~mptcp
        sel = (kind == 2) & (size == 4) & whole & (mss[act] < 0)
        mss[act[sel]] = v.be16[p[sel] + 2]
        sel = (kind == 3) & (size == 3) & whole & (wscale[act] < 0)
        wscale[act[sel]] = u8[p[sel] + 2]
        sack_perm[act[kind == 4]] = True       # tshark shows it from its kind and length bytes
        ts = (kind == 8) & (size == 10) & (tsval[act] < 0)
        sel = ts & (p + 6 <= en)
        tsval[act[sel]] = v.be32[p[sel] + 2]
        sel = ts & whole
        tsecr[act[sel]] = v.be32[p[sel] + 6]
        sack = kind == 5
        badsack = sack & (((size - 2) % 8 != 0) | (size == 2))
        out.malformed(rows[act[badsack]], R_OPT_SACK)
        # tshark throws on a first SACK option without a whole block (and only on the first)
        throws = badsack & (size < 10) & ~sack_seen[act]
        sack_seen[act[sack]] = True
        blocks = np.minimum((size - 2) // 8, (en - p - 2) // 8)
        sel = sack & (blocks > 0) & (sack_pos[act] < 0)
        sack_pos[act[sel]] = p[sel] + 2
        sack_cnt[act[sel]] = blocks[sel]
        pos[act] = p + size
        act = act[whole & ~throws]
        act = np.concatenate([act, nops]) if len(nops) else act
    return {"tcp_mss": mss, "tcp_wscale": wscale, "tsval": tsval, "tsecr": tsecr, "sack_perm": sack_perm,
            "sack_pos": sack_pos, "sack_cnt": sack_cnt}


def _put_valid(out: ColumnBuilder, name: str, rows: np.ndarray, vals: np.ndarray) -> None:
    ok = vals >= 0
    if ok.all():    # the usual (timestamps on every segment): the rows as they are, their write index cached
        out.put(name, rows, vals)
    elif ok.any():
        out.put(name, rows[ok], vals[ok])


def _put_sack(v, out: ColumnBuilder, rows: np.ndarray, pos: np.ndarray, cnt: np.ndarray) -> None:
    """Write the SACK block lists (sparse: one cell per row that has blocks)."""
    have = np.flatnonzero(cnt > 0)
    if not len(have):
        return
    k = np.arange(SACK_MAX_BLOCKS)
    at = pos[have, None] + 8 * k[None, :]
    valid = k[None, :] < cnt[have, None]
    edges = np.zeros(at.shape + (2,), np.int64)
    edges[valid, 0] = v.be32[at[valid]]
    edges[valid, 1] = v.be32[at[valid] + 4]
    count = cnt[have]
    for c in range(1, SACK_MAX_BLOCKS + 1):
        sel = count == c
        if sel.any():
            _put_lists(out, "tcp_sack", rows[have[sel]], edges[sel, :c].tolist())


def _put_lists(out: ColumnBuilder, name: str, rows: np.ndarray, values: list) -> None:
    if hasattr(out, "put_objs"):
        out.put_objs(name, rows, values)
    else:
        for r, val in zip(rows.tolist(), values):
            out.put_obj(name, r, val)


# --- UDP --------------------------------------------------------------------------------------------

@_segment_decoder
def decode_udp(v: ByteViews, sp: Span, out: ColumnBuilder) -> None:
    """Write UDP columns."""
    st = sp.start
    seg = sp.claimed - st
    avail = sp.end - st
    frag = _first_fragment(out, sp.rows)
    out.malformed(sp.rows[(seg < 8) & ~frag], R_UDP_SHORT)
    has6 = avail >= 6
    part = ~has6 & (avail >= 4)
    out.put("sport", sp.rows[part], v.be16[st[part]])
    out.put("dport", sp.rows[part], v.be16[st[part] + 2])
    rows, seg, frag = sp.rows[has6], seg[has6], frag[has6]
    h = v.window(st[has6], 6)
    at = put_index(rows)
    out.put("sport", at, h.be16(0))
    out.put("dport", at, h.be16(2))
    ulen = h.be16(4).astype(np.int64)
    out.put("udp_len", at, ulen)
    out.malformed(rows[(ulen < 8) & ~((ulen == 0) & (seg > 0xFFFF))], R_UDP_LEN)
    out.malformed(rows[(ulen > seg) & ~frag], R_UDP_PAST)


# --- ICMP / ICMPv6 ----------------------------------------------------------------------------------

@_segment_decoder
def decode_icmp(v: ByteViews, sp: Span, out: ColumnBuilder) -> None:
    """Write ICMP (kind 1) / ICMPv6 (kind 58) type and code."""
    st = sp.start
    avail = sp.end - st
    v6 = sp.kind == ICMPV6
    short = (sp.claimed - st < 8) & ~_first_fragment(out, sp.rows)
    out.malformed(sp.rows[short & ~v6], R_ICMP)
    out.malformed(sp.rows[short & v6], R_ICMPV6)
    has_type = np.where(v6, avail >= 1, avail >= 6)     # tshark's ICMP reads 6 bytes first
    has_code = np.where(v6, avail >= 2, avail >= 6)
    out.put("icmp_type", sp.rows[has_type], v.u8[st[has_type]])
    out.put("icmp_code", sp.rows[has_code], v.u8[st[has_code] + 1])


TRANSPORT_DECODERS = {TCP: decode_tcp, UDP: decode_udp, ICMP: decode_icmp, ICMPV6: decode_icmp}


# --- per frame (reference) -------------------------------------------------------------------------

def frame_tcp(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> None:
    """Decode one TCP header and its options into row; nothing follows."""
    import dpkt
    if claimed <= start:
        return None
    seg = claimed - start
    avail = end - start
    frag = bool(row.get("ip_mf"))       # a fragment may end anywhere: short is not malformed
    if seg < 20 and not frag:
        row.setdefault("malformed", R_TCP_SHORT)
    if avail < 4:
        return None
    row["sport"], row["dport"] = struct.unpack_from("!HH", data, start)
    if avail < 16:
        return None
    seq, ack, offflags, win = struct.unpack_from("!IIHH", data, start + 4)
    hl = (offflags >> 12) * 4
    if hl >= 20 and avail >= 20:
        t = dpkt.tcp.TCP(data[start:start + 20])
        seq, ack, win = t.seq, t.ack, t.win
        offflags = t._off_flags
    row["tcp_seq"] = seq
    row["tcp_hdr_len"] = hl
    if seg >= hl and not frag:
        row["tcp_len"] = seg - hl
    if hl < 20:
        row.setdefault("malformed", R_TCP_OFF)
        return None
    row.update(tcp_ack=ack, tcp_flags=offflags & 0x0FFF, tcp_win=win)
    if seg < hl and not frag:
        row.setdefault("malformed", R_TCP_LONG)
    _frame_options(data, start + 20, start + hl, end, row)
    return None


def _frame_options(data: bytes, p: int, hend: int, end: int, row: dict) -> None:
    """Walk TCP options with tshark's rules (every step advances, so the walk is bounded)."""
    sack_seen = False
    while p < hend and p < end:
        kind = data[p]
        if kind == 0:
            return
        if kind == 1:
            p += 1
            continue
        if p + 1 >= hend:
            row.setdefault("malformed", R_OPT_LENBYTE)
            return
        if p + 1 >= end:
            return
        size = data[p + 1]
        if size < 2:
            row.setdefault("malformed", R_OPT_SHORT)
            return
        if p + size > hend:
            row.setdefault("malformed", R_OPT_PAST)
            return
        if kind == 30 and size < 4:     # tshark throws reading the MPTCP subtype's fields
            row.setdefault("malformed", R_OPT_MPTCP)
            return
        whole = p + size <= end
        body = data[p + 2:min(p + size, end)]
        if kind == 2 and size == 4 and whole:
            row.setdefault("tcp_mss", int.from_bytes(body, "big"))
        elif kind == 3 and size == 3 and whole:
            row.setdefault("tcp_wscale", body[0])
        elif kind == 4:
            row["tcp_sack_perm"] = True
        elif kind == 8 and size == 10:
            if len(body) >= 4:
                row.setdefault("tcp_tsval", int.from_bytes(body[:4], "big"))
            if len(body) >= 8:
                row.setdefault("tcp_tsecr", int.from_bytes(body[4:8], "big"))
        elif kind == 5:
            blocks = [list(struct.unpack_from("!II", body, 8 * i)) for i in range(len(body) // 8)]
            if blocks and "tcp_sack" not in row:
                row["tcp_sack"] = blocks[:SACK_MAX_BLOCKS]
            first_sack = not sack_seen
            sack_seen = True
            if size == 2 or (size - 2) % 8:
                row.setdefault("malformed", R_OPT_SACK)
                if size < 10 and first_sack:    # tshark throws there, on the first SACK option only
                    return
        if not whole:
            return
        p += size


def frame_udp(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> None:
    """Decode one UDP header into row; nothing follows."""
    import dpkt
    if claimed <= start:
        return None
    seg = claimed - start
    avail = end - start
    frag = bool(row.get("ip_mf"))
    if seg < 8 and not frag:
        row.setdefault("malformed", R_UDP_SHORT)
    if avail >= 8:
        u = dpkt.udp.UDP(data[start:start + 8])
        sport, dport, ulen = u.sport, u.dport, u.ulen
    elif avail >= 4:
        sport, dport = struct.unpack_from("!HH", data, start)
        ulen = struct.unpack_from("!H", data, start + 4)[0] if avail >= 6 else None
    else:
        return None
    row["sport"], row["dport"] = sport, dport
    if ulen is None:
        return None
    row["udp_len"] = ulen
    if ulen < 8 and not (ulen == 0 and seg > 0xFFFF):
        row.setdefault("malformed", R_UDP_LEN)
    if ulen > seg and not frag:
        row.setdefault("malformed", R_UDP_PAST)
    return None


def _frame_icmp_header(data: bytes, start: int, end: int, claimed: int, row: dict, short: str,
                       type_from: int, code_from: int) -> None:
    """Decode one ICMP or ICMPv6 header (type, code) into row: each once `..._from` bytes are captured."""
    if claimed <= start:
        return None
    if claimed - start < 8 and not row.get("ip_mf"):
        row.setdefault("malformed", short)
    avail = end - start
    if avail >= type_from:
        row["icmp_type"] = data[start]
    if avail >= code_from:
        row["icmp_code"] = data[start + 1]
    return None


def frame_icmp(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> None:
    """Decode one ICMP header (type, code) into row; nothing follows."""
    return _frame_icmp_header(data, start, end, claimed, row, R_ICMP, 6, 6)  # tshark reads 6 bytes first


def frame_icmpv6(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> None:
    """Decode one ICMPv6 header (type, code) into row; nothing follows."""
    return _frame_icmp_header(data, start, end, claimed, row, R_ICMPV6, 1, 2)


TRANSPORT_FRAME_DECODERS = {TCP: frame_tcp, UDP: frame_udp, ICMP: frame_icmp, ICMPV6: frame_icmpv6}

__all__ = ["TRANSPORT_DECODERS", "TRANSPORT_FRAME_DECODERS"]
