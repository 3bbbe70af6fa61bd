"""802.11 management frame bodies, vectorized: reason and status codes, and the SSID element."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from parsers.columnar.columns import ColumnBuilder, escape_bytes
from parsers.columnar.gather import rows_bytes, u8, ule, window

R_FIXED = "dot11: management body shorter than its mandatory fields"
R_ELEMENT = "dot11: information element overruns the frame"

# Fixed-field bytes before the elements, by management subtype (-1: not checked; action frames:
# the category byte).
FIXED = np.full(16, -1, np.int64)
for _sub, _n in ((0, 4), (1, 6), (2, 10), (3, 6), (4, 0), (5, 12), (8, 12), (9, 0), (10, 2),
                 (11, 6), (12, 2), (13, 1), (14, 1)):
    FIXED[_sub] = _n
# (Re)association requests/responses, probe responses and beacons have mandatory elements: at
# least one element header must follow the fixed fields (tshark: malformed otherwise).
MANDATORY = FIXED.copy()
MANDATORY[[0, 1, 2, 3, 5, 8]] += 2
SSID_SUBTYPES = np.array([0, 2, 4, 5, 8])     # (re)association request, probe req/resp, beacon
# The element walk runs this many vectorized steps; frames whose SSID comes later are rare
# (it is normally the first element) and go to the reference decoder.
MAX_STEPS = 16


def lost(need: np.ndarray, end: np.ndarray, claimed: np.ndarray, cut: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray]:
    """Return (missing, malformed): bytes up to `need` are not captured; and that is not explained
    by the snap length (the frame was not cut, or even its claimed length is too short)."""
    missing = need > end
    return missing, missing & (~cut | (need > claimed))


def put_texts(out: ColumnBuilder, name: str, rows: np.ndarray, texts: list) -> None:
    """Write one string cell per row (through a bulk writer when the column builder has one)."""
    bulk = getattr(out, "put_objs", None)
    if bulk is not None:
        bulk(name, rows, texts)
        return
    put = out.put_obj
    for r, t in zip(rows.tolist(), texts):
        put(name, r, t)


def put_hex(out: ColumnBuilder, name: str, rows: np.ndarray, buf: np.ndarray, pos: np.ndarray,
            width: int) -> None:
    """Write the `width` bytes at each position as lower-case hex text (each distinct value is
    formatted once: bitmaps repeat a lot)."""
    if not len(rows):
        return
    keys = np.ascontiguousarray(rows_bytes(buf, pos, width)).view(f"V{width}").ravel()
    uniq, codes = np.unique(keys, return_inverse=True)
    texts = [bytes(u).hex() for u in uniq.tolist()]
    bulk = getattr(out, "put_coded", None)
    if bulk is not None:
        bulk(name, rows, texts, codes.reshape(-1))
    else:
        put_texts(out, name, rows, [texts[c] for c in codes.reshape(-1).tolist()])


def decode_mgmt_body(buf: np.ndarray, out: ColumnBuilder, rows: np.ndarray, body: np.ndarray,
                     end: np.ndarray, claimed: np.ndarray, cut: np.ndarray, sub: np.ndarray) -> None:
    """Write reason/status codes and the SSID of unprotected management frames."""
    if not len(rows):
        return
    sub = sub.astype(np.int64)
    fixed = FIXED[sub]
    known = fixed >= 0
    _, bad = lost(body + MANDATORY[sub], end, claimed, cut)
    out.malformed(rows[known & bad], R_FIXED)
    ok = known & (body + fixed <= end)
    m = ok & ((sub == 10) | (sub == 12))    # disassociation, deauthentication
    out.put("wlan_reason", rows[m], ule(buf, body[m], 2))
    m = ok & (sub == 11)                    # authentication: algorithm, sequence, status
    out.put("wlan_status", rows[m], ule(buf, body[m] + 4, 2))
    m = ok & ((sub == 1) | (sub == 3))      # (re)association response: capabilities, status
    out.put("wlan_status", rows[m], ule(buf, body[m] + 2, 2))
    k = np.flatnonzero(ok & np.isin(sub, SSID_SUBTYPES))
    _ssid(buf, out, rows[k], body[k] + fixed[k], end[k], claimed[k], cut[k])


def _ssid(buf, out: ColumnBuilder, rows, pos, end, claimed, cut) -> None:
    """Walk the elements to the first SSID element; write it as text."""
    hit_rows, hit_at, hit_len = [], [], []
    idx = np.arange(len(rows))
    pos = pos.copy()
    for _ in range(MAX_STEPS):
        if not len(idx):
            break
        p, e, c, x = pos[idx], end[idx], claimed[idx], cut[idx]
        # A lone byte left where an element header should be is as bad as an overrun.
        _, bad = lost(p + 2, e, c, x)
        out.malformed(rows[idx[bad & (p < e)]], R_ELEMENT)
        head = p + 2 <= e
        tag = u8(buf, p)
        ln = u8(buf, p + 1).astype(np.int64)
        miss, bad = lost(p + 2 + ln, e, c, x)
        out.malformed(rows[idx[head & bad]], R_ELEMENT)
        whole = head & ~miss
        hit = whole & (tag == 0)
        hit_rows.append(idx[hit])
        hit_at.append(p[hit] + 2)
        hit_len.append(ln[hit])
        more = whole & (tag != 0)
        idx = idx[more]
        pos[idx] = p[more] + 2 + ln[more]
    if len(idx):
        out.defer(rows[idx])
    k = np.concatenate(hit_rows) if hit_rows else np.zeros(0, np.int64)
    if not len(k):
        return
    texts, codes = _texts(buf, np.concatenate(hit_at), np.concatenate(hit_len))
    bulk = getattr(out, "put_coded", None)
    if bulk is not None:        # no Python object per frame
        bulk("wlan_ssid", rows[k], texts, codes)
    else:
        put_texts(out, "wlan_ssid", rows[k], [texts[c] for c in codes.tolist()])


def _texts(buf: np.ndarray, at: np.ndarray, ln: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Return the byte strings at (at, ln) as escaped texts, each distinct one decoded once: the
    texts, and the index of each row's text among them."""
    width = int(ln.max()) if len(ln) else 0
    if width == 0:
        return [""], np.zeros(len(at), np.int64)
    mat = window(buf, at, width)
    flat = mat[np.arange(width)[None, :] < ln[:, None]]      # the strings back to back, in row order
    offsets = np.zeros(len(ln) + 1, np.int32)
    np.cumsum(ln, out=offsets[1:])
    strings = pa.Array.from_buffers(pa.binary(), len(ln), [None, pa.py_buffer(offsets),
                                                           pa.py_buffer(flat.tobytes())])
    coded = strings.dictionary_encode()           # hashing: distinct SSIDs are few
    return [escape_bytes(b) for b in coded.dictionary.to_pylist()], coded.indices.to_numpy(zero_copy_only=False)
