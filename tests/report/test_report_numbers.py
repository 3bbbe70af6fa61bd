"""Issue 13 (4), "one quantity, several numbers": the report shows the values `xlayer analyze --json` prints.

For two shipped samples (copied to tmp_path) the test runs `analyze --json` and `report` and reads the
page back: each incident's cause and confidence, every cause's summary, the flows table's goodputs,
the AP queue panel's counts against the downlink table and the incident's evidence (each saying its
span), one RTO per sentence, every rate named offered, forwarded or delivered, and human table headers.
"""
from __future__ import annotations

import html as html_mod
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.common import REPO

SAMPLES = ("sim-udp_overflow", "lab-delay_spike")


def _xlayer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "xlayer", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module", params=SAMPLES)
def outputs(request, tmp_path_factory) -> tuple[Path, dict, str]:
    """Return (bundle copy, analyze JSON, report HTML) of one sample."""
    src = REPO / "samples" / request.param
    if not (src / "bundle.json").is_file():
        pytest.skip(f"samples/{request.param} is not in this checkout")
    d = tmp_path_factory.mktemp("numbers") / request.param
    shutil.copytree(src, d)
    a = _xlayer("analyze", str(d), "--json", "-q", "--no-cache")
    assert a.returncode == 0, a.stderr[-3000:]
    out = d.parent / "report.html"
    r = _xlayer("report", str(d), "-o", str(out), "-q", "--no-cache")
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr[-3000:]
    return d, json.loads(a.stdout), out.read_text()


def _section(page: str, name: str) -> str:
    """Return the HTML between one h2 heading and the next."""
    start = page.index(f"<h2>{name}</h2>")
    nxt = page.find("<h2>", start + 5)
    return page[start:nxt if nxt > 0 else len(page)]


def _cells(table_html: str) -> list[list[str]]:
    """Return the body rows of the first table in the HTML as lists of cell HTML."""
    body = table_html[table_html.index("<tbody>"):table_html.index("</tbody>")]
    return [re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def _text(cell: str) -> str:
    return html_mod.unescape(re.sub(r"<[^>]+>", " ", cell)).strip()


def test_incident_causes_confidences_and_summaries_are_the_json_values(outputs):
    _, js, page = outputs
    inc_html = _section(page, "Incidents")
    if not js["incidents"]:
        assert "No incident" in inc_html
        return
    rows = [r for r in _cells(inc_html) if len(r) == 9]
    assert len(rows) == len(js["incidents"])
    for row, inc in zip(rows, js["incidents"]):
        assert _text(row[4]).split() == [inc["cause"], str(inc["confidence"])]
        others = [f"{c['cause']} {c['confidence']}" for c in inc["causes"][1:]]
        assert _text(row[5]) == (", ".join(others) or "-")
        shown = {html_mod.unescape(c): (html_mod.unescape(conf), html_mod.unescape(summary)) for c, conf, summary
                 in re.findall(r"<li><b>([^<]+)</b> \(([^)]+)\): ([^<]*)", row[8])}
        assert set(shown) == set(inc["evidence"])
        for c in inc["causes"]:
            assert shown[c["cause"]] == (str(c["confidence"]), inc["evidence"][c["cause"]]["summary"])


def test_flow_goodputs_are_the_json_values_with_their_units_and_meaning(outputs):
    _, js, page = outputs
    flows_html = _section(page, "Flows")
    heads = [_text(h) for h in re.findall(r"<th>(.*?)</th>", flows_html)]
    assert "goodput (Mbit/s)" in heads and "rate measured" in heads
    assert not [h for h in heads if "_" in h], heads                # no raw column names
    rows = _cells(flows_html)
    assert len(rows) == len(js["flows"]) > 0
    g, what = heads.index("goodput (Mbit/s)"), heads.index("rate measured")
    for row, f in zip(rows, js["flows"]):
        assert _text(row[0]) == f["flow"]
        assert float(_text(row[g]).replace(",", "")) == pytest.approx(f["goodput_bps"] / 1e6, abs=0.005)
        assert re.match(r"(offered|forwarded|delivered|as this capture saw it)", _text(row[what]))


def _visible(page: str) -> str:
    """Return the page's HTML without its scripts (the text a reader sees)."""
    return re.sub(r"<script.*?</script>", "", page, flags=re.S)


def test_no_raw_key_is_a_header_or_a_label(outputs):
    _, js, page = outputs
    text = _visible(page)
    for raw in ("goodput_bps", "offered_bps", "station_delivered_bps", "sojourn_p95_ms", "baseline_bps"):
        assert raw not in text, raw


def test_every_rate_in_the_ap_queue_evidence_is_named(outputs):
    _, js, _ = outputs
    for inc in js["incidents"]:
        ev = inc["evidence"].get("ap_queue_overflow")
        if not ev or "udp" not in ev["numbers"]:
            continue
        s, n = ev["summary"], ev["numbers"]
        clauses = [c for c in re.split(r"[;,] ", s) if "Mbit/s" in c]
        assert len(clauses) >= 3
        for c in clauses:
            assert re.search(r"\b(offered|forwarded|delivered)\b", c), (c, s)
        u = n["udp"][0]
        for name, key in (("offered", "offered_bps"), ("forwarded", "forwarded_bps"), ("delivered", "delivered_bps")):
            assert f"{name} {u[key] / 1e6:.1f} Mbit/s" in s, (name, s)
        assert f"dropped {n['dropped']:,} of {n['offered']:,} downlink packets" in s
        assert f"in {n['span_s']:.1f} s" in s                    # the span it counted over


def test_ap_queue_panel_counts_say_their_span_and_match_the_tables(outputs):
    d, js, page = outputs
    from xlayer.metrics import open_timeline

    tl = open_timeline(d)
    try:
        dl = tl.table("downlink")
    except KeyError:
        dl = None
    m = re.search(r'"text":"(AP queue: sojourn time and drops[^"]*)"', page)
    if dl is None or dl.height == 0:
        assert m is None
        return
    title = html_mod.unescape(m.group(1))
    dropped = int((dl["fate"] == "dropped_at_ap").sum())
    assert f"{dropped:,} of {dl.height:,} downlink packets dropped at the AP over the whole capture" in title
    for i, inc in enumerate(js["incidents"], 1):
        ev = inc["evidence"].get("ap_queue_overflow")
        if ev and "span_s" in ev["numbers"]:
            n = ev["numbers"]
            assert f"#{i}: {n['dropped']:,} of {n['offered']:,} in the {n['span_s']:.1f} s" in title


def test_one_rto_per_sentence_labelled(outputs):
    _, js, page = outputs
    for inc in js["incidents"]:
        ev = inc["evidence"].get("spurious_rto")
        if not ev:
            continue
        s, n = ev["summary"], ev["numbers"]
        rtos = re.findall(r"RTO[^0-9;]*?([0-9]+) ms", s)
        assert len(rtos) <= 1, s
        if rtos and n.get("host_rto_ms"):
            assert "host's" in s and int(rtos[0]) == round(n["host_rto_ms"])
        elif rtos:
            assert "estimated" in s and int(rtos[0]) == round(n["rto_estimate_ms"])
        assert html_mod.escape(s) in page


def test_lab_delay_spike_names_the_hosts_rto(outputs):
    d, js, _ = outputs
    if d.name != "lab-delay_spike":
        pytest.skip("the host-RTO case is the lab delay-spike sample's")
    ev = [i["evidence"]["spurious_rto"] for i in js["incidents"] if "spurious_rto" in i["evidence"]]
    assert ev, "the sample's spurious timeout was not found"
    assert "the host's smallest sampled RTO, 216 ms" in ev[0]["summary"]
    assert "397" not in ev[0]["summary"]                         # the capture's estimate stays in the numbers
    assert round(ev[0]["numbers"]["rto_estimate_ms"]) == 398
