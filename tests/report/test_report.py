"""The HTML report: every panel drawn with data in headless Chromium, incidents shaded, capture text escaped.

One bundle serves every test: the ns-3 delay_spike run (air, wired, client and host TCP state: every
layer) copied, with beacons of its sniffer capture renamed to hostile SSIDs.  The page is opened in
headless Chromium (Debian's `chromium` + `chromedriver`; skipped where absent) and inspected through
BokehJS's own document.  Set XLAYER_REPORT_SCREENSHOT=PATH to keep a full-page screenshot.
"""
from __future__ import annotations

import html as html_mod
import json
import os
import re
import shutil
import struct
import tempfile
import time
import zlib
from pathlib import Path

import pytest

from tests.helpers.common import REPO, sim_bundle

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SSID_SCRIPT = "<script>alert(1)</script>"
SSID_IMG = '<img src=x onerror="__xss=1">'
TAG_HTML = "<b onmouseover=alert(2)>lab</b>"


def _rename_beacons(pcap: Path, names: list[str]) -> int:
    """Rewrite the SSID of beacons in a pcap, cycling through names (FCS recomputed); return beacons renamed."""
    data = pcap.read_bytes()
    out = [data[:24]]
    pos, i = 24, 0
    while pos + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack_from("<IIII", data, pos)
        rec = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        rt = struct.unpack_from("<H", rec, 2)[0]
        frame = rec[rt:]
        body = 24 + 12                           # MAC header, then timestamp/interval/capability
        if incl == orig and len(frame) > body + 2 and frame[0] == 0x80 and frame[body] == 0:
            fcs = zlib.crc32(frame[:-4]) == struct.unpack("<I", frame[-4:])[0]
            old = frame[body + 1]
            ssid = names[i % len(names)].encode()
            i += 1
            new = frame[:body] + bytes([0, len(ssid)]) + ssid + frame[body + 2 + old:len(frame) - (4 if fcs else 0)]
            if fcs:
                new += struct.pack("<I", zlib.crc32(new))
            rec = rec[:rt] + new
            incl = orig = len(rec)
        out.append(struct.pack("<IIII", sec, frac, incl, orig) + rec)
    pcap.write_bytes(b"".join(out))
    return i


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """Return a copy of the delay_spike sim bundle whose beacons announce hostile SSIDs, with a hostile tag."""
    src = sim_bundle("delay_spike", 1)
    dst = tmp_path_factory.mktemp("report") / "hostile"
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix in (".pcap", ".jsonl", ".json"):
            shutil.copy(f, dst / f.name)
    assert _rename_beacons(dst / "sniffer.pcap", [SSID_SCRIPT, SSID_IMG]) >= 10
    man = json.loads((dst / "bundle.json").read_text())
    man["tags"]["site"] = TAG_HTML
    (dst / "bundle.json").write_text(json.dumps(man))
    return dst


@pytest.fixture(scope="module")
def timeline(bundle):
    from xlayer.metrics import open_timeline

    return open_timeline(bundle)


def _analysis(tl):
    """Return a hand-made Analysis (the report is tested apart from the analyzer): two incidents, hostile text."""
    from xlayer.attribution.incidents import Analysis, CauseFinding, FrameRef, Incident

    fs = tl.table("flow_series")
    t0 = int(fs["bin_start_ns"].min())
    flow = fs.sort("goodput_bytes", descending=True)["flow"][0]
    spike = Incident(t0 + 2_000_000_000, t0 + 2_600_000_000, "drop", [flow], ["00:00:00:00:00:03"],
                     {flow: {"baseline_bps": 24e6, "window_bps": 1.5e6}},
                     [CauseFinding("spurious_rto", 0.9, "RTO fired while the one-way delay rose above it",
                                   {"spurious": 87}, ["00:00:00:00:00:03"], [flow],
                                   [FrameRef("server.pcap", 4846, "spurious retransmission")]),
                      CauseFinding("mac_retries", 0.3, f"retries on {SSID_SCRIPT}", {"retry_fraction": 0.9})])
    other = Incident(t0 + 3_500_000_000, t0 + 3_700_000_000, "drop", [flow], findings=[])
    return Analysis([spike, other], [{"flow": flow, "goodput_bps": 2.3e7}], tl.alignment.as_json(),
                    notes=[f"note about {SSID_IMG}"])


@pytest.fixture(scope="module")
def report(timeline, tmp_path_factory):
    from xlayer.report.page import build_report

    steps = []
    out = tmp_path_factory.mktemp("page") / "report.html"
    rep = build_report(timeline, _analysis(timeline), out, progress=steps.append)
    rep.steps = steps
    return rep


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"headless Chromium not installed ({CHROMIUM}, {CHROMEDRIVER}: apt-get install chromium "
                    "chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--window-size=1400,1000"):
        opts.add_argument(a)
    profile = tempfile.mkdtemp(prefix="xlayer-chromium-")
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# Every figure: its name, title, rows per glyph renderer, shaded incident windows, whether its view drew.
INSPECT = """
const doc = Bokeh.documents[0];
const out = [];
for (const m of doc.all_models) {
  if (m.type !== "Figure") continue;
  const view = Bokeh.index.find_one ? Bokeh.index.find_one(m) : null;
  out.push({name: m.name, title: m.title.text,
            rows: m.renderers.filter(r => r.type === "GlyphRenderer").map(r => r.data_source.get_length()),
            glyphs: m.renderers.filter(r => r.type === "GlyphRenderer").map(r => r.glyph.type),
            boxes: m.center.filter(a => a.type === "BoxAnnotation").length,
            drawn: view ? (view.has_finished() && view.el.getBoundingClientRect().height > 100) : null});
}
return out;
"""


@pytest.fixture(scope="module")
def page(browser, report):
    """Return (figures as BokehJS sees them, browser log) once the report has rendered."""
    from selenium.common.exceptions import UnexpectedAlertPresentException

    browser.get(report.path.resolve().as_uri())
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if browser.execute_script(
                    "return !!(window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].is_idle)"):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the report's Bokeh document never became idle (did not render)")
    except UnexpectedAlertPresentException as exc:
        pytest.fail(f"an alert fired while the page loaded: capture text ran as script ({exc.alert_text})")
    figs = browser.execute_script(INSPECT)
    log = browser.get_log("browser")
    shot = os.environ.get("XLAYER_REPORT_SCREENSHOT")
    if shot:
        h = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1400, h + 50)
        time.sleep(0.5)
        browser.save_screenshot(shot)
    return figs, log


RTO_DATA = """
const f = [...Bokeh.documents[0].all_models].find(m => m.type === "Figure" && m.name === "rto");
return f.renderers.filter(r => r.type === "GlyphRenderer").map(
  r => [Array.from(r.data_source.data.x), Array.from(r.data_source.data.y)]);
"""


def test_every_panel_renders_with_data(browser, page, report):
    from xlayer.report.page import PANELS

    figs, log = page
    rto_data = browser.execute_script(RTO_DATA)
    assert report.omitted == {}, report.omitted          # this bundle has every layer
    assert report.panels == list(PANELS.values())
    by = {f["name"]: f for f in figs}
    assert set(by) == set(PANELS)
    for key, f in by.items():
        assert f["title"].startswith(PANELS[key])
        assert f["rows"] and min(f["rows"]) > 0, f     # every glyph has data
        assert f["boxes"] == 2, f                        # both incident windows shaded
        assert f["drawn"] is not False, f
    # Study 003's plot: rto and srtt lines and the one-way delay beside them; in the spike the delay
    # (~950 ms) rises far above the RTO (200-800 ms) -- the spurious timeouts.
    assert by["rto"]["glyphs"] == ["Line", "Line", "Scatter"]
    (rx, ry), _, (ox, oy) = rto_data
    peak = max(range(len(oy)), key=lambda i: oy[i] if oy[i] is not None else -1)
    rto_then = [y for x, y in zip(rx, ry) if x is not None and y is not None and x <= ox[peak]][-1]
    assert oy[peak] > 900 and oy[peak] > 1.5 * rto_then, (oy[peak], rto_then)
    assert by["retrans"]["glyphs"] == ["VBar"]           # spurious only, at the sender
    assert by["delay"]["glyphs"] == ["VArea"] * 7        # the delay table's parts, stacked
    errors = [e for e in log if e["level"] == "SEVERE"]
    assert not errors, errors
    assert any(s.startswith("panel: ") for s in report.steps) and report.steps[-1] == "writing page"


def test_page_is_offline_and_bounded(report):
    html = report.path.read_text()
    assert not re.search(r"<script[^>]+src=[\"']?(https?:)?//", html, re.I)
    assert not re.search(r"<link[^>]+href=[\"']?(https?:)?//", html, re.I)
    assert "Bokeh" in html and 0.5e6 < report.size_bytes < 5e6


def test_capture_text_is_shown_not_run(browser, page, report):
    from selenium.common.exceptions import NoAlertPresentException

    text = browser.execute_script("return document.body.textContent")
    for s in (SSID_SCRIPT, SSID_IMG, TAG_HTML):
        assert s in text                                 # shown literally, as text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when no alert fired
    assert browser.execute_script("return typeof window.__xss") == "undefined"
    assert browser.execute_script("return document.querySelectorAll('img, b[onmouseover]').length") == 0
    html = report.path.read_text()
    assert SSID_SCRIPT not in html and SSID_IMG not in html and TAG_HTML not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_downsampling_keeps_spikes():
    import numpy as np

    from xlayer.report.page import _thin

    x = np.arange(1_000_000, dtype=np.float64)
    y = np.zeros_like(x)
    y[123_457] = 9.0
    y[765_433] = -4.0
    tx, ty = _thin(x, y, 20_000)
    assert len(tx) <= 20_000 and ty.max() == 9.0 and ty.min() == -4.0
    assert np.all(np.diff(tx) > 0)


def test_wired_only_bundle_leaves_panels_out_with_reasons(tmp_path):
    """A lab bundle (wired + host state, no radio) draws what it has and says why the rest is absent."""
    from xlayer.attribution.incidents import Analysis
    from xlayer.metrics import open_timeline
    from xlayer.report.page import PANELS, build_report

    lab = REPO / "samples" / "lab-delay_spike"
    if not (lab / "bundle.json").exists():
        pytest.skip("samples/lab-delay_spike not present")
    tl = open_timeline(lab)
    rep = build_report(tl, Analysis([], [], {}), tmp_path / "r.html")
    assert PANELS["goodput"] in rep.panels and PANELS["rto"] in rep.panels
    assert "no air" in rep.omitted[PANELS["rssi"]]
    html = (tmp_path / "r.html").read_text()
    for title, why in rep.omitted.items():
        assert html_mod.escape(title) in html and html_mod.escape(why) in html


def test_cli_writes_the_report(bundle, tmp_path, capsys):
    pytest.importorskip("xlayer.attribution.analyze")
    from xlayer.cli.main import main

    out = tmp_path / "cli.html"
    assert main(["report", str(bundle), "-o", str(out), "-q"]) == 0
    said = capsys.readouterr().out
    assert "10 panels" in said and str(out) in said
    html = out.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and SSID_SCRIPT not in html


def test_shipped_hostile_ssid_sample(browser, tmp_path):
    """samples/sim-baseline's network is named `<script>alert(1)</script>`: its page shows it, runs nothing."""
    from selenium.common.exceptions import (
        NoAlertPresentException,
        UnexpectedAlertPresentException,
    )

    from xlayer.attribution.analyze import analyze
    from xlayer.metrics import open_timeline
    from xlayer.report.page import build_report

    sample = REPO / "samples" / "sim-baseline"
    if not (sample / "bundle.json").is_file():
        pytest.skip("samples/sim-baseline is not in this checkout")
    tl = open_timeline(sample)
    rep = build_report(tl, analyze(tl), tmp_path / "baseline.html")
    try:
        browser.get(rep.path.resolve().as_uri())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not browser.execute_script(
                "return !!(window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].is_idle)"):
            time.sleep(0.1)
    except UnexpectedAlertPresentException as exc:
        pytest.fail(f"an alert fired: the SSID ran as script ({exc.alert_text})")
    assert "<script>alert(1)</script>" in browser.execute_script("return document.body.textContent")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when no alert fired
    figs = browser.execute_script(INSPECT)
    assert figs and all(f["rows"] and min(f["rows"]) > 0 for f in figs), figs
    if os.environ.get("XLAYER_REPORT_SCREENSHOT"):
        browser.set_window_size(1400, browser.execute_script("return document.documentElement.scrollHeight") + 50)
        time.sleep(0.5)
        browser.save_screenshot(os.environ["XLAYER_REPORT_SCREENSHOT"].replace(".png", "-baseline.png"))


def test_alignment_table_says_each_captures_status_and_uncertainty(tmp_path):
    """Issue 13 (3): the report flags captures not aligned well, with the status and uncertainty of each."""
    from dataclasses import replace

    from xlayer.attribution.incidents import Analysis
    from xlayer.metrics import open_timeline
    from xlayer.report.page import build_report

    lab = REPO / "samples" / "lab-delay_spike"
    if not (lab / "bundle.json").exists():
        pytest.skip("samples/lab-delay_spike not present")
    tl = open_timeline(lab)
    html = (build_report(tl, Analysis([], [], {}), tmp_path / "a.html"), (tmp_path / "a.html").read_text())[1]
    assert ">status<" in html and ">uncertainty (µs)<" in html and ">skew std. error (ppm)<" in html
    for c in tl.alignment.captures:
        assert html_mod.escape(c.status) in html
        if c.skew_se_ppm is not None:
            assert f"<td>{c.skew_se_ppm:.3f}</td>" in html.replace(" class=num", "")
    assert ("Not aligned well" in html) == any(c.status != "aligned" for c in tl.alignment.captures)
    # one capture made poor: it is named above the table
    c0 = tl.alignment.captures[-1]
    tl.alignment.captures[-1] = replace(c0, status="poor: <b>crafted</b> reason", uncertainty_us=1234.5)
    build_report(tl, Analysis([], [], {}), tmp_path / "b.html")
    html = (tmp_path / "b.html").read_text()
    assert "Not aligned well" in html and "poor: &lt;b&gt;crafted&lt;/b&gt; reason" in html and "1,234.5" in html
    # captures aligned across a long path: said once above the table, not as a poor fit
    assert "equally long both ways" not in html
    tl.alignment.captures[-1] = replace(c0, equal_delay_us=41_250.0, uncertainty_us=41_262.0)
    build_report(tl, Analysis([], [], {}), tmp_path / "c.html")
    html = (tmp_path / "c.html").read_text()
    assert f"Clocks of {html_mod.escape(c0.file)}: aligned taking the path" in html and "up to 41.2 ms each way" in html
