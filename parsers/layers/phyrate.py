"""802.11 PHY data rates (HT, VHT, HE) and the tables they come from, as tshark 4.0 computes them.

The tables are facts of IEEE 802.11-2020 (HT: clause 19, VHT: clause 21) and 802.11ax (HE: clause 27):

* HT: rate = N_DBPS(20 MHz) x (108/52 at 40 MHz) / T_SYM with T_SYM = 4.0 us (long GI) or 3.6 us
  (short GI).  Defined for MCS 0-76.  tshark's ``wlan_radio.data_rate`` stops at MCS 75 (an
  off-by-one; ``radiotap.datarate`` shows MCS 76); we give MCS 76 its rate (214.5 Mb/s at 20 MHz LGI).
  MCS 32 (40 MHz only in the standard) at 20 MHz gives 3.0 Mb/s, as tshark shows.
* VHT: rate = N_DBPS(20 MHz, 1 SS) x subcarriers(width)/52 / T_SYM x NSS for MCS 0-9, NSS 1-8, and
  only for the MCS/NSS/width combinations the standard allows (e.g. no MCS 9 at 20 MHz with 1 SS).
* HE: rate = NSTS x N_SD(width or RU) x N_BPSCS x R / (12.8 us + GI), rounded half up to 0.1 Mb/s:
  tshark's HE tables hold exactly these rounded values (checked on all 2880 combinations).

Scalar functions (``ht_rate`` ...) return None where no rate is defined and serve the per-frame
reference decoder; the ``*_v`` functions take numpy arrays and return ``(rate, valid)`` for the fast
path.  Both share only the tables.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

# --- HT (clause 19) -------------------------------------------------------------------------------
# Data bits per OFDM symbol at 20 MHz for MCS 0-76 (equal modulation 0-31, MCS 32, unequal 33-76).
HT_NDBPS: tuple[int, ...] = (
    26, 52, 78, 104, 156, 208, 234, 260,
    52, 104, 156, 208, 312, 416, 468, 520,
    78, 156, 234, 312, 468, 624, 702, 780,
    104, 208, 312, 416, 624, 832, 936, 1040,
    12,
    156, 208, 260, 234, 312, 390,
    208, 260, 260, 312, 364, 364, 416, 312, 390, 390, 468, 546, 546, 624,
    260, 312, 364, 312, 364, 416, 468, 416, 468, 520, 520, 572,
    390, 468, 546, 468, 546, 624, 702, 624, 702, 780, 780, 858,
)
# Spatial streams of each HT MCS.
HT_NSS: tuple[int, ...] = tuple(
    [i // 8 + 1 for i in range(32)] + [1] + [2] * 6 + [3] * 14 + [4] * 24)
HT_MAX_MCS = 76

# --- VHT (clause 21) ------------------------------------------------------------------------------
VHT_NDBPS_1SS: tuple[float, ...] = (26, 52, 78, 104, 156, 208, 234, 260, 312, 1040 / 3)
VHT_SUBCARRIERS: tuple[int, ...] = (52, 108, 234, 468)       # data subcarriers at 20/40/80/160 MHz
VHT_WIDTH_MHZ: tuple[int, ...] = (20, 40, 80, 160)
# radiotap VHT bandwidth code (0-25) -> index into the width tables: the width of the PPDU itself
# (code 2, "20 MHz lower of 40", is a 20 MHz PPDU).
VHT_BW_INDEX: tuple[int, ...] = (0, 1, 0, 0, 2, 1, 1, 0, 0, 0, 0, 3, 2, 2, 1, 1, 1, 1) + (0,) * 8
VHT_MAX_MCS = 9
VHT_MAX_NSS = 8
# (MCS, width index) -> NSS values for which the standard defines no rate.
VHT_INVALID: dict[tuple[int, int], frozenset[int]] = {
    (9, 0): frozenset({1, 2, 4, 5, 7, 8}),
    (6, 2): frozenset({3, 7}),
    (9, 2): frozenset({6}),
    (9, 3): frozenset({3}),
}

# --- HE (802.11ax) --------------------------------------------------------------------------------
# radiotap HE data5 "data bandwidth/RU allocation" (0-9) -> data subcarriers N_SD.
HE_NSD: tuple[int, ...] = (234, 468, 980, 1960, 24, 48, 102, 234, 468, 980)
HE_WIDTH_MHZ: tuple[int | None, ...] = (20, 40, 80, 160, None, None, None, None, None, None)
HE_BPSCS: tuple[int, ...] = (1, 2, 2, 4, 4, 6, 6, 6, 8, 8, 10, 10)
HE_CODE_RATE: tuple[tuple[int, int], ...] = (
    (1, 2), (1, 2), (3, 4), (1, 2), (3, 4), (2, 3), (3, 4), (5, 6), (3, 4), (5, 6), (3, 4), (5, 6))
HE_GI_US: tuple[float, ...] = (0.8, 1.6, 3.2)
HE_SYMBOL_TENTHS_US: tuple[int, ...] = (136, 144, 160)    # 12.8 us + GI, in 0.1 us
HE_MAX_MCS = 11
HE_MAX_NSTS = 8

# --- legacy rates (500 kb/s units) that tshark recognises when it guesses the PHY ----------------
CCK_RATES = frozenset({2, 4, 11, 22, 44, 66})
OFDM_RATES = frozenset({12, 18, 24, 36, 48, 72, 96, 108})


# ==================================================================================================
# scalar (reference decoder)
# ==================================================================================================
def ht_rate(mcs: int, bw40: bool, sgi: bool) -> float | None:
    """Return the HT data rate in Mb/s, or None for an MCS index outside 0-76."""
    if not 0 <= mcs <= HT_MAX_MCS:
        return None
    return HT_NDBPS[mcs] * (108 if bw40 else 52) / 52.0 / (3.6 if sgi else 4.0)


def ht_nss(mcs: int) -> int | None:
    """Return the number of spatial streams of an HT MCS index, or None outside 0-76."""
    return HT_NSS[mcs] if 0 <= mcs <= HT_MAX_MCS else None


def vht_width_index(bw_code: int) -> int | None:
    """Return the width index (0=20 .. 3=160 MHz) of a radiotap VHT bandwidth code, or None."""
    return VHT_BW_INDEX[bw_code] if 0 <= bw_code < len(VHT_BW_INDEX) else None


def vht_rate(mcs: int, nss: int, bw_code: int, sgi: bool) -> float | None:
    """Return the VHT data rate in Mb/s of one user, or None where the standard defines none."""
    w = vht_width_index(bw_code)
    if w is None or not 0 <= mcs <= VHT_MAX_MCS or not 1 <= nss <= VHT_MAX_NSS:
        return None
    if nss in VHT_INVALID.get((mcs, w), ()):
        return None
    return VHT_NDBPS_1SS[mcs] * VHT_SUBCARRIERS[w] / (3.6 if sgi else 4.0) / 52.0 * nss


def he_rate(nsts: int, mcs: int, bwru: int, gi: int) -> float | None:
    """Return the HE data rate in Mb/s rounded half up to 0.1, or None outside the tables."""
    if not (1 <= nsts <= HE_MAX_NSTS and 0 <= mcs <= HE_MAX_MCS and 0 <= bwru < len(HE_NSD)
            and 0 <= gi < len(HE_SYMBOL_TENTHS_US)):
        return None
    num, den = HE_CODE_RATE[mcs]
    exact = Fraction(nsts * HE_NSD[bwru] * HE_BPSCS[mcs] * num * 100, den * HE_SYMBOL_TENTHS_US[gi])
    return int(exact + Fraction(1, 2)) / 10   # exact is rate x 10; floor(x + 1/2) rounds half up


# ==================================================================================================
# vectorized (fast path)
# ==================================================================================================
_HT_NDBPS_A = np.array(HT_NDBPS, dtype=np.float64)
_HT_NSS_A = np.array(HT_NSS, dtype=np.uint8)
_VHT_NDBPS_A = np.array(VHT_NDBPS_1SS, dtype=np.float64)
_VHT_SC_A = np.array(VHT_SUBCARRIERS, dtype=np.float64)
_VHT_BW_A = np.array(VHT_BW_INDEX, dtype=np.int64)
_VHT_OK_A = np.ones((VHT_MAX_MCS + 1, 4, VHT_MAX_NSS + 1), dtype=bool)   # [mcs, width, nss]
_VHT_OK_A[:, :, 0] = False
for (_m, _w), _bad in VHT_INVALID.items():
    for _s in _bad:
        _VHT_OK_A[_m, _w, _s] = False
_HE_NSD_A = np.array(HE_NSD, dtype=np.int64)
_HE_BPSCS_A = np.array(HE_BPSCS, dtype=np.int64)
_HE_RNUM_A = np.array([r[0] for r in HE_CODE_RATE], dtype=np.int64)
_HE_RDEN_A = np.array([r[1] for r in HE_CODE_RATE], dtype=np.int64)
_HE_TSYM_A = np.array(HE_SYMBOL_TENTHS_US, dtype=np.int64)


def ht_rate_v(mcs: np.ndarray, bw40: np.ndarray, sgi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (HT rate in Mb/s, valid) for arrays of MCS index, 40 MHz flag and short-GI flag."""
    mcs = np.asarray(mcs, dtype=np.int64)
    valid = (mcs >= 0) & (mcs <= HT_MAX_MCS)
    ndbps = _HT_NDBPS_A[np.where(valid, mcs, 0)]
    rate = ndbps * np.where(bw40, 108.0, 52.0) / 52.0 / np.where(sgi, 3.6, 4.0)
    return rate, valid


def ht_nss_v(mcs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (spatial streams, valid) for an array of HT MCS indexes."""
    mcs = np.asarray(mcs, dtype=np.int64)
    valid = (mcs >= 0) & (mcs <= HT_MAX_MCS)
    return _HT_NSS_A[np.where(valid, mcs, 0)], valid


def vht_width_index_v(bw_code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (width index 0-3, valid) for an array of radiotap VHT bandwidth codes."""
    code = np.asarray(bw_code, dtype=np.int64)
    valid = (code >= 0) & (code < len(VHT_BW_INDEX))
    return _VHT_BW_A[np.where(valid, code, 0)], valid


def vht_rate_v(mcs: np.ndarray, nss: np.ndarray, bw_code: np.ndarray,
               sgi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (VHT rate in Mb/s, valid) for arrays of one user's MCS, NSS, bandwidth code and GI."""
    mcs = np.asarray(mcs, dtype=np.int64)
    nss = np.asarray(nss, dtype=np.int64)
    w, wok = vht_width_index_v(bw_code)
    inr = wok & (mcs >= 0) & (mcs <= VHT_MAX_MCS) & (nss >= 1) & (nss <= VHT_MAX_NSS)
    m = np.where(inr, mcs, 0)
    s = np.where(inr, nss, 0)
    valid = inr & _VHT_OK_A[m, w, s]
    rate = _VHT_NDBPS_A[m] * _VHT_SC_A[w] / np.where(sgi, 3.6, 4.0) / 52.0 * s
    return rate, valid


def he_rate_v(nsts: np.ndarray, mcs: np.ndarray, bwru: np.ndarray,
              gi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (HE rate in Mb/s rounded half up to 0.1, valid) for arrays of NSTS, MCS, BW/RU, GI."""
    nsts = np.asarray(nsts, dtype=np.int64)
    mcs = np.asarray(mcs, dtype=np.int64)
    bwru = np.asarray(bwru, dtype=np.int64)
    gi = np.asarray(gi, dtype=np.int64)
    valid = ((nsts >= 1) & (nsts <= HE_MAX_NSTS) & (mcs >= 0) & (mcs <= HE_MAX_MCS)
             & (bwru >= 0) & (bwru < len(HE_NSD)) & (gi >= 0) & (gi < len(HE_SYMBOL_TENTHS_US)))
    m = np.where(valid, mcs, 0)
    num = np.where(valid, nsts, 0) * _HE_NSD_A[np.where(valid, bwru, 0)] * _HE_BPSCS_A[m] \
        * _HE_RNUM_A[m] * 100
    den = _HE_RDEN_A[m] * _HE_TSYM_A[np.where(valid, gi, 0)]
    tenths = (2 * num + den) // (2 * den)    # integer round half up of num / den
    return tenths / 10.0, valid
