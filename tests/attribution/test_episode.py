"""The episode of a drop's root cause: the incident spans the MAC retries, or the slow station's traffic,
that began before the goodput fell."""
from __future__ import annotations

import polars as pl

from xlayer.attribution.analyze import _with_episodes
from xlayer.attribution.causes import mac_retries, performance_anomaly, rate_change
from xlayer.attribution.causes.base import Context, Window
from xlayer.attribution.drops import DropConfig
from xlayer.attribution.incidents import CauseFinding

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
STEP = NS // 10


def _attempts(retry_share: dict[int, float], steps: int = 100, per_step: int = 100, station: str = "A") -> pl.DataFrame:
    """Return `per_step` transmissions every 0.1 s for `steps` steps; in step k a share retry_share.get(k, 0.03)
    of them (evenly spread, no randomness) are retries."""
    ts, retry = [], []
    for k in range(steps):
        share = retry_share.get(k, 0.03)
        n_retry = round(share * per_step)
        for i in range(per_step):
            ts.append(T0 + k * STEP + i * (STEP // per_step))
            retry.append(i * n_retry // per_step != (i + 1) * n_retry // per_step)
    return pl.DataFrame({"ts_ns": ts, "station": [station] * len(ts), "retry": retry})


AIR = {"capture_file": pl.Utf8, "frame": pl.Int64, "ts_ns": pl.Int64, "wlan_type": pl.UInt8, "wlan_subtype": pl.UInt8,
       "wlan_ta": pl.Utf8, "wlan_ra": pl.Utf8}


class _Ctx(Context):
    """The tables a cause's episode reads: transmissions (`attempts`) and the air's frames (none unless
    given), under the analysis's own window filters."""

    def __init__(self, att: pl.DataFrame, quiet: list[tuple[int, int]], air: pl.DataFrame | None = None) -> None:
        super().__init__(None, DropConfig())
        att = att if "capture_file" in att.columns else att.with_columns(pl.lit("air.pcap").alias("capture_file"))
        self.tables = {"attempts": att, "air_frames": pl.DataFrame(schema=AIR) if air is None else air}
        self.quiet = quiet

    def table(self, name: str) -> pl.DataFrame:
        return self.tables[name]


def _finding() -> CauseFinding:
    return CauseFinding("mac_retries", 0.8, "retries", stations=["A"])


def _at(step: int) -> int:
    return T0 + step * STEP


def test_on_off_retries_before_and_after_the_drop_make_its_episode():
    # retries 40 % from 4.0 s to 6.0 s, with one quiet step (5.0 s) inside: a hidden node's bursts
    burst = {k: 0.4 for k in range(40, 60) if k != 50}
    drop = Window(_at(52), _at(56))
    ctx = _Ctx(_attempts(burst), [(drop.start_ns, drop.end_ns)])
    assert mac_retries.episode(ctx, drop, _finding()) == (_at(40), _at(60))


def test_retries_as_high_all_along_make_no_episode():
    everywhere = {k: 0.4 for k in range(100)}
    drop = Window(_at(52), _at(56))
    ctx = _Ctx(_attempts(everywhere), [(drop.start_ns, drop.end_ns)])
    assert mac_retries.episode(ctx, drop, _finding()) is None


def test_a_burst_apart_from_the_drop_by_more_than_the_merge_gap_is_not_its_episode():
    # an earlier burst (3.0-3.5 s), then 0.5 s of usual retries, then the drop's own (4.0-4.6 s)
    burst = {**{k: 0.4 for k in range(30, 35)}, **{k: 0.4 for k in range(40, 46)}}
    drop = Window(_at(41), _at(46))
    ctx = _Ctx(_attempts(burst), [(drop.start_ns, drop.end_ns)])
    assert mac_retries.episode(ctx, drop, _finding()) == (_at(40), _at(46))


def test_no_elevated_step_inside_the_drop_makes_no_episode():
    burst = {k: 0.4 for k in range(30, 35)}
    drop = Window(_at(52), _at(56))
    ctx = _Ctx(_attempts(burst), [(drop.start_ns, drop.end_ns)])
    assert mac_retries.episode(ctx, drop, _finding()) is None


def _rts(deaf: range, steps: int = 100, per_step: int = 20) -> pl.DataFrame:
    """Return the AP's RTS/CTS exchanges with A, `per_step` each 0.1 s step; in the steps of `deaf` A
    answers none (RTS after RTS), elsewhere a CTS follows each RTS."""
    rows = []
    for k in range(steps):
        for i in range(per_step):
            t = T0 + k * STEP + i * (STEP // per_step)
            rows.append((t, 11, "ap", "A"))
            if k not in deaf:
                rows.append((t + 50_000, 12, None, "ap"))
    return pl.DataFrame([("air.pcap", n + 1, t, 1, sub, ta, ra) for n, (t, sub, ta, ra) in enumerate(rows)],
                        schema=AIR, orient="row")


def test_a_deaf_receiver_behind_rts_cts_makes_an_episode_of_unanswered_rts():
    # A hears nothing from 4.0 s to 6.0 s: the AP's RTS go unanswered and no data frame goes out
    # (no retry bit set anywhere); the goodput falls from 5.5 s
    att = _attempts({}).filter((pl.col("ts_ns") < _at(40)) | (pl.col("ts_ns") >= _at(60)))
    drop = Window(_at(55), _at(65))
    ctx = _Ctx(att, [(drop.start_ns, drop.end_ns)], _rts(range(40, 60)))
    assert mac_retries.episode(ctx, drop, _finding()) == (_at(40), _at(60))
    # the same RTS, every one answered: no failure, no episode
    assert mac_retries.episode(_Ctx(att, [(drop.start_ns, drop.end_ns)], _rts(range(0))), drop, _finding()) is None


def test_an_incident_widens_to_its_episode_but_not_into_its_neighbour():
    burst = {k: 0.4 for k in range(40, 60)}
    drop = Window(_at(52), _at(56))
    earlier = Window(_at(30), _at(45))          # a drop of its own, explained by something else
    ctx = _Ctx(_attempts(burst), [(earlier.start_ns, earlier.end_ns), (drop.start_ns, drop.end_ns)])
    other = CauseFinding("ap_queue_overflow", 0.9, "queue")
    out = _with_episodes(ctx, [(earlier, [other]), (drop, [_finding()])])
    (w0, _), (w1, f1) = out
    assert (w0.start_ns, w0.end_ns) == (earlier.start_ns, earlier.end_ns)
    assert (w1.start_ns, w1.end_ns) == (earlier.end_ns, _at(60))
    assert f1[0].numbers["episode"] == [earlier.end_ns / NS, _at(60) / NS]
    assert "before the goodput fell" in f1[0].summary


def _air(slow: dict[int, float], steps: int = 100, trickle: tuple[int, ...] = ()) -> pl.DataFrame:
    """Return transmissions every 0.1 s: station F at 54 Mbit/s throughout (60 frames of 0.25 ms a step),
    and in step k of `slow` station S at that PHY rate (Mbit/s) with 20 frames of 1500 B (2 in the
    steps of `trickle`)."""
    rows = []
    for k in range(steps):
        for i in range(60):
            t = T0 + k * STEP + i * (STEP // 60)
            rows.append((t, t - 250_000, "F", 54.0))
        if k in slow:
            air = int(1500 * 8 / slow[k] * 1000)            # ns
            for i in range(2 if k in trickle else 20):
                t = T0 + k * STEP + i * (STEP // 20) + STEP // 40
                rows.append((t, t - air, "S", slow[k]))
    return pl.DataFrame(rows, schema={"ts_ns": pl.Int64, "tx_start_ns": pl.Int64, "station": pl.Utf8,
                                      "rate_mbps": pl.Float64}, orient="row")


def _slow_finding() -> CauseFinding:
    hog = {"station": "S", "rate_mbps": 6.0, "others_rate_mbps": 54.0}
    return CauseFinding("performance_anomaly", 0.8, "slow", {"hog": hog}, stations=["S"])


def test_the_anomaly_spans_the_slow_stations_traffic_around_the_drop():
    # S sends at 6 Mbit/s from 4.0 s to 7.0 s; the others' goodput falls only from 5.5 s to 6.0 s
    drop = Window(_at(55), _at(60))
    ctx = _Ctx(_air({k: 6.0 for k in range(40, 70)}), [(drop.start_ns, drop.end_ns)])
    assert performance_anomaly.episode(ctx, drop, _slow_finding()) == (_at(40), _at(70))


def test_the_anomaly_ends_where_the_slow_station_sends_fast_or_little():
    # S at 6 Mbit/s from 4.0 s to 6.0 s, then at 48 Mbit/s (its link recovered) to 7.0 s; before 4.0 s it
    # sends a trickle at 6 Mbit/s (2 frames a step): not the air it took in the drop
    slow = {k: 6.0 for k in range(10, 60)} | {k: 48.0 for k in range(60, 70)}
    drop = Window(_at(50), _at(58))
    ctx = _Ctx(_air(slow, trickle=tuple(range(10, 40))), [(drop.start_ns, drop.end_ns)])
    assert performance_anomaly.episode(ctx, drop, _slow_finding()) == (_at(40), _at(60))


def test_no_slow_traffic_in_the_drop_makes_no_anomaly_episode():
    drop = Window(_at(55), _at(60))
    ctx = _Ctx(_air({k: 6.0 for k in range(20, 40)}), [(drop.start_ns, drop.end_ns)])
    assert performance_anomaly.episode(ctx, drop, _slow_finding()) is None
    # nor a finding that names no rate below the others'
    f = CauseFinding("performance_anomaly", 0.8, "slow", {"hog": {"station": "S", "rate_mbps": 54.0,
                                                                   "others_rate_mbps": 54.0}}, stations=["S"])
    assert performance_anomaly.episode(_Ctx(_air({k: 6.0 for k in range(40, 70)}), []), drop, f) is None


def _walk(rates: dict[int, float], steps: int = 100, per_step: int = 40) -> pl.DataFrame:
    """Return A's downlink transmissions, `per_step` every 0.1 s, at 54 Mbit/s or in step k at rates[k]
    (step k absent from the capture when rates[k] is 0: the station gone)."""
    rows = [(T0 + k * STEP + i * (STEP // per_step), "A", "down", rates.get(k, 54.0), False)
            for k in range(steps) if rates.get(k, 54.0) > 0 for i in range(per_step)]
    return pl.DataFrame(rows, schema={"ts_ns": pl.Int64, "station": pl.Utf8, "direction": pl.Utf8,
                                      "rate_mbps": pl.Float64, "retry": pl.Boolean}, orient="row")


def _fall(usual: float = 54.0) -> CauseFinding:
    return CauseFinding("rate_change", 0.9, "fell", {"rate_outside_mbps": usual}, stations=["A"])


def test_a_rate_falling_before_the_goodput_makes_the_rate_changes_episode():
    # A walks away from 4.0 s: 48 Mbit/s (not yet a fall), 36 from 4.5 s, 18 from 5.5 s, gone at 6.5 s;
    # the goodput falls only at 5.8 s
    rates = {**{k: 48.0 for k in range(40, 45)}, **{k: 36.0 for k in range(45, 55)},
             **{k: 18.0 for k in range(55, 65)}, **{k: 0.0 for k in range(65, 100)}}
    drop = Window(_at(58), _at(65))
    ctx = _Ctx(_walk(rates), [(drop.start_ns, drop.end_ns)])
    assert rate_change.episode(ctx, drop, _fall()) == (_at(45), _at(65))
    # measured against the station's own usual rate: from 30 Mbit/s, 36 is no fall
    slow = {**rates, **{k: 30.0 for k in range(45)}}
    assert rate_change.episode(_Ctx(_walk(slow), [(drop.start_ns, drop.end_ns)]), drop, _fall(30.0)) == (_at(55), _at(65))


def test_the_rate_a_station_held_before_its_walk_is_its_usual_one():
    # outside the drop the station spent 1.5 s walking at 36 and 18 Mbit/s: its rate outside the drops is
    # 30, but it held 54 for 4 s before; each step under 0.8 of that is the fall
    rates = {**{k: 36.0 for k in range(40, 50)}, **{k: 18.0 for k in range(50, 65)}, **{k: 0.0 for k in range(65, 100)}}
    drop = Window(_at(58), _at(65))
    ctx = _Ctx(_walk(rates), [(drop.start_ns, drop.end_ns)])
    assert rate_change.episode(ctx, drop, _fall(30.0)) == (_at(40), _at(65))
    # a rate held for less than half a second before is not one the link carried
    brief = {**{k: 30.0 for k in range(40)}, 30: 54.0, 31: 54.0, 32: 54.0, **rates}
    assert rate_change.episode(_Ctx(_walk(brief), [(drop.start_ns, drop.end_ns)]), drop, _fall(30.0)) == (_at(50), _at(65))


def test_a_condition_that_took_in_a_drop_widens_to_the_drops_root_episode():
    rates = {**{k: 36.0 for k in range(40, 50)}, **{k: 18.0 for k in range(50, 65)}, **{k: 0.0 for k in range(65, 100)}}
    cond = Window(_at(55), _at(65), kind="sustained", drop=["f"])
    ctx = _Ctx(_walk(rates), [(cond.start_ns, cond.end_ns)])
    ((w, found),) = _with_episodes(ctx, [(cond, [_fall(30.0)])])
    assert (w.start_ns, w.end_ns) == (_at(40), _at(65)) and "before the condition's window" in found[0].summary
    # a condition without a drop in it has no root to widen by
    quiet = Window(_at(55), _at(65), kind="sustained")
    ((w, _),) = _with_episodes(ctx, [(quiet, [_fall(30.0)])])
    assert (w.start_ns, w.end_ns) == (quiet.start_ns, quiet.end_ns)


def test_no_fallen_step_in_the_drop_makes_no_rate_change_episode():
    rates = {k: 18.0 for k in range(20, 40)}
    drop = Window(_at(58), _at(65))
    assert rate_change.episode(_Ctx(_walk(rates), [(drop.start_ns, drop.end_ns)]), drop, _fall()) is None
