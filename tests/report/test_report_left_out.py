"""Issue 13 (2): flows that drop detection leaves out are listed, with why, in the JSON and the report.

The report's flows table was empty while its goodput chart drew the flows.  Now the analysis carries
`flows_left_out` (`drops.left_out`: the numbers that decided it) and the page shows them under Flows;
with no flow watched at all, the incidents section says nothing could be seen rather than "no drop".
"""
from __future__ import annotations

import html as html_mod
import re
import shutil

import pytest

from tests.helpers.common import REPO
from xlayer.attribution.analyze import analyze
from xlayer.attribution.drops import DropConfig, data_flows
from xlayer.metrics import open_timeline
from xlayer.report.page import build_report


def _rows(page: str, cls: str) -> list[list[str]]:
    m = re.search(rf'<table class="?{cls}"?>(.*?)</table>', page, re.S)
    assert m, f"no {cls} table"
    return [[html_mod.unescape(re.sub(r"<[^>]+>", " ", c)).split()[0] if c.strip() else ""
             for c in re.findall(r"<td>(.*?)</td>", r, re.S)]
            for r in re.findall(r"<tr>(.*?)</tr>", m.group(1), re.S) if "<td>" in r]


@pytest.fixture(scope="module")
def tl(tmp_path_factory):
    d = tmp_path_factory.mktemp("lo") / "b"
    shutil.copytree(REPO / "samples" / "lab-baseline", d)
    return open_timeline(d, cache=False)


def test_every_flow_left_out_is_listed_with_its_reason(tl, tmp_path) -> None:
    cfg = DropConfig(min_rate_bps=1e12)          # no flow reaches it: every one is left out
    an = analyze(tl, cfg)
    seen = set(tl.table("flows")["flow"].to_list())
    assert an.flows == [] and an.incidents == []
    lo = {r["flow"]: r for r in an.flows_left_out}
    assert set(lo) == seen
    assert an.as_json()["flows_left_out"] == an.flows_left_out
    for r in lo.values():
        assert r["reason"] in ("below_rate", "no_payload", "below_rate_and_too_short")
        assert (r["reason"] == "no_payload") == (r["payload_bytes"] == 0)
    page = (build_report(tl, an, tmp_path / "r.html"), (tmp_path / "r.html").read_text())[1]
    rows = _rows(page, "flows_left_out")
    assert len(rows) == len(seen)
    assert "none could be seen" in page and "fell well below" not in page


def test_default_thresholds_list_only_what_they_leave_out(tl, tmp_path) -> None:
    cfg = DropConfig()
    an = analyze(tl, cfg)
    kept = set(data_flows(tl.table("flows"), cfg)["flow"].to_list())
    assert kept and {f["flow"] for f in an.flows} == kept
    assert {r["flow"] for r in an.flows_left_out} == set(tl.table("flows")["flow"].to_list()) - kept
    page = (build_report(tl, an, tmp_path / "r.html"), (tmp_path / "r.html").read_text())[1]
    assert len(_rows(page, "flows_left_out")) == len(an.flows_left_out)
    assert "none could be seen" not in page


def test_header_names_the_doubts_and_exclusions(tl, tmp_path) -> None:
    an = analyze(tl, DropConfig(min_rate_bps=1e12))
    page = (build_report(tl, an, tmp_path / "r.html"), (tmp_path / "r.html").read_text())[1]
    row = re.search(r"<th>doubts, exclusions</th><td>(.*?)</td></tr>", page, re.S)
    assert row and an.notes
    shown = [html_mod.unescape(x) for x in re.findall(r"<li>(.*?)</li>", row.group(1), re.S)]
    assert shown[0] == an.notes[0]
    assert len(shown) == min(len(an.notes), 4)
