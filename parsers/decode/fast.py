"""The vectorized decoder: a chunk of records in, an Arrow table in the packet schema out."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.ma  # noqa: F401 - np.unique imports it at its first call (~18 ms), i.e. inside a read
import pyarrow as pa

from parsers.columnar import accel
from parsers.columnar.columns import IP_COLUMNS, MAC_COLUMNS, ColumnBuilder, Projection
from parsers.columnar.span import KIND_DOT11, Span, concat, handed_on
from parsers.decode import registry
from parsers.decode.decrypt import KEY_KINDS, MIC_TEXTS, Plain, PlainChunk
from parsers.decode.reference import decode_record
from parsers.formats.records import RecordChunk
from parsers.layers.dot11 import WINDOW as DOT11_WINDOW
from parsers.layers.dot11 import decode_plain_body
from parsers.layers.radiotap import gather_ahead

# The iface column is UInt16 (parsers.schema); the pcapng reader describes at most that many
# interfaces, and a record with a larger id from any container is marked here, never wrapped.
IFACE_MAX = 0xFFFF
IFACE_TOO_LARGE = f"record: interface id above {IFACE_MAX}, beyond the iface column (UInt16); iface left null"


def iface_unfit(iface: np.ndarray) -> np.ndarray | None:
    """Return a mask of the rows whose interface id does not fit the iface column, or None if all do."""
    if not len(iface) or (iface.max() <= IFACE_MAX and iface.min() >= 0):
        return None
    return (iface > IFACE_MAX) | (iface < 0)


def _guarded(fn, buf: np.ndarray, span: Span, out: ColumnBuilder, layer: str) -> Span | None:
    """Run one layer decoder; a bug in it marks its rows malformed instead of killing the file."""
    try:
        return fn(buf, span, out)
    except Exception as exc:  # noqa: BLE001 - untrusted input must never surface a traceback
        out.malformed(span.rows, f"internal error in {layer} decoder: {type(exc).__name__}: {exc}")
        return None


def _dispatch(buf, span: Span, table: dict, out: ColumnBuilder, layer: str) -> list[Span]:
    """Run the decoder registered for each distinct kind in the span; return what they hand on."""
    nxt: list[Span] = []
    if not len(span):
        return nxt
    lo, hi = int(span.kind.min()), int(span.kind.max())
    for kind in [lo] if lo == hi else np.unique(span.kind).tolist():
        fn = table.get(int(kind))
        if fn is None:
            continue
        part = span if lo == hi else span.take(span.kind == kind)
        nxt += handed_on(_guarded(fn, buf, part, out, f"{layer} {kind:#x}"))
    return nxt


_RAW_DOT11 = 105    # the link type whose link decoder is the 802.11 decoder itself


def decode_chunk(chunk: RecordChunk, columns: Sequence[str] | Projection | None = None,
                 layouts: Counter | None = None, plain: dict[int, Plain] | None = None,
                 dictionary: bool = False) -> tuple[pa.Table, int]:
    """Return the chunk decoded as an Arrow table, and how many rows went to the reference decoder.

    `dictionary`: string columns as dictionary arrays (ColumnBuilder.to_arrow), else string views.

    `plain` ({row: Plain}, from parsers.decode.decrypt.ChunkDecryptor) gives the decryption of the
    chunk's protected frames: their verdict columns are set and decrypted data frames are decoded on
    from their plaintext (LLC/SNAP, IP, transport) as open frames are.

    `columns` (names, or a Projection; None = all) limits the table to those columns plus frame,
    ts_ns and malformed, and the decoding to the layers and parts of layers they need (see
    columns.Projection); `malformed` then holds only what the decoded layers find. `layouts`, if
    given, is updated with the number of rows of each radiotap layout (rt_layout), asked for or not.
    """
    proj = columns if isinstance(columns, Projection) else Projection(columns)
    n = len(chunk)
    out = ColumnBuilder(n, proj)
    if chunk.fcs_first is not None and proj.decodes("fcs"):
        out.fcs_verdicts = (chunk.fcs_first, chunk.offset + chunk.caplen, chunk.fcs_ok)
    out.ahead = chunk.ahead
    if out.ahead is None and n and accel.AVAILABLE and proj.decodes("link"):
        # no walk thread made them: one C pass costs less than the decoders' two numpy gathers
        out.ahead = gather_ahead(chunk.data, chunk.offset, chunk.linktype, DOT11_WINDOW)
    unfit = iface_unfit(chunk.iface)
    if unfit is not None:   # before any layer: a row's first reason is the one kept
        out.malformed(np.flatnonzero(unfit), IFACE_TOO_LARGE)
    buf = chunk.data
    start = chunk.offset.astype(np.int64)
    end = start + chunk.caplen
    claimed = np.maximum(start + chunk.wirelen, end)
    span = Span(np.arange(n, dtype=np.int64), start, end, claimed,
                chunk.linktype.astype(np.int64), chunk.caplen < chunk.wirelen)

    lo, hi = (int(span.kind.min()), int(span.kind.max())) if n else (0, 0)
    if n and not (lo == hi and lo in registry.LINK_DECODERS):     # one known link type: the usual
        unknown = ~np.isin(span.kind, np.fromiter(registry.LINK_DECODERS, np.int64))
        for lt in np.unique(span.kind[unknown]).tolist() if unknown.any() else []:
            out.malformed(span.rows[span.kind == lt],
                          f"link type {lt} ({registry.linktype_name(lt)}) is not decoded")

    if not proj.decodes("link"):
        linked = []
    elif proj.decodes("dot11"):
        linked = _dispatch(buf, span, registry.LINK_DECODERS, out, "link")
    else:                # raw 802.11 records have no link header short of the 802.11 one
        table = {k: f for k, f in registry.LINK_DECODERS.items() if k != _RAW_DOT11}
        linked = _dispatch(buf, span, table, out, "link")
    net = [s for s in linked if not (s.kind == KIND_DOT11).all()]
    mac = [s for s in linked if (s.kind == KIND_DOT11).all()]
    mixed = [s for s in net if (s.kind == KIND_DOT11).any()]
    for s in mixed:  # a link decoder handing on both 802.11 and network rows
        net.remove(s)
        mac.append(s.take(s.kind == KIND_DOT11))
        net.append(s.take(s.kind != KIND_DOT11))
    if mac and proj.decodes("dot11"):
        net += handed_on(_guarded(registry.DOT11_DECODER, buf, concat(mac), out, "802.11"))
    if net and proj.decodes("network"):
        transport = _dispatch(buf, concat(net), registry.NET_DECODERS, out, "network")
        if transport and proj.decodes("transport"):
            _dispatch(buf, concat(transport), registry.TRANSPORT_DECODERS, out, "transport")

    if plain and proj.decodes("dot11"):
        _decrypted(plain, out)
    deferred = np.flatnonzero(out.deferred)
    if len(deferred):
        _refill(chunk, deferred, out, unfit, plain)
    base = {
        "frame": chunk.frame,
        "ts_ns": chunk.ts_ns if chunk.has_ts is None else (chunk.ts_ns, chunk.has_ts), "caplen": chunk.caplen, "wirelen": chunk.wirelen,
        "linktype": chunk.linktype, "iface": chunk.iface if unfit is None else (chunk.iface, ~unfit),
    }
    if layouts is not None:
        layouts.update(out.text_counts("rt_layout"))
    return out.to_arrow(base, dictionary), len(deferred)


def _decrypted(plain: dict[int, Plain] | PlainChunk, out: ColumnBuilder) -> None:
    """Write the decryption columns, and decode decrypted data frames on from their plaintext, which
    is gathered into a buffer of its own (the record's other columns come from the original frame)."""
    if isinstance(plain, PlainChunk):
        _decrypted_columns(plain, out)
        return
    rows = np.fromiter(sorted(plain), np.int64, len(plain))
    verdicts = [plain[r] for r in rows.tolist()]
    out.put("wlan_decrypted", rows, np.fromiter((p.frame is not None for p in verdicts), bool, len(rows)))
    for name, attr in (("wlan_mic", "mic"), ("wlan_key", "key")):
        has = [i for i, p in enumerate(verdicts) if getattr(p, attr) is not None]
        if has:
            out.put_objs(name, rows[has], [getattr(verdicts[i], attr) for i in has])
    done = [i for i, p in enumerate(verdicts) if p.frame is not None]
    if not done:
        return
    frames = [verdicts[i].frame for i in done]
    lens = np.fromiter((len(f) for f in frames), np.int64, len(frames))
    start = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    claimed = start + np.fromiter((verdicts[i].claimed for i in done), np.int64, len(done))
    buf = np.frombuffer(b"".join(frames), np.uint8)
    span = Span(rows[done], start, start + lens, claimed, np.full(len(done), KIND_DOT11, np.int64),
                claimed > start + lens)
    _decode_plaintext(buf, span, out)


def _decode_plaintext(buf: np.ndarray, span: Span, out: ColumnBuilder) -> None:
    """Decode decrypted 802.11 bodies (`span` over `buf`) on through LLC/SNAP, network and transport."""
    ahead, out.ahead = out.ahead, None     # gathers made ahead are of the capture's bytes, not these
    try:
        net = handed_on(_guarded(decode_plain_body, buf, span, out, "802.11"))
        if net and out.decodes("network"):
            transport = _dispatch(buf, concat(net), registry.NET_DECODERS, out, "network")
            if transport and out.decodes("transport"):
                _dispatch(buf, concat(transport), registry.TRANSPORT_DECODERS, out, "transport")
    finally:
        out.ahead = ahead


def _decrypted_columns(plain: PlainChunk, out: ColumnBuilder) -> None:
    """`_decrypted` over a chunk decrypted by columns: its plaintext is already one buffer with spans."""
    rows = plain.rows
    out.put("wlan_decrypted", rows, plain.decrypted)
    for name, texts, codes in (("wlan_mic", MIC_TEXTS, plain.mic_code), ("wlan_key", KEY_KINDS, plain.key_code)):
        if out.wants(name):
            has = np.flatnonzero(codes >= 0)
            if len(has):
                out.put_coded(name, rows[has], list(texts), codes[has])
    done = np.flatnonzero(plain.decrypted)
    if not len(done):
        return
    start, end = plain.start[done], plain.end[done]
    claimed = start + plain.claimed[done]
    span = Span(rows[done], start, end, claimed, np.full(len(done), KIND_DOT11, np.int64), claimed > end)
    buf = plain.buf
    _decode_plaintext(buf, span, out)


def _refill(chunk: RecordChunk, rows: np.ndarray, out: ColumnBuilder,
            unfit: np.ndarray | None = None, plain: dict[int, Plain] | None = None) -> None:
    """Decode rows the fast path passed down with the reference decoder and write them back."""
    out.clear_rows(rows)
    if unfit is not None:   # the clearing took the container's reason too: it stays the first
        out.malformed(rows[unfit[rows]], IFACE_TOO_LARGE)
    for r in rows.tolist():
        o = int(chunk.offset[r])
        data = bytes(chunk.data[o:o + int(chunk.caplen[r])])
        row = decode_record(data, int(chunk.linktype[r]), int(chunk.wirelen[r]), plain.get(r) if plain else None)
        if "malformed" in row:      # the reference decodes every layer: keep what ours would find
            row["malformed"] = out.projection.reason(row["malformed"])
        write_row(out, r, row)


def write_row(out: ColumnBuilder, r: int, row: dict) -> None:
    """Write one reference-decoded row (final Python values) into the column builder."""
    import ipaddress

    idx = np.array([r], dtype=np.int64)
    for name, value in row.items():
        if value is None:
            continue
        if name == "malformed":
            out.malformed(idx, str(value))
        elif name in MAC_COLUMNS:
            out.put(name, idx, int(str(value).replace(":", ""), 16))
        elif name in IP_COLUMNS:
            a = ipaddress.ip_address(value)
            v = int(a)
            out.put_ip(name, idx, np.uint64(v >> 64), np.uint64(v & (2**64 - 1)), a.version)
        elif isinstance(value, (str, list, bytes)):
            out.put_obj(name, r, value)
        else:
            out.put(name, idx, value)
