"""IPv4 and IPv6 (with extension headers): network columns, and the transport Span for the next layer.

The transport Span has kind = IP protocol (IPv6: after extension headers), start at the transport
header, claimed = where the IP length says the datagram ends (never past the frame's claimed end) and
end = min(captured end, claimed). Rules shared by the vectorized and per-frame decoders (tshark 4.0):
  * EtherType 0x0800 carrying version 6 is decoded as IPv6 (tshark's "ip" dissector does the same);
  * IPv4 total length 0 / IPv6 payload length 0 without a jumbo option: the length comes from the
    frame (TSO, BIG TCP); ip_len stays 0 as the header says. (tshark 4.0 does this for IPv4 only.)
  * IPv4 fields are shown in header order up to the first byte not captured; the destination address
    comes after the options (tshark dissects options first), so it is null if they are cut;
  * non-first fragments (offset > 0) carry no transport decode; first fragments do;
  * IPv6 extension headers walked: hop-by-hop 0, routing 43, fragment 44, destination options 60,
    AH 51 (mobility 135 is the last header, as in tshark). An option inside a hop-by-hop or
    destination options header that runs past the payload is malformed (tshark reads options
    where their lengths say, even past the header's end, and throws only there).
    ip_proto is the last Next Header value read; ip_hdr_len is set only when the walk reached a
    protocol that is not an extension header (or a non-first fragment).
"""
from __future__ import annotations

import ipaddress
import struct

import numpy as np
# dpkt is imported inside the per-frame decoders that use it: the vectorized path never calls them, and
# importing dpkt costs ~0.1 s of every run's start-up

from parsers.columnar.columns import ColumnBuilder
from parsers.layers.link import ByteViews, Window, put_index, views, with_header
from parsers.columnar.span import Span

# Mobility (135) is not walked: its payload protocol must be 59 (RFC 6275) and tshark treats it as
# the upper layer, so ip_proto = 135 says what the packet is.
EXT_HEADERS = (0, 43, 44, 51, 60)
OPTION_HEADERS = (0, 60)    # hop-by-hop and destination options: TLV options inside
FRAGMENT = 44
AH = 51
VECTOR_EXT_STEPS = 8        # longer IPv6 extension chains go to the per-frame decoder
JUMBO_OPTION = 0xC2

_U64 = np.uint64


# --- IPv4 -------------------------------------------------------------------------------------------

def decode_ipv4(buf: np.ndarray, span: Span, out: ColumnBuilder) -> list[Span]:
    """Return the transport Spans of IPv4 packets (and of IPv6 packets sent with EtherType 0x0800)."""
    sp = with_header(out, span, 1, "ipv4: no header")
    v = views(buf)
    b0 = v.u8[sp.start].astype(np.int64)
    ver = b0 >> 4
    result: list[Span] = []
    if (ver == 6).any():
        result.append(decode_ipv6(buf, sp.take(ver == 6), out))
    bad = (ver != 4) & (ver != 6)
    if bad.any():
        out.put("ip_version", sp.rows[bad], ver[bad])
        out.malformed(sp.rows[bad], "ipv4: version field is not 4")
    is4 = ver == 4
    if not is4.all():
        sp, b0 = sp.take(is4), b0[is4]
    result.append(_ipv4(v, sp, (b0 & 0xF) * 4, out))
    return result


def _ipv4(v: ByteViews, sp: Span, ihl: np.ndarray, out: ColumnBuilder) -> Span:
    out.put("ip_version", sp.rows, 4)
    out.put("ip_hdr_len", sp.rows, ihl)
    bogus = ihl < 20
    out.malformed(sp.rows[bogus], "ipv4: header length < 20")
    partial = ~bogus & (sp.start + ihl > sp.end)
    out.defer(sp.rows[partial])     # tshark shows the captured fields one by one: per-frame decoder
    ok = ~bogus & ~partial
    if not ok.all():
        sp, ihl = sp.take(ok), ihl[ok]
    h = v.window(sp.start, 20)
    at = put_index(sp.rows)
    tos = h.u8(1)
    tot = h.be16(2).astype(np.int64)
    out.put("ip_dscp", at, tos >> 2)
    out.put("ip_ecn", at, tos & 3)
    out.put("ip_len", at, tot)
    short = (tot != 0) & (tot < ihl)
    if short.any():
        out.malformed(sp.rows[short], "ipv4: total length < header length")
        keep = ~short
        sp, ihl, tot, h = sp.take(keep), ihl[keep], tot[keep], Window(h.m[keep])
        at = put_index(sp.rows)
    st = sp.start
    ff = h.be16(6).astype(np.int64)
    proto = h.u8(9).astype(np.int64)
    out.put("ip_id", at, h.be16(4))
    out.put("ip_df", at, (ff & 0x4000) != 0)
    out.put("ip_mf", at, (ff & 0x2000) != 0)
    out.put("ip_frag_offset", at, (ff & 0x1FFF) * 8)
    out.put("ip_ttl", at, h.u8(8))
    out.put("ip_proto", at, proto)
    out.put("ip_checksum", at, h.be16(10))
    out.put_ip("ip_src", at, 0, h.be32(12).astype(_U64), 4)
    out.put_ip("ip_dst", at, 0, h.be32(16).astype(_U64), 4)
    ip_end = np.where(tot == 0, sp.claimed, st + tot)
    ip_end = _bound_claimed(out, sp, ip_end, "ipv4: total length past end of frame")
    first = (ff & 0x1FFF) == 0
    if not first.all():
        sp, ihl, ip_end, proto = sp.take(first), ihl[first], ip_end[first], proto[first]
    return Span(sp.rows, sp.start + ihl, np.minimum(sp.end, ip_end), ip_end, proto, sp.cut)


def _bound_claimed(out: ColumnBuilder, sp: Span, ip_end: np.ndarray, reason: str) -> np.ndarray:
    """Mark rows whose IP length runs past the frame; return the IP end bounded by the frame's claim."""
    over = ip_end > sp.claimed
    if over.any():
        out.malformed(sp.rows[over], reason)
        return np.minimum(ip_end, sp.claimed)
    return ip_end


# --- IPv6 -------------------------------------------------------------------------------------------

def decode_ipv6(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Return the transport Span of IPv6 packets, after the extension headers."""
    sp = with_header(out, span, 1, "ipv6: no header")
    v = views(buf)
    ver = (v.u8[sp.start] >> 4).astype(np.int64)
    bad = ver != 6
    if bad.any():
        out.put("ip_version", sp.rows[bad], ver[bad])
        out.malformed(sp.rows[bad], "ipv6: version field is not 6")
        sp = sp.take(~bad)
    partial = sp.start + 40 > sp.end
    st = sp.start
    nxt = np.zeros(len(sp), np.int64)
    plen = np.zeros(len(sp), np.int64)
    ok = ~partial
    nxt[ok] = v.u8[st[ok] + 6]
    plen[ok] = v.be16[st[ok] + 4]
    jumbo = ok & (plen == 0) & (nxt == 0)   # a jumbo option may give the length: per-frame decoder
    out.defer(sp.rows[partial | jumbo])
    ok &= ~jumbo
    if not ok.all():
        sp, nxt, plen = sp.take(ok), nxt[ok], plen[ok]
        st = sp.start
    h = v.window(st, 40)
    at = put_index(sp.rows)
    tc = (h.be16(0) >> 4) & 0xFF
    out.put("ip_version", at, 6)
    out.put("ip_dscp", at, tc >> 2)
    out.put("ip_ecn", at, tc & 3)
    out.put("ip_ttl", at, h.u8(7))
    out.put("ip_len", at, np.where(plen == 0, 0, plen + 40))
    out.put_ip("ip_src", at, h.be64(8), h.be64(16), 6)
    out.put_ip("ip_dst", at, h.be64(24), h.be64(32), 6)
    ip_end = np.where(plen == 0, sp.claimed, st + 40 + plen)
    ip_end = _bound_claimed(out, sp, ip_end, "ipv6: payload length past end of frame")
    return _walk_ext(v, sp, nxt, ip_end, out)


def _walk_ext(v: ByteViews, sp: Span, proto: np.ndarray, ip_end: np.ndarray, out: ColumnBuilder) -> Span:
    """Walk IPv6 extension headers; write proto/fragment/header-length columns; return the transport Span."""
    n = len(sp)
    st = sp.start
    pos = st + 40
    cend = np.minimum(sp.end, ip_end)
    stopped = np.zeros(n, bool)     # walk ended inside a header (cut or malformed): no transport
    nonfirst = np.zeros(n, bool)    # non-first fragment: header length known, no transport
    act = np.flatnonzero(np.isin(proto, EXT_HEADERS))
    deferred = np.zeros(n, bool)
    for _ in range(VECTOR_EXT_STEPS):
        opts = np.isin(proto[act], OPTION_HEADERS)    # options are checked by the per-frame decoder
        if opts.any():
            deferred[act[opts]] = True
            act = act[~opts]
        if not len(act):
            break
        p = pos[act]
        ok = p + 2 <= cend[act]
        if not ok.all():
            gone = act[~ok]
            one = gone[p[~ok] + 1 <= cend[gone]]       # its Next Header byte is there: tshark shows it
            proto[one] = v.u8[pos[one]]
            past = gone[p[~ok] + 2 > ip_end[gone]]
            out.malformed(sp.rows[past], "ipv6: extension header past end of payload")
            stopped[gone] = True
            act, p = act[ok], p[ok]
        kind = proto[act]
        ln = v.u8[p + 1].astype(np.int64)
        size = np.where(kind == FRAGMENT, 8, np.where(kind == AH, (ln + 2) * 4, (ln + 1) * 8))
        proto[act] = v.u8[p]
        fr = (kind == FRAGMENT) & (p + 8 <= cend[act])
        if fr.any():
            fa, fp = act[fr], p[fr]
            fo = v.be16[fp + 2].astype(np.int64)
            out.put("ip_frag_offset", sp.rows[fa], fo & 0xFFF8)
            out.put("ip_mf", sp.rows[fa], (fo & 1) != 0)
            out.put("ip_id", sp.rows[fa], v.be32[fp + 4])
            nonfirst[fa[(fo & 0xFFF8) != 0]] = True
        over = p + size > ip_end[act]
        out.malformed(sp.rows[act[over]], "ipv6: extension header past end of payload")
        done = p + size > cend[act]
        stopped[act[done]] = True
        pos[act] = p + size
        act = act[~done]
        act = act[~nonfirst[act] & np.isin(proto[act], EXT_HEADERS)]
    deferred[act] = True
    out.defer(sp.rows[deferred])
    out.put("ip_proto", sp.rows, proto)
    known = ~stopped
    out.put("ip_hdr_len", sp.rows[known], (pos - st)[known])
    keep = known & ~nonfirst & ~deferred
    if not keep.all():
        sp, pos, ip_end, proto, cend = sp.take(keep), pos[keep], ip_end[keep], proto[keep], cend[keep]
    return Span(sp.rows, pos, cend, ip_end, proto, sp.cut)


NET_DECODERS = {0x0800: decode_ipv4, 0x86DD: decode_ipv6}


# --- per frame (reference) -------------------------------------------------------------------------

Next = tuple[int, int, int, int] | None


def _stop(row: dict, pos: int, claimed: int, reason: str) -> None:
    """A field at pos is not captured: malformed if the frame claims no byte there either."""
    if pos > claimed:
        row.setdefault("malformed", reason)


def frame_ipv4(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
    """Decode one IPv4 header into row; return (protocol, start, end, claimed) of the transport layer."""
    import dpkt
    if start + 1 > end:
        _stop(row, start + 1, claimed, "ipv4: no header")
        return None
    version = data[start] >> 4
    if version == 6:
        return frame_ipv6(data, start, end, claimed, cut, row)
    row["ip_version"] = version
    if version != 4:
        row.setdefault("malformed", "ipv4: version field is not 4")
        return None
    ihl = (data[start] & 0x0F) * 4
    row["ip_hdr_len"] = ihl
    if ihl < 20:
        row.setdefault("malformed", "ipv4: header length < 20")
        return None
    if start + ihl > end:
        _ipv4_partial(data, start, end, claimed, ihl, row)
        return None
    ip = dpkt.ip.IP(data[start:start + ihl])    # header bytes only: dpkt leaves the payload empty
    row["ip_dscp"], row["ip_ecn"] = ip.tos >> 2, ip.tos & 3
    row["ip_len"] = ip.len
    if ip.len != 0 and ip.len < ihl:
        row.setdefault("malformed", "ipv4: total length < header length")
        return None
    row.update(ip_id=ip.id, ip_df=bool(ip.df), ip_mf=bool(ip.mf), ip_frag_offset=ip.offset * 8,
               ip_ttl=ip.ttl, ip_proto=ip.p, ip_checksum=ip.sum,
               ip_src=str(ipaddress.IPv4Address(ip.src)), ip_dst=str(ipaddress.IPv4Address(ip.dst)))
    ip_end = start + ip.len if ip.len else claimed
    if ip_end > claimed:
        row.setdefault("malformed", "ipv4: total length past end of frame")
        ip_end = claimed
    if ip.offset:
        return None
    return ip.p, start + ihl, min(end, ip_end), ip_end


def _ipv4_partial(data: bytes, start: int, end: int, claimed: int, ihl: int, row: dict) -> None:
    """Fill the fields of an IPv4 header cut short, in header order, as tshark shows them."""
    def field(off: int, size: int):
        if start + off + size > end:
            _stop(row, start + off + size, claimed, "ipv4: header past end of frame")
            return None
        return int.from_bytes(data[start + off:start + off + size], "big")

    tos = field(1, 1)
    if tos is None:
        return
    row["ip_dscp"], row["ip_ecn"] = tos >> 2, tos & 3
    tot = field(2, 2)
    if tot is None:
        return
    row["ip_len"] = tot
    if tot != 0 and tot < ihl:
        row.setdefault("malformed", "ipv4: total length < header length")
        return
    for col, off, size in (("ip_id", 4, 2), ("ip_flags", 6, 2), ("ip_ttl", 8, 1), ("ip_proto", 9, 1),
                           ("ip_checksum", 10, 2), ("ip_src", 12, 4)):
        val = field(off, size)
        if val is None:
            return
        if col == "ip_flags":
            row.update(ip_df=bool(val & 0x4000), ip_mf=bool(val & 0x2000), ip_frag_offset=(val & 0x1FFF) * 8)
        elif col == "ip_src":
            row["ip_src"] = str(ipaddress.IPv4Address(val))
        else:
            row[col] = val
    # the options are cut (the header is partial): tshark adds the destination after them
    _stop(row, start + ihl, claimed, "ipv4: header past end of frame")


def frame_ipv6(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
    """Decode one IPv6 header and its extension headers into row; return the transport layer's place."""
    import dpkt
    if start + 1 > end:
        _stop(row, start + 1, claimed, "ipv6: no header")
        return None
    version = data[start] >> 4
    row["ip_version"] = version
    if version != 6:
        row.setdefault("malformed", "ipv6: version field is not 6")
        return None
    if start + 40 > end:
        _ipv6_partial(data, start, end, claimed, row)
        return None
    vfc, plen, nxt, hlim = struct.unpack_from("!IHBB", data, start)
    tc = (vfc >> 20) & 0xFF
    row.update(ip_dscp=tc >> 2, ip_ecn=tc & 3, ip_ttl=hlim,
               ip_src=str(ipaddress.IPv6Address(data[start + 8:start + 24])),
               ip_dst=str(ipaddress.IPv6Address(data[start + 24:start + 40])))
    row["ip_len"] = plen + 40 if plen else 0
    ip_end = start + 40 + plen if plen else claimed
    if plen == 0 and nxt == 0:
        jumbo = _jumbo(data, start + 40, min(end, claimed))
        if jumbo is not None:
            if jumbo <= 0xFFFF:
                row["ip_proto"] = nxt
                row.setdefault("malformed", "ipv6: jumbo payload length <= 65535")
                return None
            row["ip_len"] = min(jumbo + 40, 0xFFFFFFFF)
            ip_end = start + 40 + jumbo
        elif _hbh_captured(data, start + 40, end):
            row["ip_proto"] = nxt
            row.setdefault("malformed", "ipv6: payload length 0 without a jumbo option")
            return None
    if ip_end > claimed:
        row.setdefault("malformed", "ipv6: payload length past end of frame")
        ip_end = claimed
    cend = min(end, ip_end)
    pos = start + 40
    proto = nxt
    while proto in EXT_HEADERS:     # each header is at least 8 bytes long: bounded by the frame
        if pos + 2 > cend:
            _stop(row, pos + 2, ip_end, "ipv6: extension header past end of payload")
            row["ip_proto"] = data[pos] if pos + 1 <= cend else proto
            return None
        kind, proto, hlen = proto, data[pos], data[pos + 1]
        size = 8 if kind == FRAGMENT else (hlen + 2) * 4 if kind == AH else (hlen + 1) * 8
        first = True
        if kind == FRAGMENT and pos + 8 <= cend:
            fh = dpkt.ip6.IP6FragmentHeader(data[pos:pos + 8])
            row.update(ip_frag_offset=fh.frag_off * 8, ip_mf=bool(fh.m_flag), ip_id=fh.id)
            first = fh.frag_off == 0
        if pos + size > cend:
            _stop(row, pos + size, ip_end, "ipv6: extension header past end of payload")
            row["ip_proto"] = proto
            return None
        if kind in OPTION_HEADERS:
            reach = _options_reach(data, pos + 2, pos + size, cend)
            if reach > cend:
                _stop(row, reach, ip_end, "ipv6: option past end of payload")
                row["ip_proto"] = proto
                return None
        pos += size
        if not first:
            row.update(ip_proto=proto, ip_hdr_len=pos - start)
            return None
    row.update(ip_proto=proto, ip_hdr_len=pos - start)
    return proto, pos, cend, ip_end


def _ipv6_partial(data: bytes, start: int, end: int, claimed: int, row: dict) -> None:
    """Fill the fields of an IPv6 fixed header cut short, in header order."""
    avail = end - start
    if avail >= 4:
        tc = (int.from_bytes(data[start:start + 4], "big") >> 20) & 0xFF
        row.update(ip_dscp=tc >> 2, ip_ecn=tc & 3)
    if avail >= 7:      # tshark reads payload length and next header together
        plen = int.from_bytes(data[start + 4:start + 6], "big")
        row["ip_len"] = plen + 40 if plen else 0
        row["ip_proto"] = data[start + 6]
        if data[start + 6] not in EXT_HEADERS:
            row["ip_hdr_len"] = 40
    if avail >= 8:
        row["ip_ttl"] = data[start + 7]
    if avail >= 24:
        row["ip_src"] = str(ipaddress.IPv6Address(data[start + 8:start + 24]))
    _stop(row, start + 40, claimed, "ipv6: header past end of frame")


def _options_reach(data: bytes, p: int, hend: int, cend: int) -> int:
    """Return how far the TLV options starting in [p, hend) reach (at most one byte past cend).

    tshark reads each option where its length says, even past the header's end: only running past
    the captured bytes or the payload stops the decoding.
    """
    reach = p
    while p < hend:                  # every step advances: bounded by the header length
        if p >= cend:
            return p + 1
        if data[p] == 0:
            p += 1
            continue
        if p + 1 >= cend:
            return p + 2
        p += 2 + data[p + 1]
        reach = max(reach, p)
    return reach


def _hbh_captured(data: bytes, pos: int, end: int) -> bool:
    return pos + 2 <= end and pos + (data[pos + 1] + 1) * 8 <= end


def _jumbo(data: bytes, pos: int, end: int) -> int | None:
    """Return the Jumbo Payload length from a captured hop-by-hop header at pos, or None."""
    if not _hbh_captured(data, pos, end):
        return None
    hend = pos + (data[pos + 1] + 1) * 8
    p = pos + 2
    while p < hend:                  # every step advances: bounded by the header length
        opt = data[p]
        if opt == 0:
            p += 1
            continue
        if p + 2 > hend:
            return None
        olen = data[p + 1]
        if opt == JUMBO_OPTION and olen == 4 and p + 6 <= hend:
            return int.from_bytes(data[p + 2:p + 6], "big")
        p += 2 + olen
    return None


NET_FRAME_DECODERS = {0x0800: frame_ipv4, 0x86DD: frame_ipv6}

__all__ = ["NET_DECODERS", "NET_FRAME_DECODERS", "decode_ipv4", "decode_ipv6", "frame_ipv4", "frame_ipv6"]
