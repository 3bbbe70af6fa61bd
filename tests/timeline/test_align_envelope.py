"""Clock fits on the minimum-delay envelope (xlayer.timeline.fit.floor_fit, two_way) under full queues.

Crafted delay tables: one direction meets a queue that fills after a moment and stays full (sojourn
~0.5 s, the AP queue behind an unresponsive UDP stream), the other direction's packets are MAC-retried
(1-4 ms more) half of the time and sparse; both stamps jitter (20 us each).  The hull-and-band fit
this replaced put the offset 50-360 us and the skew 5-50 ppm off on these tables; the envelope fit
must stay within 100 us and 2 ppm.  Then: a sniffer's edge whose into-the-air direction never drains,
delays that queue both ways (a "poor" fit that says so), and a capture that cannot be aligned at all.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xlayer.timeline.fit as fitm
from tests.timeline.test_align import NS, _tcp_frames, local_stamps, write_pcap_array
from xlayer.timeline.align import ClockMap, align_bundle

MAX_OFFSET_ERR_US = 100.0
MAX_SKEW_ERR_PPM = 2.0
SKEWS = (30.0, -45.0, 12.0, 0.0)


def full_queue_sojourn(t_s: np.ndarray, rng: np.random.Generator, free_s: float, ramp_s: float) -> np.ndarray:
    """Return the queueing delay (ns) of packets at times t_s: a short free start, then a full queue."""
    free = rng.exponential(2e5, len(t_s)) * (rng.random(len(t_s)) < 0.5)
    full = (np.minimum(1.0, (t_s - free_s) / ramp_s) * (0.45e9 + 0.05e9 * np.sin(t_s))
            + rng.exponential(3e6, len(t_s)))
    return np.where(t_s < free_s, free, full)


def delay_table(seed: int, *, seconds: float = 12.0, skew_ppm: float = 30.0, fwd_base: float = 60e3,
                rev_base: float = 60e3, rev_rate: float = 20.0, retry_share: float = 0.5,
                min_queue: float = 0.0, free_s: float = 0.2, ramp_s: float = 1.0):
    """Return (xf, yf, xr, yr, theta): matched-packet delays in fit.two_way's convention and the true line."""
    rng = np.random.default_rng(seed)
    span = seconds * NS
    xf = np.sort(rng.uniform(-span / 2, span / 2, int(seconds * 500)))
    xr = np.sort(rng.uniform(-span / 2, span / 2, int(seconds * rev_rate)))
    soj = np.maximum(full_queue_sojourn((xf + span / 2) / NS, rng, free_s, ramp_s), min_queue)
    retry = np.where(rng.random(len(xr)) < retry_share, rng.uniform(1e6, 4e6, len(xr)), 0.0)
    a = 1.234567e9

    def theta(x: np.ndarray) -> np.ndarray:
        return a + skew_ppm * 1e-6 * x

    def jitter(n: int) -> np.ndarray:
        return rng.normal(0, 20e3, n) + rng.normal(0, 20e3, n)

    yf = theta(xf) + fwd_base + soj + jitter(len(xf))
    yr = theta(xr) - rev_base - retry + jitter(len(xr))
    return xf, yf, xr, yr, theta


def fit_errors(fit: fitm.ClockFit, theta, xf: np.ndarray, xr: np.ndarray, skew_ppm: float) -> tuple[float, float]:
    """Return (max |offset error| over the matched packets in us, |skew error| in ppm)."""
    x = np.concatenate([xf, xr])
    return float(np.max(np.abs(fit.a + fit.s * x - theta(x)))) / 1e3, abs(fit.s * 1e6 - skew_ppm)


@pytest.mark.parametrize("seed", range(30, 38))
def test_full_queue_one_way_retries_the_other(seed: int) -> None:
    """The queued direction's floor is reached only in the first 0.2 s: not credible, no skew from it;
    the sparse, half-retried reverse direction's floor gives the skew and, with the queued side's
    lowest points, the offset."""
    skew = SKEWS[seed % 4]
    xf, yf, xr, yr, theta = delay_table(seed, skew_ppm=skew)
    fit = fitm.two_way(xf, yf, xr, yr)
    off, sk = fit_errors(fit, theta, xf, xr, skew)
    assert off <= MAX_OFFSET_ERR_US, (off, fit)
    assert sk <= MAX_SKEW_ERR_PPM, (sk, fit)
    assert fit.coverage_fwd < fitm.MIN_COVERAGE <= fit.coverage_rev
    assert fit.status == "aligned" and fit.uncertainty_ns <= fitm.POOR_NS
    assert any("met a queue nearly all along" in n for n in fit.notes)
    # the retried ACKs are not on the floor, the unqueued ones are
    assert 0 < fit.n_floor < len(xr) + len(xf) // 10


@pytest.mark.parametrize("seed", range(30, 34))
def test_sniffer_edge_queue_never_drains(seed: int) -> None:
    """Into the air, every packet waits at least 200 us more than the 100 us floor (the AP queue never
    empties: at best a packet waits for the one before it), then fills; out of the air the delay is
    ~0.  The midpoint of the envelopes would be 150+ us off; the out-of-the-air floor (prefer="reverse")
    is not."""
    skew = SKEWS[seed % 4]
    xf, yf, xr, yr, theta = delay_table(seed, skew_ppm=skew, fwd_base=100e3, rev_base=2e3, rev_rate=250,
                                        retry_share=0.1, min_queue=200e3, free_s=0.3)
    fit = fitm.two_way(xf, yf, xr, yr, prefer="reverse")
    off, sk = fit_errors(fit, theta, xf, xr, skew)
    assert off <= 30.0 and sk <= MAX_SKEW_ERR_PPM, (off, sk, fit)
    assert fit.status == "aligned"
    # without the preference the same table is fitted as the midpoint of a bound: the uncertainty says so
    blind = fitm.two_way(xf, yf, xr, yr)
    off_b, _ = fit_errors(blind, theta, xf, xr, skew)
    assert off_b <= blind.uncertainty_ns / 1e3 + 20.0, (off_b, blind)


@pytest.mark.parametrize("seed", range(30, 32))
def test_sniffer_edge_far_host(seed: int) -> None:
    """The host is 9 ms away both ways (a server across a WAN) and the downlink queues after 0.2 s: the
    out-of-the-air floor is not ~0 here, and the downlink's lowest points, 18 ms beyond it, say so.
    The preference is not taken: the offset is the midpoint (right, the path being symmetric), and the
    status says it rests on that assumption."""
    skew = SKEWS[seed % 4]
    xf, yf, xr, yr, theta = delay_table(seed, skew_ppm=skew, fwd_base=9e6, rev_base=9e6, rev_rate=250,
                                        retry_share=0.1)
    fit = fitm.two_way(xf, yf, xr, yr, prefer="reverse")
    off, sk = fit_errors(fit, theta, xf, xr, skew)
    assert off <= MAX_OFFSET_ERR_US and sk <= MAX_SKEW_ERR_PPM, (off, sk, fit)
    assert fit.status.startswith("poor: offset uncertain by"), fit
    assert off * 1e3 <= fit.uncertainty_ns


def _wan_table(seed: int, fwd_ms: float, rev_ms: float, skew_ppm: float = 20.0):
    """Return (xf, yf, xr, yr, theta): a server tens of milliseconds away both ways, its packets mostly
    unqueued (a fifth wait up to 3 ms somewhere on the path), stamps jittered 20 us at each end."""
    rng = np.random.default_rng(seed)
    span = 10 * NS
    xf = np.sort(rng.uniform(-span / 2, span / 2, 3000))
    xr = np.sort(rng.uniform(-span / 2, span / 2, 1500))

    def theta(x: np.ndarray) -> np.ndarray:
        return 4.2e8 + skew_ppm * 1e-6 * x

    def extra(n: int) -> np.ndarray:
        return np.where(rng.random(n) < 0.2, rng.uniform(0, 3e6, n), 0.0) + np.abs(rng.normal(0, 28e3, n))

    return (xf, theta(xf) + fwd_ms * 1e6 + extra(len(xf)), xr, theta(xr) - rev_ms * 1e6 - extra(len(xr)), theta)


@pytest.mark.parametrize("fwd_ms,rev_ms", [(35.0, 35.0), (40.0, 30.0)])
def test_a_path_of_tens_of_milliseconds_is_the_equal_delay_assumption_not_a_poor_fit(fwd_ms, rev_ms) -> None:
    """A server across a WAN: the floors both ways are reached all along and lie 70 ms apart.  The
    offset is midway, exact for a symmetric path and off by half the difference of an asymmetric
    one; the uncertainty covers that, says how much of it is the assumption, and the status stays
    "aligned" with a note (every two-way method assumes it: it is no sign of a bad fit)."""
    xf, yf, xr, yr, theta = _wan_table(3, fwd_ms, rev_ms)
    fit = fitm.two_way(xf, yf, xr, yr)
    off, sk = fit_errors(fit, theta, xf, xr, 20.0)
    asym_us = abs(fwd_ms - rev_ms) / 2 * 1e3
    assert abs(off - asym_us) <= 30.0 and sk <= MAX_SKEW_ERR_PPM, (off, sk, fit)
    assert fit.status == "aligned", fit
    assert any("one-way delays of that path are equal" in n for n in fit.notes), fit.notes
    assert abs(fit.path_ns - (fwd_ms + rev_ms) / 2 * 1e6) <= 50e3 and fit.bound_ns == 0.0
    assert off * 1e3 <= fit.uncertainty_ns and fit.uncertainty_ns - fit.path_ns <= fitm.POOR_NS


def test_a_gap_across_the_air_is_a_bound_not_a_path() -> None:
    """The same floors both ways, but one side is an air capture: into the air a frame waits for the
    medium and its aggregate, out of it not, so the gap is no path with equal delays (802.11ax run
    1164: a station's capture 5.5 ms of floors apart from the sniffer, its midpoint 2.8 ms off).  The
    midpoint stays, as a bound: the status says poor and a chain avoids the link where it can."""
    xf, yf, xr, yr, _ = _wan_table(3, 3.0, 0.2)
    wired = fitm.two_way(xf, yf, xr, yr)
    air = fitm.two_way(xf, yf, xr, yr, air=True)
    assert wired.a == air.a and wired.s == air.s and wired.uncertainty_ns == air.uncertainty_ns
    assert wired.path_ns > 1.5e6 and wired.bound_ns == 0.0 and wired.status == "aligned"
    assert air.path_ns == 0.0 and air.bound_ns == wired.path_ns
    assert air.status.startswith("poor: offset uncertain by"), air.status


def test_envelopes_that_cross_are_uncertain_by_how_far_they_cross() -> None:
    """Matches whose forward floor lies 10 ms below the reverse one (a negative delay: wrong matches, as
    802.11ax run 1189's sniffer edges had, crossing by 42 ms): the midpoint is no better than that.
    Its uncertainty was the half gap floored at 0, about 50 us, so a chain took the link and put a
    capture 15 ms off; it is now at least half the crossing."""
    xf, yf, xr, yr, _ = _wan_table(5, -5.0, -5.0)
    fit = fitm.two_way(xf, yf, xr, yr)
    assert "envelopes cross by" in fit.status, fit.status
    assert fit.uncertainty_ns >= 4.9e6, fit.uncertainty_ns
    assert fit.path_ns == 0.0 and fit.bound_ns >= 4.9e6       # a crossing is no path's round trip


def test_a_skew_that_was_not_measured_is_taken_only_where_no_measured_one_exists() -> None:
    """An offset-only link (its skew taken as 0) with a tight offset against a link across a WAN whose
    offset is 50 ms uncertain but whose skew was measured: a clock's skew comes through the second."""
    from xlayer.timeline.align import _skew_cost

    oo = fitm.ClockFit(a=0.0, s=0.0, method="two-way", n=100, offset_only=True, uncertainty_ns=50e3)
    wan = fitm.ClockFit(a=0.0, s=3e-6, method="two-way", n=5000, uncertainty_ns=50e6, skew_se=1e-7, path_ns=50e6)
    assert _skew_cost(wan) < _skew_cost(oo)
    assert _skew_cost(oo) + _skew_cost(wan) < 2 * _skew_cost(oo)      # still a chain where it is the only one


def test_a_chain_crosses_a_long_path_where_both_floors_are_credible_not_on_a_bound() -> None:
    """Two links cross the same 20 ms path: one whose far direction queued all along (its offset lies
    midway between the reverse floor and the queued side's lowest packets: a bound, off by half their
    least queueing even on a symmetric path), one with credible floors both ways 0.8 ms further apart.
    By uncertainty alone the bound looks better; the chain's cost counts the bound twice and takes the
    credible link (a sniffer's own edge to a server across a WAN against the AP's wired capture's)."""
    from xlayer.timeline.align import _edge_cost

    xf, yf, xr, yr, _ = delay_table(40, fwd_base=20e6, rev_base=20e6, rev_rate=250, retry_share=0.1,
                                    min_queue=40e3, free_s=0.0)
    bound = fitm.two_way(xf, yf, xr, yr)
    xf, yf, xr, yr, _ = _wan_table(4, 20.8, 20.8)
    credible = fitm.two_way(xf, yf, xr, yr)
    assert bound.coverage_fwd < fitm.MIN_COVERAGE <= bound.coverage_rev and bound.bound_ns > 19e6
    assert credible.bound_ns == 0.0 and credible.path_ns > 19e6
    assert bound.uncertainty_ns < credible.uncertainty_ns, (bound.uncertainty_ns, credible.uncertainty_ns)
    assert _edge_cost(credible) < _edge_cost(bound)
    assert bound.status.startswith("poor: offset uncertain by") and credible.status == "aligned"


@pytest.mark.parametrize("seed", range(1, 6))
def test_floor_growing_with_size(seed: int) -> None:
    """One direction carries ACKs early and 1500-byte packets late, and its stamps put 8 ns a byte of
    serialization into the delay (1 Gbit/s): 12 us of floor change inside the jitter band, which
    tilted the floor by ~1.3 ppm.  With the packets' sizes the fit takes the floor back to the
    smallest packets and says so."""
    rng = np.random.default_rng(seed)
    n, span = 6000, 4 * NS
    xf = np.sort(rng.uniform(-span / 2, span / 2, n))
    xr = np.sort(rng.uniform(-span / 2, span / 2, n))
    sf = np.where(rng.random(n) < (xf + span / 2) / span, 1500.0, 64.0)
    sr = np.full(n, 64.0)

    def theta(x: np.ndarray) -> np.ndarray:
        return 5e8 + 20e-6 * x

    yf = theta(xf) + 5e3 + 8 * sf + rng.normal(0, 28e3, n)
    yr = theta(xr) - 5e3 - 8 * sr + rng.normal(0, 28e3, n)
    fit = fitm.two_way(xf, yf, xr, yr, sizes=(sf, sr))
    off, sk = fit_errors(fit, theta, xf, xr, 20.0)
    assert sk <= 0.5 and off <= 5.0, (off, sk, fit)
    assert any("changes with the packet's size" in m for m in fit.notes), fit.notes


def test_queued_both_ways_is_poor() -> None:
    """Both directions queue all along, their sojourn swinging between 2 and 7 ms: the lowest delays
    seen either way are milliseconds, so the offset is known to milliseconds only.  The fit says "poor"
    with an uncertainty of that size (and the truth within it) instead of passing for aligned."""
    rng = np.random.default_rng(5)
    span = 8 * NS
    xf = np.sort(rng.uniform(-span / 2, span / 2, 4000))
    xr = np.sort(rng.uniform(-span / 2, span / 2, 2000))

    def swing(x: np.ndarray, phase: float) -> np.ndarray:
        return 2e6 + 2.5e6 * (1 + np.sin(2 * np.pi * x / (3 * NS) + phase)) + rng.exponential(3e5, len(x))

    yf = 7e8 + swing(xf, 0.0) + rng.normal(0, 28e3, len(xf))
    yr = 7e8 - swing(xr, 1.0) + rng.normal(0, 28e3, len(xr))
    fit = fitm.two_way(xf, yf, xr, yr)
    assert fit.status.startswith("poor: ") and "uncertain by" in fit.status, fit
    assert fit.uncertainty_ns > 10 * fitm.POOR_NS
    assert fit.uncertainty_ns >= abs(fit.a - 7e8) - 50e3, fit       # the truth lies within what it says


def test_no_floor_either_way_is_poor() -> None:
    """A queue that never drains either way, its sojourn wandering between 2 and 30 ms: no direction's
    lowest delays line up, and the status names that."""
    rng = np.random.default_rng(0)
    span = 8 * NS
    xf = np.sort(rng.uniform(-span / 2, span / 2, 4000))
    xr = np.sort(rng.uniform(-span / 2, span / 2, 2000))

    def wander(x: np.ndarray) -> np.ndarray:
        return 2e6 + np.abs(np.cumsum(rng.normal(0, 4e5, len(x)))) + rng.exponential(3e5, len(x))

    yf = 7e8 + wander(xf) + rng.normal(0, 28e3, len(xf))
    yr = 7e8 - wander(xr) + rng.normal(0, 28e3, len(xr))
    fit = fitm.two_way(xf, yf, xr, yr)
    assert fit.status.startswith("poor: no direction has packets that met no queue"), fit
    assert max(fit.coverage_fwd, fit.coverage_rev) < fitm.MIN_COVERAGE
    assert fit.uncertainty_ns >= abs(fit.a - 7e8), fit


# ---------------------------------------------------------------------------------------------
# the same through align_bundle: pcaps written here, statuses in the JSON


def _full_queue_bundle(dst: Path, clock: ClockMap, seed: int = 3) -> None:
    """Write server.pcap and client.pcap (the client on `clock`): the download queues as in
    delay_table after 0.2 s, one ACK in ten is kept (sparse) and half of those are retried."""
    rng = np.random.default_rng(seed)
    n = 9000
    frames, wl, is_data = _tcp_frames(n, rng)
    keep = is_data | (rng.random(n) < 0.1)
    frames, wl, is_data = frames[keep], wl[keep], is_data[keep]
    m = len(is_data)
    t0 = 1_795_000_000 * NS
    send = t0 + np.sort(rng.uniform(0, 12 * NS, m)).astype(np.int64)
    soj = full_queue_sojourn((send - t0) / NS, rng, 0.2, 1.0)
    retry = np.where(rng.random(m) < 0.5, rng.uniform(1e6, 4e6, m), 0.0)
    delay = (60_000 + np.where(is_data, soj, retry)).astype(np.int64)
    at_server = np.where(is_data, send, send + delay)
    at_client = np.where(is_data, send + delay, send)

    def jitter() -> np.ndarray:
        return np.round(rng.normal(0, 20_000, m)).astype(np.int64)

    dst.mkdir(parents=True, exist_ok=True)
    o_s, o_c = np.argsort(at_server, kind="stable"), np.argsort(at_client, kind="stable")
    write_pcap_array(dst / "server.pcap", (at_server + jitter())[o_s], frames[o_s], wl[o_s])
    write_pcap_array(dst / "client.pcap", (local_stamps(at_client, clock) + jitter())[o_c], frames[o_c], wl[o_c])
    man = {"xlayer_bundle": 1, "tags": {}, "captures": [
        {"kind": "wired", "vantage": "server", "file": "server.pcap", "format": "pcap"},
        {"kind": "wired", "vantage": "client", "file": "client.pcap", "format": "pcap"}]}
    (dst / "bundle.json").write_text(json.dumps(man))


def test_bundle_full_queue_aligned_with_status(tmp_path: Path) -> None:
    clock = ClockMap.from_params(-1.5, 27.0, 1_795_000_000.0)
    _full_queue_bundle(tmp_path / "b", clock)
    al = align_bundle(tmp_path / "b")
    c = al.capture("client.pcap")
    ts = np.array([1_795_000_000 * NS, 1_795_000_012 * NS], dtype=np.int64)
    err_us = float(np.max(np.abs(np.asarray(c.to_reference_ns(ts)) - np.asarray(clock.to_reference_ns(ts))))) / 1e3
    assert c.method == "two-way:ip", al.table()
    assert err_us <= MAX_OFFSET_ERR_US, (err_us, al.table())
    assert abs(c.skew_ppm - clock.skew_ppm) <= MAX_SKEW_ERR_PPM, al.table()
    assert c.status == "aligned" and c.confidence is not None and c.confidence >= 0.5, al.table()
    assert err_us <= c.uncertainty_us + 20.0, (err_us, c)
    assert 0 < c.envelope_points < c.matched
    j = {x["file"]: x for x in al.as_json()["captures"]}
    assert j["client.pcap"]["status"] == "aligned" and j["server.pcap"]["confidence"] == 1.0
    assert "status" in al.table().splitlines()[1]


def test_capture_that_cannot_be_aligned(tmp_path: Path) -> None:
    """A capture sharing no packet with the others: "cannot align: <reason>", confidence 0, no offset;
    the JSON and the table say so, and the other captures keep their own status."""
    from tests.helpers.pcapgen import write_udp_pcap
    from xlayer.cli.main import main

    d = tmp_path / "b"
    _full_queue_bundle(d, ClockMap.from_params(0.25, -10.0, 1_795_000_000.0), seed=4)
    write_udp_pcap(d / "elsewhere.pcap", 300)
    man = json.loads((d / "bundle.json").read_text())
    man["captures"].append({"kind": "wired", "vantage": "elsewhere", "file": "elsewhere.pcap", "format": "pcap"})
    (d / "bundle.json").write_text(json.dumps(man))
    al = align_bundle(d)
    c = al.capture("elsewhere.pcap")
    assert c.method == "unmatched" and c.offset_s is None
    assert c.status.startswith("cannot align: ") and "matched" in c.status, c.status
    assert c.confidence == 0.0 and c.uncertainty_us is None and c.envelope_points == 0
    assert al.capture("client.pcap").status == "aligned"
    out = tmp_path / "out.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["align", str(d), "--json"]) == 0
    out.write_text(buf.getvalue())
    j = {x["file"]: x for x in json.loads(out.read_text())["captures"]}
    assert j["elsewhere.pcap"]["status"].startswith("cannot align: ") and j["elsewhere.pcap"]["offset_s"] is None
    assert "cannot align" in al.table()


def test_identical_directions_fit() -> None:
    """Two captures that are copies of one file: both directions' envelopes are the same line, and the
    fit is the zero offset (choosing the envelopes used once compared their arrays: a ValueError)."""
    x = np.arange(0, 2e9, 1e6)
    y = np.zeros_like(x)
    fit = fitm.two_way(x, y, x.copy(), y.copy())
    assert fit.a == 0.0 and fit.s == 0.0 and fit.n_floor == 2 * len(x)


@pytest.mark.parametrize("seed", range(6, 12))
def test_no_size_term_without_a_size_effect(seed: int) -> None:
    """Stamps in ns across 4 s, ACKs of 52 and 56 bytes and two 1500-byte packets, no size effect at
    all: the size column's spread is fifteen orders of magnitude below the time's.  A pseudo-inverse cut
    it to 0 there and took whatever slope the two packets' noise gave for a certain one; the size term
    must stay 0."""
    rng = np.random.default_rng(seed)
    n, span = 4000, 4 * NS
    x = np.sort(rng.uniform(-span / 2, span / 2, n))
    size = rng.choice(np.array([52.0, 56.0]), n)
    size[rng.choice(n, 2, replace=False)] = 1500.0
    y = 3e5 + 45e-6 * x + rng.normal(0, 28e3, n)
    assert fitm._size_term(x, y, size, 20e3) == 0.0


@pytest.mark.parametrize("seed", range(40, 44))
def test_packets_left_on_the_wrong_side_widen_the_uncertainty(seed: int) -> None:
    """A fifth of the forward packets, matched by identity, arrive 300 us before the reverse envelope
    allows (the floor bends: no line holds them).  They are left out of the fit, said so, and the
    offset's uncertainty grows by how far the line misses them, so that a chain prefers another path."""
    skew = SKEWS[seed % 4]
    xf, yf, xr, yr, theta = delay_table(seed, skew_ppm=skew, rev_rate=250, retry_share=0.1)
    clean = fitm.two_way(xf, yf, xr, yr)
    rng = np.random.default_rng(seed)
    odd = rng.random(len(xf)) < 0.2
    bent = np.where(odd, theta(xf) - 60e3 - 300e3 + rng.normal(0, 20e3, len(xf)), yf)
    fit = fitm.two_way(xf, bent, xr, yr)
    assert any("wrong side of the line" in n for n in fit.notes), fit.notes
    assert not any("wrong side of the line" in n for n in clean.notes), clean.notes
    assert fit.uncertainty_ns >= clean.uncertainty_ns + 200e3, (fit.uncertainty_ns, clean.uncertainty_ns)


def _kernel_stamps(t_ns: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Return stamps of events at t_ns as a host takes them: jitter N(0, 20 us) cut at 60 us, never
    earlier than the stamp before."""
    return np.maximum.accumulate(t_ns + np.clip(rng.normal(0, 20e3, len(t_ns)), -60e3, 60e3))


@pytest.mark.parametrize("seed", range(3))
def test_back_to_back_packets_with_clamped_stamps(seed: int) -> None:
    """Packets 3 us apart (a fast wired link) stamped by two hosts whose stamps never go backwards: most
    consecutive stamps repeat the one before, so first differences show no jitter at all.  Measured
    between packets a millisecond apart, the jitter is the stamps' (about 28 us for the pair), the
    floor's band holds the floor, and the skew is right (a band of zero width gave 12-33 ppm)."""
    rng = np.random.default_rng(seed)
    n, skew = 40_000, 13.4e-6
    tf = np.cumsum(np.where(rng.random(n) < 0.02, rng.uniform(1e5, 2e6, n), 3_000.0))
    tr = np.sort(rng.uniform(0, tf[-1], n // 2))
    send_a, recv_b = _kernel_stamps(tf, rng), _kernel_stamps((tf + 11e3) * (1 + skew) + 2e9, rng)
    send_b, recv_a = _kernel_stamps(tr * (1 + skew) + 2e9, rng), _kernel_stamps(tr + 11e3, rng)
    x0 = send_a.mean()
    xf, yf, xr, yr = send_a - x0, recv_b - send_a, recv_a - x0, send_b - recv_a
    assert np.median(np.abs(np.diff(yf))) == 0.0          # what first differences would have seen
    assert 15e3 <= fitm.jitter_sigma(xf, yf) <= 40e3
    fit = fitm.two_way(xf, yf, xr, yr)
    assert abs(fit.s - skew) * 1e6 <= MAX_SKEW_ERR_PPM, (fit.s * 1e6, fit)


@pytest.mark.parametrize("seed", range(60, 64))
def test_skew_from_the_clean_direction_out_of_the_air(seed: int) -> None:
    """Into the air a packet waits for its backoff (0-15 slots of 9 us) and, more often as the run goes on,
    for frames it froze behind (50-300 us): a floor band holds part of that mix and tilted by 5-9 ppm.
    Out of the air (prefer="reverse") the delay is clean: it gives the skew."""
    rng = np.random.default_rng(seed)
    skew, span = SKEWS[seed % 4] * 1e-6, 4 * NS
    xf = np.sort(rng.uniform(-span / 2, span / 2, 1500))
    xr = np.sort(rng.uniform(-span / 2, span / 2, 600))
    frac = (xf + span / 2) / span
    back = rng.integers(0, 16, len(xf)) * 9e3
    frozen = np.where(rng.random(len(xf)) < 0.2 + 0.6 * frac, rng.uniform(50e3, 300e3, len(xf)), 0.0)
    queue = np.where(rng.random(len(xf)) < 0.3, rng.uniform(0.3e6, 3e6, len(xf)), 0.0)
    yf = 7e8 + skew * xf + 34e3 + back + frozen + queue + rng.normal(0, 20e3, len(xf))
    yr = 7e8 + skew * xr - 5e3 + rng.normal(0, 20e3, len(xr))
    fit = fitm.two_way(xf, yf, xr, yr, prefer="reverse")
    assert abs(fit.s - skew) * 1e6 <= MAX_SKEW_ERR_PPM, (fit.s * 1e6, skew * 1e6, fit)
