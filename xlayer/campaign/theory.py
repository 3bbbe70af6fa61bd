"""Theory beside measurement: Bianchi's DCF saturation model and the maximum 802.11 throughput.

`bianchi(n, phy, payload)` solves Bianchi's fixed point (G. Bianchi, "Performance Analysis of the IEEE
802.11 Distributed Coordination Function", IEEE JSAC 18(3), March 2000): the probability tau that a
station transmits in a slot and the probability p that a transmission collides,

    tau = 2 (1 - 2p) / ((1 - 2p)(W + 1) + p W (1 - (2p)^m))        (eq. 7)
    p   = 1 - (1 - tau)^(n - 1)                                    (eq. 9)

then the normalized saturation throughput (eq. 13)

    S = Ps Ptr E[P] / ((1 - Ptr) sigma + Ptr Ps Ts + Ptr (1 - Ps) Tc)

with Ts/Tc for basic access (DATA, SIFS, ACK, DIFS) and RTS/CTS access, each frame followed by the
propagation delay delta.  `phy_for("fhss", 1)` is the paper's FHSS system (its parameter table: slot
50 us, SIFS 28 us, DIFS 128 us, delta 1 us, MAC header 272 bits, PHY header 128 bits, ACK 112 bits +
PHY header, RTS 160 + PHY, CTS 112 + PHY, 1 Mbit/s, W = 32, m = 3).  The paper plots its saturation
throughput (no table of its values was available to us); the published numbers tests/campaign/test_theory.py reproduces (within
1 %) are the tables of the model that ns-3 ships with its Bianchi validation (L. Lanante, H. Yin,
S. Deronne, 2020: src/wifi/examples/wifi-bianchi.cc, bianchiResultsDifs / bianchiResultsEifs, made
by src/wifi/examples/reference/Bianchi11a.m and Bianchi11g.m, which state their parameters); those
tables include two refinements, here `eifs=True` (a collision costs EIFS) and `frozen_backoff=True`.

`max_throughput_bps` is the one-station, collision-free ceiling: per frame DIFS + the mean backoff
(CWmin/2 slots) + [RTS, SIFS, CTS, SIFS] + DATA (or one A-MPDU of `ampdu` MPDUs) + SIFS + ACK (or
BlockAck).  It equals `bianchi(1, ...)` by construction: with one station tau = 2/(W+1), so the mean
idle time between transmissions is (W-1)/2 = CWmin/2 slots.

Frame airtimes follow the PHY clauses: DSSS/FHSS frames are a preamble+header time plus bits/rate;
OFDM-family frames are a preamble plus whole symbols of 16 service bits + the PSDU + 6 tail bits
(plus the 6 us signal extension of ERP-OFDM in 2.4 GHz).  Control responses of HT/VHT/HE data go in
non-HT OFDM at the highest mandatory rate not above the data rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

# Rates (Mbit/s) each standard knows for its `phy_for` table; anything else is refused.
DSSS_RATES = (1.0, 2.0, 5.5, 11.0)
OFDM_RATES = (6.0, 9.0, 12.0, 18.0, 24.0, 36.0, 48.0, 54.0)
OFDM_MANDATORY = (6.0, 12.0, 24.0)
DSSS_BASIC = (1.0, 2.0)

# MAC overhead of one data MPDU (bits): header + FCS + LLC/SNAP (8 bytes) ahead of the IP packet.
LEGACY_MAC_BITS = (24 + 4 + 8) * 8
QOS_MAC_BITS = (26 + 4 + 8) * 8
ACK_BITS = 14 * 8
RTS_BITS = 20 * 8
CTS_BITS = 14 * 8
BLOCK_ACK_BITS = 32 * 8           # compressed BlockAck, 64-bit bitmap
AMPDU_DELIMITER_BITS = 4 * 8


@dataclass(frozen=True)
class Phy:
    """Timing of one PHY and MAC setting; times in microseconds, sizes in bits, rates in bit/s."""

    name: str
    rate_bps: float                  # data rate
    control_rate_bps: float          # rate of ACK / CTS / RTS / BlockAck
    slot_us: float
    sifs_us: float
    preamble_us: float               # preamble + PHY header of a data frame
    control_preamble_us: float       # the same for control frames (non-HT for HT/VHT/HE data)
    symbol_us: float = 0.0           # 0: bit-serial PHY (FHSS, DSSS); else the data symbol length
    control_symbol_us: float = 0.0
    cw_min: int = 15                 # W = cw_min + 1
    m: int = 6                       # backoff stages: CWmax = 2^m W - 1
    service_bits: int = 0            # OFDM: 16 service + 6 tail bits around every PSDU
    tail_bits: int = 0
    signal_ext_us: float = 0.0       # ERP-OFDM in 2.4 GHz
    mac_bits: int = LEGACY_MAC_BITS  # header + FCS (+ LLC/SNAP) of one data MPDU
    ack_bits: int = ACK_BITS
    rts_bits: int = RTS_BITS
    cts_bits: int = CTS_BITS
    block_ack_bits: int = BLOCK_ACK_BITS
    prop_us: float = 0.0             # propagation delay after every frame (Bianchi's delta)
    aggregation: bool = False        # A-MPDU allowed (HT and later)
    basic_rate_bps: float = 0.0      # lowest basic rate (EIFS); 0 = control_rate_bps

    @property
    def W(self) -> int:  # noqa: N802 - the paper's name
        """Return the minimum contention window size W (= CWmin + 1)."""
        return self.cw_min + 1

    @property
    def difs_us(self) -> float:
        """Return DIFS = SIFS + 2 slots."""
        return self.sifs_us + 2 * self.slot_us

    @property
    def eifs_us(self) -> float:
        """Return EIFS = SIFS + an ACK at the lowest basic rate + DIFS."""
        rate = self.basic_rate_bps or self.control_rate_bps
        return self.sifs_us + self.control_airtime_us(self.ack_bits, rate) + self.difs_us

    def data_airtime_us(self, psdu_bits: int) -> float:
        """Return the airtime of a data PPDU carrying `psdu_bits` at the data rate."""
        return _airtime(psdu_bits, self.rate_bps, self.preamble_us, self.symbol_us, self)

    def control_airtime_us(self, bits: int, rate_bps: float | None = None) -> float:
        """Return the airtime of a control frame of `bits` at the control rate (or `rate_bps`)."""
        return _airtime(bits, rate_bps or self.control_rate_bps, self.control_preamble_us,
                        self.control_symbol_us, self)


def _airtime(bits: int, rate_bps: float, preamble_us: float, symbol_us: float, phy: Phy) -> float:
    """Return preamble + payload time: bit-serial, or whole OFDM symbols with service and tail bits."""
    if symbol_us <= 0:
        # the PLCP LENGTH field counts whole microseconds (802.11b at 5.5 and 11 Mbit/s rounds up)
        return preamble_us + math.ceil(bits / rate_bps * 1e6 - 1e-9)
    per_symbol = round(rate_bps * symbol_us / 1e6)
    symbols = math.ceil((phy.service_bits + bits + phy.tail_bits) / per_symbol)
    return preamble_us + symbols * symbol_us + phy.signal_ext_us


def _norm_standard(standard: str) -> str:
    """Return 'b', 'a', 'g', 'n', 'ac', 'ax' or 'fhss' from names like '802.11g', '11g', 'G'."""
    s = str(standard).strip().lower()
    for prefix in ("ieee", "802.11", "80211", "11"):
        if s.startswith(prefix) and s != prefix:
            s = s[len(prefix):].lstrip("-_ .")
    if s not in ("b", "a", "g", "n", "ac", "ax", "fhss"):
        raise ValueError(f"unknown 802.11 standard {standard!r} (b, a, g, n, ac, ax)")
    return s


def _control_rate(rate_mbps: float, basic: tuple[float, ...]) -> float:
    """Return the highest basic rate (Mbit/s) not above the data rate (the lowest if all are above)."""
    below = [r for r in basic if r <= rate_mbps + 1e-9]
    return max(below) if below else min(basic)


def _check_rate(standard: str, rate_mbps: float, allowed: tuple[float, ...]) -> None:
    """Raise ValueError if `rate_mbps` is not one of the standard's rates."""
    if not any(abs(rate_mbps - r) < 1e-6 for r in allowed):
        raise ValueError(f"802.11{standard} has no {rate_mbps:g} Mbit/s rate (one of "
                         f"{', '.join(f'{r:g}' for r in allowed)})")


def phy_for(standard: str, rate_mbps: float, *, nss: int = 1, band_ghz: float | None = None,
            short_slot: bool = True, gi_us: float | None = None, cw_min: int | None = None,
            m: int | None = None) -> Phy:
    """Return the PHY timing of a standard ('b', 'a', 'g', 'n', 'ac', 'ax'; also '802.11g' style) at a data rate.

    'fhss' is Bianchi's (2000) FHSS system at 1 Mbit/s.  n/ac/ax take the rate as given (any MCS,
    width and stream count: `nss` sets the number of long training fields) with guard interval
    `gi_us` (n/ac: 0.8 or 0.4; ax: 0.8, 1.6 or 3.2; default 0.8); 'n' and 'ax' are 5 GHz unless
    `band_ghz=2.4`.  `short_slot=False`: 802.11g's 20 us slot.  `cw_min` and `m` override the
    standard's contention window.
    """
    s = _norm_standard(standard)
    try:
        rate = float(rate_mbps)
    except (TypeError, ValueError):
        raise ValueError(f"bad data rate {rate_mbps!r} Mbit/s") from None
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"bad data rate {rate_mbps!r} Mbit/s")
    if band_ghz is not None and band_ghz not in (2.4, 5, 5.0, 6, 6.0):
        raise ValueError(f"bad band {band_ghz!r} GHz (2.4, 5 or 6)")
    phy = _BUILDERS[s](rate, nss, band_ghz, short_slot, gi_us)
    if cw_min is not None or m is not None:
        phy = replace(phy, cw_min=phy.cw_min if cw_min is None else _whole(cw_min, 1, 32767, "CWmin"),
                      m=phy.m if m is None else _whole(m, 0, 16, "number of backoff stages m"))
    return phy


def _fhss(rate: float, nss: int, band: float | None, short_slot: bool, gi: float | None) -> Phy:
    """Return Bianchi's FHSS system (2000, the paper's parameter table)."""
    if abs(rate - 1.0) > 1e-9:
        raise ValueError("the FHSS system of Bianchi (2000) runs at 1 Mbit/s")
    return Phy(name="802.11 FHSS (Bianchi 2000)", rate_bps=1e6, control_rate_bps=1e6, slot_us=50.0,
               sifs_us=28.0, preamble_us=128.0, control_preamble_us=128.0, cw_min=31, m=3,
               mac_bits=272, prop_us=1.0)


def _dsss(rate: float, nss: int, band: float | None, short_slot: bool, gi: float | None) -> Phy:
    """Return 802.11b with the long preamble (144 us preamble + 48 us PLCP header)."""
    _check_rate("b", rate, DSSS_RATES)
    ctrl = _control_rate(rate, DSSS_BASIC) * 1e6
    return Phy(name=f"802.11b {rate:g} Mbit/s", rate_bps=rate * 1e6, control_rate_bps=ctrl, slot_us=20.0,
               sifs_us=10.0, preamble_us=192.0, control_preamble_us=192.0, cw_min=31, m=5,
               basic_rate_bps=1e6)


def _ofdm_common(rate: float) -> dict:
    """Return the fields shared by the OFDM family's non-HT control responses."""
    return dict(control_rate_bps=_control_rate(min(rate, 54.0), OFDM_MANDATORY) * 1e6, control_preamble_us=20.0,
                control_symbol_us=4.0, service_bits=16, tail_bits=6, basic_rate_bps=6e6)


def _ofdm_a(rate: float, nss: int, band: float | None, short_slot: bool, gi: float | None) -> Phy:
    """Return 802.11a (5 GHz OFDM): slot 9 us, SIFS 16 us, 20 us preamble + SIGNAL, 4 us symbols."""
    _check_rate("a", rate, OFDM_RATES)
    return Phy(name=f"802.11a {rate:g} Mbit/s", rate_bps=rate * 1e6, slot_us=9.0, sifs_us=16.0, preamble_us=20.0,
               symbol_us=4.0, cw_min=15, m=6, **_ofdm_common(rate))


def _ofdm_g(rate: float, nss: int, band: float | None, short_slot: bool, gi: float | None) -> Phy:
    """Return 802.11g ERP-OFDM: SIFS 10 us + 6 us signal extension, short (9 us) or long (20 us) slot;
    at a DSSS/CCK rate (1, 2, 5.5, 11), ERP-DSSS frames with the long preamble and the ERP MAC timing."""
    if any(abs(rate - r) < 1e-6 for r in DSSS_RATES):
        return replace(_dsss(rate, nss, band, short_slot, gi), name=f"802.11g {rate:g} Mbit/s (DSSS)",
                       slot_us=9.0 if short_slot else 20.0, cw_min=15, m=6)
    _check_rate("g", rate, OFDM_RATES + DSSS_RATES)
    return Phy(name=f"802.11g {rate:g} Mbit/s", rate_bps=rate * 1e6, slot_us=9.0 if short_slot else 20.0,
               sifs_us=10.0, preamble_us=20.0, symbol_us=4.0, signal_ext_us=6.0, cw_min=15, m=6,
               **_ofdm_common(rate))


def _high_throughput(name: str, rate: float, preamble: float, symbol: float, band: float) -> Phy:
    """Return an HT/VHT/HE PHY: QoS data, A-MPDU allowed, non-HT control responses."""
    common = _ofdm_common(rate)
    two4 = band < 3
    return Phy(name=f"{name} {rate:g} Mbit/s", rate_bps=rate * 1e6, slot_us=9.0, sifs_us=10.0 if two4 else 16.0,
               preamble_us=preamble, symbol_us=symbol, signal_ext_us=6.0 if two4 else 0.0, cw_min=15, m=6,
               mac_bits=QOS_MAC_BITS, aggregation=True, **common)


def _ht(rate: float, nss: int, band: float | None, short_slot: bool, gi: float | None) -> Phy:
    """Return 802.11n HT-mixed: 20 us legacy + HT-SIG 8 + HT-STF 4 + 4 us per HT-LTF; 3.2 us + GI symbols."""
    if band not in (None, 2.4, 5, 5.0):
        raise ValueError("802.11n runs in 2.4 or 5 GHz")
    return _high_throughput("802.11n", rate, 20.0 + 8.0 + 4.0 + 4.0 * _ltfs(nss), 3.2 + _gi(gi, (0.8, 0.4)),
                            band or 5.0)


def _vht(rate: float, nss: int, band: float | None, short_slot: bool, gi: float | None) -> Phy:
    """Return 802.11ac VHT (5 GHz): 20 us legacy + VHT-SIG-A 8 + VHT-STF 4 + 4 us per VHT-LTF + VHT-SIG-B 4."""
    if band not in (None, 5, 5.0):
        raise ValueError("802.11ac runs in 5 GHz only")
    return _high_throughput("802.11ac", rate, 20.0 + 8.0 + 4.0 + 4.0 * _ltfs(nss) + 4.0,
                            3.2 + _gi(gi, (0.8, 0.4)), 5.0)


def _he(rate: float, nss: int, band: float | None, short_slot: bool, gi: float | None) -> Phy:
    """Return 802.11ax HE SU: 20 us legacy + RL-SIG 4 + HE-SIG-A 8 + HE-STF 4 + 8 us per HE-LTF (2x LTF,
    1.6 us GI); 12.8 us + GI symbols; no packet extension."""
    return _high_throughput("802.11ax", rate, 20.0 + 4.0 + 8.0 + 4.0 + 8.0 * _ltfs(nss),
                            12.8 + _gi(gi, (0.8, 1.6, 3.2)), band or 5.0)


def _gi(gi: float | None, allowed: tuple[float, ...]) -> float:
    """Return the guard interval (us): `gi`, or the first of `allowed` if None; ValueError if not allowed."""
    if gi is None:
        return allowed[0]
    if not any(abs(gi - a) < 1e-9 for a in allowed):
        raise ValueError(f"bad guard interval {gi!r} us (one of {', '.join(f'{a:g}' for a in allowed)})")
    return float(gi)


def _ltfs(nss: int) -> int:
    """Return the number of HT/VHT/HE long training fields for `nss` streams (3 streams need 4)."""
    if not 1 <= int(nss) <= 8:
        raise ValueError(f"bad number of spatial streams {nss!r}")
    return {1: 1, 2: 2, 3: 4, 4: 4}.get(int(nss), 8 if nss > 6 else 6)


_BUILDERS = {"fhss": _fhss, "b": _dsss, "a": _ofdm_a, "g": _ofdm_g, "n": _ht, "ac": _vht, "ax": _he}


def _ampdu_bits(phy: Phy, payload_bytes: int, ampdu: int) -> int:
    """Return the PSDU size (bits) of `ampdu` MPDUs: one MPDU, or delimited subframes padded to 4 bytes."""
    mpdu = phy.mac_bits + 8 * payload_bytes
    if ampdu == 1:
        return mpdu
    sub = AMPDU_DELIMITER_BITS + mpdu
    padded = math.ceil(sub / 32) * 32
    return padded * (ampdu - 1) + sub


MAX_MSDU_BYTES = 7935              # the largest MSDU from HT on (A-MSDU off) ...
LEGACY_MAX_MSDU_BYTES = 2304       # ... and before
MAX_PPDU_US = 5484.0               # aPPDUMaxTime of HT-mixed, VHT and HE PPDUs
MAX_AMPDU_BYTES = {"802.11n": 65535, "802.11ac": 1048575, "802.11ax": 6500631}


def _whole(x: object, lo: int, hi: float, what: str) -> int:
    """Return `x` as an int in [lo, hi]; ValueError naming `what` otherwise (NaN, inf, 2.5, "x")."""
    try:
        ok = not isinstance(x, bool) and int(x) == x and lo <= int(x) <= hi
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"bad {what} {x!r} ({lo}..{hi:g})")
    return int(x)


def _check_args(phy: Phy, payload_bytes: int, ampdu: int) -> None:
    """Raise ValueError on a payload or aggregation the PHY cannot carry."""
    most = MAX_MSDU_BYTES if phy.aggregation else LEGACY_MAX_MSDU_BYTES
    _whole(payload_bytes, 1, most, f"payload size (bytes, on {phy.name})")
    _whole(ampdu, 1, 256, "A-MPDU length")
    if ampdu > 1 and not phy.aggregation:
        raise ValueError(f"{phy.name} has no A-MPDU aggregation")
    if phy.aggregation:
        psdu = _ampdu_bits(phy, int(payload_bytes), int(ampdu))
        limit = MAX_AMPDU_BYTES.get(phy.name.split()[0], MAX_AMPDU_BYTES["802.11n"])
        if psdu > 8 * limit or phy.data_airtime_us(psdu) > MAX_PPDU_US:
            raise ValueError(f"{ampdu} MPDUs of {payload_bytes} bytes exceed {phy.name}'s A-MPDU limits "
                             f"({limit} bytes, {MAX_PPDU_US:g} us)")


def frame_times(phy: Phy, payload_bytes: int, *, rts: bool = False, ampdu: int = 1, eifs: bool = False
                ) -> dict[str, float]:
    """Return the paper's Ts and Tc (us) for one exchange, and the payload bits it carries.

    Basic: Ts = DATA + SIFS + d + ACK + DIFS + d, Tc = DATA + DIFS + d.  RTS/CTS: Ts = RTS + SIFS + d +
    CTS + SIFS + d + DATA + SIFS + d + ACK + DIFS + d, Tc = RTS + DIFS + d.  With `eifs` the wait after a
    collision is EIFS instead of DIFS (what stations that hear a corrupted frame do).
    """
    _check_args(phy, payload_bytes, ampdu)
    d = phy.prop_us
    data = phy.data_airtime_us(_ampdu_bits(phy, payload_bytes, ampdu))
    ack = phy.control_airtime_us(phy.block_ack_bits if ampdu > 1 else phy.ack_bits)
    after_collision = phy.eifs_us if eifs else phy.difs_us
    ts = data + phy.sifs_us + d + ack + phy.difs_us + d
    tc = data + after_collision + d
    if rts:
        handshake = (phy.control_airtime_us(phy.rts_bits) + phy.sifs_us + d
                     + phy.control_airtime_us(phy.cts_bits) + phy.sifs_us + d)
        ts += handshake
        tc = phy.control_airtime_us(phy.rts_bits) + after_collision + d
    return {"Ts": ts, "Tc": tc, "payload_bits": 8.0 * payload_bytes * ampdu}


def _tau_of_p(p: float, W: int, m: int) -> float:  # noqa: N803 - the paper's names
    """Return eq. 7's tau(p), written as 2 / (1 + W + p W sum_{k<m} (2p)^k) to have no 0/0 at p = 1/2."""
    return 2.0 / (1.0 + W + p * W * sum((2.0 * p) ** k for k in range(m)))


def solve_fixed_point(n_stations: int, W: int, m: int) -> tuple[float, float]:  # noqa: N803
    """Return (tau, p) solving eqs. 7 and 9; the root is unique because p - p(tau(p)) increases in p."""
    if n_stations == 1:
        return _tau_of_p(0.0, W, m), 0.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid - (1.0 - (1.0 - _tau_of_p(mid, W, m)) ** (n_stations - 1)) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    p = 0.5 * (lo + hi)
    return _tau_of_p(p, W, m), p


def bianchi(n_stations: int, phy: Phy, payload_bytes: int, *, rts: bool = False, ampdu: int = 1,
            eifs: bool = False, frozen_backoff: bool = False) -> dict:
    """Return Bianchi's saturation solution: {'tau','p','throughput_bps','S'} (S = normalized throughput).

    Also 'Ptr', 'Ps', 'Ts_us', 'Tc_us'.  S is the fraction of time carrying payload bits at the data
    rate (the paper's definition); throughput_bps = payload bits per second.  `eifs`: the wait after a
    collision is EIFS (see `frame_times`).  `frozen_backoff`: the refinement of ns-3's reference model
    (see `_frozen`); the plain paper's model without it.
    """
    n = _whole(n_stations, 1, math.inf, "number of stations")
    times = frame_times(phy, payload_bytes, rts=rts, ampdu=ampdu, eifs=eifs)
    tau, p = solve_fixed_point(n, phy.W, phy.m)
    ptr = 1.0 - (1.0 - tau) ** n
    ps = n * tau * (1.0 - tau) ** (n - 1) / ptr
    if frozen_backoff:
        times = _frozen(times, phy)
    slot_mean_us = (1 - ptr) * phy.slot_us + ptr * ps * times["Ts"] + ptr * (1 - ps) * times["Tc"]
    bps = ps * ptr * times["payload_bits"] / (slot_mean_us * 1e-6)
    return {"tau": tau, "p": p, "throughput_bps": bps, "S": bps / phy.rate_bps, "Ptr": ptr, "Ps": ps,
            "Ts_us": times["Ts"], "Tc_us": times["Tc"]}


def _frozen(times: dict[str, float], phy: Phy) -> dict[str, float]:
    """Return Ts and the payload per success as ns-3's reference Bianchi model has them.

    802.11 freezes backoff counters while the medium is busy, where Bianchi's chain counts a busy
    period as a slot.  So a winner that redraws a zero backoff (probability B = 1/W) sends again right
    after DIFS, before anyone else's counter can reach zero: a won access carries 1/(1-B) frames on
    average (payload and Ts scaled by that), and the others need one more idle slot before the next
    access (+ one slot per success).  L. Lanante, H. Yin, S. Deronne (2020), ns-3
    src/wifi/examples/reference/Bianchi11a.m and Bianchi11g.m.
    """
    b = 1.0 / phy.W
    return {**times, "Ts": times["Ts"] / (1.0 - b) + phy.slot_us, "payload_bits": times["payload_bits"] / (1.0 - b)}


def max_throughput_bps(phy: Phy, payload_bytes: int, *, ampdu: int = 1, rts: bool = False) -> float:
    """Return the one-station maximum throughput after all overhead (DIFS, mean backoff, headers, SIFS, ACK/BA)."""
    times = frame_times(phy, payload_bytes, rts=rts, ampdu=ampdu)
    cycle_us = times["Ts"] + phy.cw_min / 2.0 * phy.slot_us
    return times["payload_bits"] / (cycle_us * 1e-6)


def bounds(standard: str, rate_mbps: float, payload_bytes: int, stations: int, *, rts: bool = False,
           ampdu: int = 1, eifs: bool = False, frozen_backoff: bool = False) -> dict:
    """Return {'bianchi_bps': ..., 'max_bps': ...} for one service condition (the campaign's 'measured / bound').

    `payload_bytes` is the MSDU (the IP packet); both bounds count those bytes.  `ampdu` applies from
    802.11n on (a/b/g have no aggregation: it is ignored there, as a campaign tag may carry it for
    every condition).  `eifs` and `frozen_backoff` go to `bianchi`.
    """
    phy = phy_for(standard, rate_mbps)
    agg = ampdu if phy.aggregation else 1
    model = bianchi(stations, phy, payload_bytes, rts=rts, ampdu=agg, eifs=eifs, frozen_backoff=frozen_backoff)
    return {"bianchi_bps": model["throughput_bps"],
            "max_bps": max_throughput_bps(phy, payload_bytes, ampdu=agg, rts=rts)}
