"""Wired link layers: Ethernet (802.1Q/802.1ad/QinQ tags, LLC/SNAP), Linux SLL/SLL2, raw IP, null/loop.

Vectorized decoders take (buf, Span, ColumnBuilder) and return the Span of the network payload with
kind = its EtherType; per-frame decoders (`frame_*`) do the same for one frame with plain Python.

Rules shared by both (chosen to match tshark 4.0):
  * a header that does not fit before `claimed` is malformed; one that fits before `claimed` but not
    before `end` was cut by the snap length: its fields are null, not malformed;
  * up to 20 VLAN tags (TPID 0x8100, 0x88a8, 0x9100) are walked, as tshark does; a 21st is malformed;
  * Ethernet type/length <= 1500 is an 802.3 length: LLC follows, and LLC/SNAP with OUI 00-00-00 or
    00-00-f8 carries an EtherType; 1501..1535 is neither (no EtherType);
  * SLL/SLL2 protocol <= 1536 is a Linux protocol number (4 = 802.2 LLC), above it an EtherType;
    hatype 824 (netlink) carries no network layer; the source address is shown when its length is 6;
  * null (0): 4-byte AF in the capturing host's byte order, normalized as tshark does; values above
    1500 are EtherTypes; ff 03 starts PPP in HDLC framing (protocol 0x21 IPv4, 0x57 IPv6);
    loop (108): AF in network byte order. AF 2 = IPv4, 24/28/30 = IPv6.
"""
from __future__ import annotations

import struct

import numpy as np
# dpkt is imported inside the per-frame decoders that use it: the vectorized path never calls them, and
# importing dpkt costs ~0.1 s of every run's start-up

from parsers.columnar.columns import ColumnBuilder
from parsers.columnar.span import Span

ETH_IPV4 = 0x0800
ETH_IPV6 = 0x86DD
VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)
MAX_VLAN_TAGS = 20          # tshark stops at 20 nested tags ("Too many nested VLAN tags")
SNAP_ETHERTYPE_OUIS = (0x000000, 0x0000F8)
ARPHRD_NETLINK = 824
SLL_P_802_2 = 4
BSD_AF_INET = 2
BSD_AF_INET6 = (24, 28, 30)


# --- unaligned integer views: one fancy index per field -------------------------------------------

class ByteViews:
    """Views of a byte buffer as big-endian u16/u32/u64 (and little-endian u32) starting at every byte.

    Indexing a view with positions gathers whole fields in one pass; callers index only positions
    whose bytes they checked lie inside the record, so no clipping is needed.
    """

    def __init__(self, buf: np.ndarray):
        b = buf if buf.flags.c_contiguous else np.ascontiguousarray(buf)
        self.u8 = b
        self.be16 = _strided(b, ">u2")
        self.be32 = _strided(b, ">u4")
        self.be64 = _strided(b, ">u8")
        self.le32 = _strided(b, "<u4")

        self._voids: dict[int, np.ndarray] = {}

    def mac(self, pos: np.ndarray) -> np.ndarray:
        """Return the 48-bit big-endian value of the 6 bytes at each position (needs 8 bytes of buffer)."""
        return self.be64[pos] >> np.uint64(16)

    def window(self, pos: np.ndarray, width: int) -> "Window":
        """Return the `width` bytes at each position as one (n, width) matrix: a single gather.

        Callers pass only positions whose `width` bytes lie inside their record.
        """
        vv = self._voids.get(width)
        if vv is None:
            b = self.u8
            count = max(len(b) - width + 1, 0)
            vv = np.ndarray((count,), dtype=f"V{width}", buffer=b, offset=0, strides=(1,))
            self._voids[width] = vv
        return Window(vv[pos].view(np.uint8).reshape(len(pos), width))


class Window:
    """Header bytes of many rows, one row each; fields are strided views (big-endian) into it."""

    def __init__(self, m: np.ndarray):
        self.m = m
        self.n, self.width = m.shape

    def u8(self, off: int) -> np.ndarray:
        """Return the byte at offset off of every row."""
        return self.m[:, off]

    def _int(self, off: int, dtype: str) -> np.ndarray:
        if self.n == 0:
            return np.zeros(0, dtype)
        return np.ndarray((self.n,), dtype=dtype, buffer=self.m, offset=off, strides=(self.width,))

    def be16(self, off: int) -> np.ndarray:
        """Return the big-endian u16 at offset off of every row."""
        return self._int(off, ">u2")

    def be32(self, off: int) -> np.ndarray:
        """Return the big-endian u32 at offset off of every row."""
        return self._int(off, ">u4")

    def be64(self, off: int) -> np.ndarray:
        """Return the big-endian u64 at offset off of every row."""
        return self._int(off, ">u8")

    def mac(self, off: int) -> np.ndarray:
        """Return the 6 bytes at offset off as a 48-bit value (the row needs 8 bytes from off)."""
        return self.be64(off) >> np.uint64(16)


def _strided(b: np.ndarray, dtype: str) -> np.ndarray:
    size = np.dtype(dtype).itemsize
    if len(b) < size:
        return np.zeros(0, dtype)
    return np.ndarray((len(b) - size + 1,), dtype=dtype, buffer=b, offset=0, strides=(1,))


def views(buf: np.ndarray) -> ByteViews:
    """Return integer views of buf (cheap: no copy)."""
    return ByteViews(buf)


def put_index(rows: np.ndarray) -> np.ndarray | slice:
    """Return rows as a slice when they are one ascending run (column writes by slice are cheaper)."""
    n = len(rows)
    if n > 1024 and rows[-1] - rows[0] == n - 1 and bool(np.all(rows[1:] > rows[:-1])):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def short_rows(out: ColumnBuilder, span: Span, need: np.ndarray | int, reason: str) -> np.ndarray:
    """Return the mask of rows whose `need` bytes fit; the others are malformed if past `claimed`.

    Bytes missing before `claimed` were cut by the snap length: those rows are not malformed.
    """
    fit = span.start + need <= span.end
    if not fit.all():
        bad = ~fit & (span.start + need > span.claimed)
        out.malformed(span.rows[bad], reason)
    return fit


def with_header(out: ColumnBuilder, span: Span, need: int, reason: str) -> Span:
    """Return the rows of span whose `need` header bytes are captured (see short_rows for the rest)."""
    fit = short_rows(out, span, need, reason)
    return span if fit.all() else span.take(fit)


# --- Ethernet -------------------------------------------------------------------------------------

def decode_ethernet(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Return the network payload Span of Ethernet frames (kind = EtherType after tags / SNAP)."""
    sp = with_header(out, span, 14, "eth: frame shorter than its 14-byte header")
    v = views(buf)
    st = sp.start
    w = v.window(st, 14)
    at = put_index(sp.rows)
    out.put("eth_dst", at, w.mac(0))
    out.put("eth_src", at, w.mac(6))
    typ = w.be16(12).astype(np.int64)
    return _ethertype_walk(v, sp, typ, st + 14, out)


def _is_tag(typ: np.ndarray) -> np.ndarray:
    return (typ == 0x8100) | (typ == 0x88A8) | (typ == 0x9100)


def _ethertype_walk(v: ByteViews, sp: Span, typ: np.ndarray, pos: np.ndarray, out: ColumnBuilder) -> Span:
    """Walk VLAN tags and LLC/SNAP from a type field; write the link columns; return the payload Span.

    typ <= 1500 means an 802.3 length (LLC follows).
    """
    n = len(sp)
    pos = pos.astype(np.int64, copy=True)
    typ = typ.astype(np.int64, copy=True)
    end, claimed = sp.end, sp.claimed
    dead = np.zeros(n, dtype=bool)        # rows with no decodable payload
    act = np.flatnonzero(_is_tag(typ))
    if len(act):
        depth = np.zeros(n, dtype=np.int64)
        vid = np.zeros(n, dtype=np.int64)
        for i in range(MAX_VLAN_TAGS):
            p = pos[act]
            tci = p + 2 <= end[act]         # tshark shows the tag's id once its TCI is captured
            counted, pc = act[tci], p[tci]
            if i == 0:
                vid[counted] = v.be16[pc] & 0x0FFF
            depth[counted] += 1
            ok = p + 4 <= end[act]
            if not ok.all():
                gone = act[~ok]
                past = gone[p[~ok] + 4 > claimed[gone]]
                out.malformed(sp.rows[past], "vlan: frame ends inside a VLAN tag")
                dead[gone] = True
                act, p = act[ok], p[ok]
            typ[act] = v.be16[p + 2]
            pos[act] = p + 4
            act = act[_is_tag(typ[act])]
            if not len(act):
                break
        if len(act):
            out.malformed(sp.rows[act], f"vlan: more than {MAX_VLAN_TAGS} VLAN tags")
            dead[act] = True
        tagged = depth > 0
        out.put("vlan_id", sp.rows[tagged], vid[tagged])
        out.put("vlan_depth", sp.rows[tagged], depth[tagged])

    llc = np.flatnonzero((typ <= 1500) & ~dead)
    if len(llc):
        dead[llc] = True                    # unless LLC/SNAP carries an EtherType
        cand = llc[pos[llc] + 8 <= end[llc]]
        w = v.be64[pos[cand]]
        head = (w >> np.uint64(16)).astype(np.int64)
        snap = (head >> 24 == 0xAAAA03) & np.isin(head & 0xFFFFFF, SNAP_ETHERTYPE_OUIS)
        cand = cand[snap]
        typ[cand] = (w[snap] & np.uint64(0xFFFF)).astype(np.int64)
        pos[cand] += 8
        dead[cand] = False
    has_type = typ >= 1536
    out.put("eth_type", put_index(sp.rows) if has_type.all() else sp.rows[has_type],
            typ if has_type.all() else typ[has_type])
    keep = has_type & ~dead
    if keep.all():
        return sp.moved(pos, kind=typ)
    s = sp.take(keep)
    return s.moved(pos[keep], kind=typ[keep])


# --- Linux cooked captures -------------------------------------------------------------------------

def decode_sll(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Return the network payload Span of Linux SLL (113) frames."""
    sp = with_header(out, span, 16, "sll: frame shorter than its 16-byte header")
    v = views(buf)
    st = sp.start
    hatype = v.be16[st + 2].astype(np.int64)
    halen = v.be16[st + 4].astype(np.int64)
    proto = v.be16[st + 14].astype(np.int64)
    return _sll_payload(v, sp, hatype, halen, st + 6, proto, st + 16, out)


def decode_sll2(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Return the network payload Span of Linux SLL2 (276) frames."""
    sp = with_header(out, span, 20, "sll2: frame shorter than its 20-byte header")
    v = views(buf)
    st = sp.start
    proto = v.be16[st].astype(np.int64)
    hatype = v.be16[st + 8].astype(np.int64)
    halen = v.u8[st + 11].astype(np.int64)
    return _sll_payload(v, sp, hatype, halen, st + 12, proto, st + 20, out)


def _sll_payload(v: ByteViews, sp: Span, hatype, halen, addr_pos, proto, pos, out: ColumnBuilder) -> Span:
    netlink = hatype == ARPHRD_NETLINK      # a netlink message, not a link-layer header: no columns
    six = (halen == 6) & ~netlink
    out.put("eth_src", sp.rows[six], v.mac(addr_pos[six]))
    # Linux protocol numbers (<= 1536) other than 802.2 carry nothing we decode; 802.2 goes to LLC.
    typ = np.where(proto == SLL_P_802_2, 0, proto)
    keep = ~netlink & ((proto > 1536) | (proto == SLL_P_802_2))
    if not keep.all():
        sp, typ, pos = sp.take(keep), typ[keep], pos[keep]
    return _ethertype_walk(v, sp, typ, pos, out)


# --- raw IP, null, loop ------------------------------------------------------------------------------

def _known_network(sp: Span, kind: np.ndarray, header: int) -> Span:
    """Return the rows whose network kind is known (not 0), moved past their `header`-byte link header."""
    keep = kind != 0
    if not keep.all():
        sp, kind = sp.take(keep), kind[keep]
    return sp.moved(sp.start + header if header else sp.start, kind=kind)


def decode_raw(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Return the IP Span of raw-IP link types (12, 14, 101, 228, 229): kind from the version nibble."""
    sp = with_header(out, span, 1, "raw: empty frame")
    nib = (views(buf).u8[sp.start] >> 4).astype(np.int64)
    kind = np.where(nib == 4, ETH_IPV4, np.where(nib == 6, ETH_IPV6, 0))
    # LINKTYPE_IPV4 goes to the IPv4 decoder, which hands version 6 on to IPv6 (so the nibble decides);
    # LINKTYPE_IPV6 promises IPv6: another version there is a broken IPv6 header, as tshark says.
    kind = np.where(sp.kind == 228, ETH_IPV4, np.where(sp.kind == 229, ETH_IPV6, kind))
    return _known_network(sp, kind, 0)


def _af_kind(af: np.ndarray) -> np.ndarray:
    return np.where(af == BSD_AF_INET, ETH_IPV4, np.where(np.isin(af, BSD_AF_INET6), ETH_IPV6, 0))


def decode_null(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Return the network Span of BSD loopback (null, 0) frames: host-order AF or an EtherType."""
    sp = with_header(out, span, 4, "null: frame shorter than its 4-byte header")
    v = views(buf)
    st = sp.start
    h = v.le32[st].astype(np.int64)
    kind = _null_kind(h)
    ppp = v.be16[st] == 0xFF03            # PPP in HDLC framing: address, control, protocol
    if ppp.any():
        kind[ppp] = _ppp_kind(v.be16[st[ppp] + 2].astype(np.int64))
    return _known_network(sp, kind, 4)


PPP_IPV4, PPP_IPV6 = 0x0021, 0x0057


def _ppp_kind(proto: np.ndarray) -> np.ndarray:
    return np.where(proto == PPP_IPV4, ETH_IPV4, np.where(proto == PPP_IPV6, ETH_IPV6, 0))


def _null_kind(h: np.ndarray) -> np.ndarray:
    """Return the EtherType kind of null headers read little-endian, normalized as tshark does."""
    upper = (h & 0xFFFF0000) != 0
    # An AF in the upper 16 bits of a correctly ordered word (IRIX style), else a byte-swapped word.
    irix = upper & ((h & 0xFF000000) == 0) & ((h & 0x00FF0000) < 0x00060000)
    swapped = ((h & 0xFF) << 24) | ((h & 0xFF00) << 8) | ((h >> 8) & 0xFF00) | ((h >> 24) & 0xFF)
    low_swap = ~upper & ((h & 0xFF) == 0) & ((h & 0xFF00) < 0x0600)
    val = np.where(irix, h >> 16, np.where(upper, swapped, np.where(low_swap, (h >> 8) & 0xFF, h)))
    return np.where(val > 1500, val & 0xFFFF, _af_kind(val))


def decode_loop(buf: np.ndarray, span: Span, out: ColumnBuilder) -> Span:
    """Return the network Span of OpenBSD loop (108) frames: AF in network byte order."""
    sp = with_header(out, span, 4, "loop: frame shorter than its 4-byte header")
    kind = _af_kind(views(buf).be32[sp.start].astype(np.int64))
    return _known_network(sp, kind, 4)


LINK_DECODERS = {1: decode_ethernet, 113: decode_sll, 276: decode_sll2, 101: decode_raw, 228: decode_raw,
                 229: decode_raw, 12: decode_raw, 14: decode_raw, 0: decode_null, 108: decode_loop}


# --- per frame (reference) -------------------------------------------------------------------------

Next = tuple[int, int, int, int] | None


def _missing(row: dict, start: int, need: int, end: int, claimed: int, reason: str) -> bool:
    """Return True if `need` bytes at start are not captured; mark malformed if not even claimed."""
    if start + need <= end:
        return False
    if start + need > claimed:
        row.setdefault("malformed", reason)
    return True


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def frame_ethernet(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
    """Decode one Ethernet header into row; return (EtherType, start, end, claimed) of the payload."""
    if _missing(row, start, 14, end, claimed, "eth: frame shorter than its 14-byte header"):
        return None
    row["eth_dst"] = _mac(data[start:start + 6])
    row["eth_src"] = _mac(data[start + 6:start + 12])
    (etype,) = struct.unpack_from("!H", data, start + 12)
    return _frame_types(data, etype, start + 14, end, claimed, row)


def _frame_types(data: bytes, etype: int, pos: int, end: int, claimed: int, row: dict) -> Next:
    """Walk VLAN tags and LLC/SNAP after a type field; etype <= 1500 is an 802.3 length."""
    import dpkt
    depth = 0
    while etype in VLAN_TPIDS:
        if depth == MAX_VLAN_TAGS:
            row.setdefault("malformed", f"vlan: more than {MAX_VLAN_TAGS} VLAN tags")
            row["eth_type"] = etype
            return None
        if pos + 2 <= end:
            if depth == 0:
                row["vlan_id"] = int.from_bytes(data[pos:pos + 2], "big") & 0x0FFF
            row["vlan_depth"] = depth + 1
        if _missing(row, pos, 4, end, claimed, "vlan: frame ends inside a VLAN tag"):
            row["eth_type"] = etype
            return None
        tag = dpkt.ethernet.VLANtag8021Q(data[pos:pos + 4])
        depth += 1
        etype = tag.type
        pos += 4
    if etype <= 1500:
        llc = data[pos:pos + 8] if pos + 8 <= end else b""
        if len(llc) < 8 or llc[:3] != b"\xaa\xaa\x03":
            return None
        if int.from_bytes(llc[3:6], "big") not in SNAP_ETHERTYPE_OUIS:
            return None
        etype = int.from_bytes(llc[6:8], "big")
        pos += 8
    if etype < 1536:
        return None
    row["eth_type"] = etype
    return etype, pos, end, claimed


def frame_sll(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
    """Decode one Linux SLL header into row; return the payload's (EtherType, start, end, claimed)."""
    import dpkt
    if _missing(row, start, 16, end, claimed, "sll: frame shorter than its 16-byte header"):
        return None
    h = dpkt.sll.SLL(data[start:start + 16])
    return _frame_sll(data, h.hrd, h.hlen, h.hdr, h.ethtype, start + 16, end, claimed, row)


def frame_sll2(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
    """Decode one Linux SLL2 header into row; return the payload's (EtherType, start, end, claimed)."""
    import dpkt
    if _missing(row, start, 20, end, claimed, "sll2: frame shorter than its 20-byte header"):
        return None
    h = dpkt.sll2.SLL2(data[start:start + 20])
    return _frame_sll(data, h.hrd, h.hlen, h.hdr, h.ethtype, start + 20, end, claimed, row)


def _frame_sll(data, hatype, halen, addr, proto, pos, end, claimed, row) -> Next:
    if hatype == ARPHRD_NETLINK:
        return None
    if halen == 6:
        row["eth_src"] = _mac(addr[:6])
    if proto == SLL_P_802_2:
        return _frame_types(data, 0, pos, end, claimed, row)
    if proto <= 1536:
        return None
    return _frame_types(data, proto, pos, end, claimed, row)


def frame_raw(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict,
              linktype: int = 101) -> Next:
    """Return the IP payload of a raw-IP frame, kind from the version nibble."""
    if _missing(row, start, 1, end, claimed, "raw: empty frame"):
        return None
    kind = {228: ETH_IPV4, 229: ETH_IPV6}.get(linktype) or {4: ETH_IPV4, 6: ETH_IPV6}.get(data[start] >> 4)
    return (kind, start, end, claimed) if kind else None


def _raw_for(linktype: int):
    def frame(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
        return frame_raw(data, start, end, claimed, cut, row, linktype)
    frame.__doc__ = f"Return the IP payload of a LINKTYPE {linktype} frame."
    return frame


def _af(af: int) -> int | None:
    if af == BSD_AF_INET:
        return ETH_IPV4
    return ETH_IPV6 if af in BSD_AF_INET6 else None


def frame_null(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
    """Return the network payload of a null (BSD loopback) frame."""
    if _missing(row, start, 4, end, claimed, "null: frame shorter than its 4-byte header"):
        return None
    if data[start:start + 2] == b"\xff\x03":
        kind = {PPP_IPV4: ETH_IPV4, PPP_IPV6: ETH_IPV6}.get(int.from_bytes(data[start + 2:start + 4], "big"))
        return (kind, start + 4, end, claimed) if kind else None
    (h,) = struct.unpack_from("<I", data, start)
    if h & 0xFFFF0000:
        if not h & 0xFF000000 and (h & 0x00FF0000) < 0x00060000:
            h >>= 16
        else:
            h = int.from_bytes(h.to_bytes(4, "little"), "big")
    elif not h & 0xFF and (h & 0xFF00) < 0x0600:
        h >>= 8
    kind = (h & 0xFFFF) if h > 1500 else _af(h)
    return (kind, start + 4, end, claimed) if kind else None


def frame_loop(data: bytes, start: int, end: int, claimed: int, cut: bool, row: dict) -> Next:
    """Return the network payload of an OpenBSD loop frame."""
    if _missing(row, start, 4, end, claimed, "loop: frame shorter than its 4-byte header"):
        return None
    kind = _af(struct.unpack_from("!I", data, start)[0])
    return (kind, start + 4, end, claimed) if kind else None


LINK_FRAME_DECODERS = {1: frame_ethernet, 113: frame_sll, 276: frame_sll2, 101: _raw_for(101),
                       228: _raw_for(228), 229: _raw_for(229), 12: _raw_for(12), 14: _raw_for(14),
                       0: frame_null, 108: frame_loop}

__all__ = ["LINK_DECODERS", "LINK_FRAME_DECODERS", "ByteViews", "views", "short_rows", "with_header"]
