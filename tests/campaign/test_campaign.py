"""`xlayer campaign`: 40 simulated bundles (4 conditions x 10 seeds) analyzed on Dask the same way by a
LocalCluster, by one worker and by a cluster of separate processes that loses a worker mid-campaign; the
dataset read by DuckDB and polars; the summary against an independent recomputation; the report in
headless Chromium; bad input, hostile tags, re-runs and an interrupt.

The bundles are simulated once per machine (`tests.campaign.sims`); the first run fills this test run's
decode cache, so the later runs cost little more than their clusters' start.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tests.campaign.sims import CONDITIONS, SEEDS, campaign_sims
from tests.helpers.common import REPO
from xlayer.campaign.run import run_campaign
from xlayer.campaign.store import MANIFEST, TABLES, Store, part_text, partition_dir
from xlayer.cli.main import main

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def bundles() -> list[Path]:
    return campaign_sims()


@pytest.fixture(scope="module")
def local(bundles, tmp_path_factory) -> Path:
    """The campaign run on a LocalCluster of 2 worker processes."""
    out = tmp_path_factory.mktemp("local") / "out"
    res = run_campaign([str(p) for p in bundles], out, workers=2, progress=False)
    assert len(res.done) == len(bundles) and not res.errors, res.errors
    return out


def _tables(out: Path) -> dict[str, pl.DataFrame]:
    """Return every table of a campaign's dataset, rows sorted, for comparison."""
    s = Store.read(out)
    return {name: (df := s.table(name)).sort(df.columns) for name in TABLES}


def _same(a: Path, b: Path) -> None:
    ta, tb = _tables(a), _tables(b)
    for name in TABLES:
        assert ta[name].height > 0 or name == "incidents", name
        assert ta[name].equals(tb[name], null_equal=True), name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_worker_and_a_cluster_of_processes_losing_a_worker_give_the_same_dataset(local, bundles, tmp_path):
    from distributed import Client

    one = tmp_path / "one"
    res = run_campaign([str(p) for p in bundles], one, workers=1, progress=False)
    assert len(res.done) == len(bundles)
    _same(local, one)

    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    dask = shutil.which("dask")
    if dask is None:
        pytest.skip("the dask command line is not installed")
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    killed: list[int] = []
    try:
        for i in range(2):
            # no nanny: a killed worker stays dead, its tasks must go to the other one
            procs.append(subprocess.Popen([dask, "worker", addr, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                           "--name", f"w{i}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        watcher = Client(addr, timeout="60s", set_as_default=False)
        watcher.wait_for_workers(2, timeout=120)
        pids = watcher.run(os.getpid)             # worker address: its process
        assert set(pids.values()) == {p.pid for p in procs[1:]}

        def kill_a_busy_worker(key, entry):  # noqa: ARG001 - on_result signature
            if killed:
                return
            # the worker that is running a bundle right now: its task must run again elsewhere
            busy = [w for w, tasks in watcher.processing().items() if tasks]
            pid = pids[busy[0] if busy else next(iter(pids))]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

        ext = tmp_path / "ext"
        res = run_campaign([str(p) for p in bundles], ext, scheduler=addr, progress=False,
                           on_result=kill_a_busy_worker)
        assert killed, "no worker was killed"
        deadline = time.monotonic() + 60
        while len(watcher.scheduler_info()["workers"]) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(watcher.scheduler_info()["workers"]) == 1       # the killed one is gone for good
        watcher.close()
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert len(res.done) == len(bundles) and not res.errors, res.errors
    _same(local, ext)


def test_dataset_is_hive_partitioned_and_duckdb_and_polars_read_it(local, bundles):
    duckdb = pytest.importorskip("duckdb")
    man = json.loads((local / MANIFEST).read_text())
    assert man["complete"] and man["counts"]["done"] == len(bundles) and man["counts"]["error"] == 0
    assert {"access", "sim", "seed"} <= set(man["partition_by"])
    glob = str(local / "summary" / "**" / "*.parquet")
    q = duckdb.sql(f"SELECT sim, access, count(*) AS n, avg(goodput_bps) AS g FROM read_parquet('{glob}', "
                   "hive_partitioning=true) GROUP BY sim, access ORDER BY sim, access").fetchall()
    assert [(r[0], r[1], r[2]) for r in q] == sorted((sc, f"802.11{std}", len(SEEDS)) for sc, std in CONDITIONS)
    assert all(r[3] > 1e6 for r in q)
    seeds = duckdb.sql(f"SELECT DISTINCT seed FROM read_parquet('{glob}', hive_partitioning=true) ORDER BY 1").fetchall()
    assert [s[0] for s in seeds] == list(SEEDS)           # a partition column, typed
    df = pl.read_parquet(glob, hive_partitioning=True)
    assert df.height == len(bundles) and {"sim", "access", "seed", "bundle"} <= set(df.columns)
    iv = pl.read_parquet(str(local / "intervals" / "**" / "*.parquet"), hive_partitioning=True)
    assert iv["bundle"].n_unique() == len(bundles)
    # every record read is counted, and the counts reach the manifest
    for b in man["bundles"].values():
        assert b["records"]["records"] > 0 and b["records"]["decoded"] + b["records"]["malformed"] == b["records"]["records"]


def test_summary_equals_an_independent_recomputation(local, capsys):
    from xlayer.campaign.summary import summarize

    s = summarize(local, ["sim", "access"])
    got = {(c["tags"]["sim"], c["tags"]["access"]): c for c in s["conditions"]}
    raw = pl.read_parquet(str(local / "summary" / "**" / "*.parquet"), hive_partitioning=True)
    metrics = ["goodput_bps", "rtt_ms", "owd_ms", "jitter_ms", "loss", "retry_fraction", "phy_rate_mbps"]
    ref = raw.group_by("sim", "access").agg(
        pl.len().alias("n"),
        *[e for m in metrics for e in (pl.col(m).mean().alias(f"{m}_mean"), pl.col(m).std().alias(f"{m}_std"),
                                       pl.col(m).median().alias(f"{m}_median"),
                                       pl.col(m).quantile(0.05, "linear").alias(f"{m}_p5"),
                                       pl.col(m).quantile(0.95, "linear").alias(f"{m}_p95"),
                                       pl.col(m).count().alias(f"{m}_n"))])
    assert len(got) == ref.height == len(CONDITIONS)
    t9 = 2.262      # Student t(0.975, 9 degrees of freedom): 10 seeds per condition
    for r in ref.iter_rows(named=True):
        c = got[(r["sim"], r["access"])]
        assert c["n"] == r["n"] == len(SEEDS)
        for m in metrics:
            st = c["metrics"][m]
            assert st["n"] == r[f"{m}_n"]
            for k in ("mean", "std", "median", "p5", "p95"):
                assert st[k] == pytest.approx(r[f"{m}_{k}"], rel=1e-9, abs=1e-12), (m, k)
            if st["n"] == 10:
                assert st["ci95"] == pytest.approx(t9 * r[f"{m}_std"] / math.sqrt(10), rel=1e-3), m
        inc = pl.read_parquet(str(local / "incidents" / "**" / "*.parquet"), hive_partitioning=True)
        want = (inc.filter((pl.col("sim") == r["sim"]) & (pl.col("access") == r["access"]))
                .group_by("cause").len().sort("cause"))
        assert {k: v["count"] for k, v in c["incidents"].items()} == dict(want.iter_rows())
        # per-second distribution over time
        iv = pl.read_parquet(str(local / "intervals" / "**" / "*.parquet"), hive_partitioning=True)
        first = iv.filter((pl.col("sim") == r["sim"]) & (pl.col("access") == r["access"]) & (pl.col("interval") == 0))
        row0 = next(x for x in c["intervals"] if x["interval"] == 0)
        assert row0["median"] == pytest.approx(first["goodput_bps"].median())
        assert c["class"] == "good"            # Mbit/s of goodput: far above 100 kB/s
    # the theory's parameters come from the measurements: RTS seen only where it was on, the PHY rate
    # the median's, aggregation on 802.11n only; and no condition measures more than its bound
    for std in ("g", "n"):
        steady, rts = got[("steady", f"802.11{std}")], got[("rts_cts", f"802.11{std}")]
        assert rts["bounds"]["parameters"]["rts"] and not steady["bounds"]["parameters"]["rts"]
        for c in (steady, rts):
            p = c["bounds"]["parameters"]
            assert p["rate_mbps"] == pytest.approx(c["metrics"]["phy_rate_mbps"]["median"])
            assert (p["ampdu"] > 1) == (std == "n") and p["standard"] == f"802.11{std}"
            assert 0 < c["measured_over_max"] <= 1.0 and 0 < c["measured_over_bianchi"] <= 1.0, c["bounds"]
    assert main(["campaign", "summary", str(local), "--by", "sim,access", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert [c["condition"] for c in js["conditions"]] == [c["condition"] for c in s["conditions"]]
    assert main(["campaign", "summary", str(local), "--by", "access", "--good", "1e9", "--bad", "1e8"]) == 0
    text = capsys.readouterr().out
    assert "access=802.11g: n=20, class unacceptable" in text and "measured / Bianchi" in text


def test_t_quantiles_and_normal_from_30():
    from xlayer.campaign.summary import stats, t_quantile

    assert t_quantile(1) is None and t_quantile(2) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(10) == pytest.approx(2.262, abs=1e-3) and t_quantile(30) == 1.96 == t_quantile(500)
    st = stats([1.0, 2.0, 3.0, None, float("nan")])
    assert st["n"] == 3 and st["mean"] == 2.0 and st["std"] == 1.0
    assert st["ci95"] == pytest.approx(4.3027 / math.sqrt(3), rel=1e-4)


# Every figure: its name and rows per glyph renderer, as BokehJS sees them once drawn.
INSPECT = """
const out = [];
for (const m of Bokeh.documents[0].all_models) {
  if (m.type !== "Figure") continue;
  const view = Bokeh.index.find_one ? Bokeh.index.find_one(m) : null;
  out.push({name: m.name, rows: m.renderers.filter(r => r.type === "GlyphRenderer").map(r => r.data_source.get_length()),
            drawn: view ? (view.has_finished() && view.el.getBoundingClientRect().height > 100) : null});
}
return out;
"""


def test_report_renders_every_panel_with_data(local, tmp_path, capsys):
    from tests.report.test_report import CHROMEDRIVER, CHROMIUM

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip(f"headless Chromium not installed ({CHROMIUM}, {CHROMEDRIVER})")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    page = tmp_path / "campaign.html"
    assert main(["campaign", "report", str(local), "-o", str(page), "--by", "sim,access"]) == 0
    assert "4 conditions" in capsys.readouterr().out
    text = page.read_text()
    # nothing fetched: offline
    assert not re.search(r"<script[^>]+src=[\"']?(https?:)?//", text, re.I)
    assert not re.search(r"<link[^>]+href=[\"']?(https?:)?//", text, re.I)
    assert text.count("xlayer report ") >= 40        # how to make each bundle's own report
    opts = Options()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1400,1000",
              f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    try:
        driver.get(page.resolve().as_uri())
        deadline = time.monotonic() + 60
        while not driver.execute_script("return !!(window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].is_idle)"):
            assert time.monotonic() < deadline, "the campaign report never rendered"
            time.sleep(0.1)
        figs = driver.execute_script(INSPECT)
        log = driver.get_log("browser")
    finally:
        driver.quit()
    names = {f["name"] for f in figs}
    assert names == {f"bars_{m}" for m in ("goodput_bps", "rtt_ms", "owd_ms", "jitter_ms", "loss", "retry_fraction",
                                           "phy_rate_mbps")} | {"cdf", "over_time", "causes"}
    for f in figs:
        assert f["rows"] and min(f["rows"]) > 0, f
        assert f["drawn"] is not False, f
    bars = next(f for f in figs if f["name"] == "bars_goodput_bps")
    assert len(bars["rows"]) == 3            # the bars, and the Bianchi and maximum bound markers
    assert not [e for e in log if e["level"] == "SEVERE"]


def _copy_bundle(src: Path, dst: Path, tags: dict) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("truth*"))
    man = json.loads((dst / "bundle.json").read_text())
    man["tags"] = tags
    (dst / "bundle.json").write_text(json.dumps(man))
    return dst


def test_bad_bundles_are_error_rows_hostile_tags_stay_inside_and_reruns_skip(bundles, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    _copy_bundle(bundles[0], src / "evil", {"access": "../../../escaped", "run": "a/b", "sim": "..", "x/../y": "<b>"})
    (src / "broken").mkdir()
    (src / "broken" / "bundle.json").write_text('{"xlayer_bundle": 1, "captures": "nope"}')
    (src / "nest").mkdir()
    _copy_bundle(bundles[1], src / "nest" / "ok", {"access": "802.11g", "run": "2"})
    # a capture cut in the middle of a record: analyzed all the same, the bytes it lost counted
    cut = _copy_bundle(bundles[2], src / "cut", {"access": "802.11g", "run": "1"}) / "server.pcap"
    cut.write_bytes(cut.read_bytes()[:-37])
    out = tmp_path / "out"
    res = run_campaign([str(src)], out, workers=1, progress=False)
    assert sorted(Path(p).name for p in res.done) == ["cut", "evil", "ok"]
    assert res.counts["skipped_bytes"] > 0
    assert list(res.errors) == [str((src / "broken").resolve())]
    err = res.errors[str((src / "broken").resolve())]
    assert "\n" not in err and "captures" in err
    man = json.loads((out / MANIFEST).read_text())
    assert man["counts"] == {**man["counts"], "done": 3, "error": 1}
    (cut_entry,) = [b for b in man["bundles"].values() if b["name"] == "cut"]
    assert cut_entry["records"]["skipped_bytes"] > 0 and man["counts"]["skipped_bytes"] == cut_entry["records"]["skipped_bytes"]
    real = out.resolve()
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_relative_to(src)]
    assert written and all(p.resolve().is_relative_to(real) for p in written), written
    assert not list(out.rglob("*.part")) and not (tmp_path / "escaped").exists()
    evil = next(b for b in man["bundles"].values() if b["name"] == "evil")
    assert all(".." not in Path(f).parts and "/escaped" not in f for f in evil["files"])
    # a re-run skips what is done and tries the failed bundle again
    res = run_campaign([str(src)], out, workers=1, progress=False)
    assert sorted(Path(p).name for p in res.skipped) == ["cut", "evil", "ok"] and len(res.errors) == 1 and not res.done
    # a changed bundle is analyzed again, its old files replaced
    ok = src / "nest" / "ok" / "bundle.json"
    man_ok = json.loads(ok.read_text())
    man_ok["tags"]["run"] = "3"
    ok.write_text(json.dumps(man_ok))
    res = run_campaign([str(src / "nest" / "ok")], out, workers=1, progress=False)
    assert [Path(p).name for p in res.done] == ["ok"]
    files = [f for b in json.loads((out / MANIFEST).read_text())["bundles"].values() if b["name"] == "ok"
             for f in b["files"]]
    assert files and all("run=3" in f for f in files)
    assert not list(out.rglob("run=2/*.parquet"))


def test_partition_text_escapes_every_path_trick():
    assert part_text("..") == "%2E%2E" and part_text(".") == "%2E"
    assert part_text("a/b") == "a%2Fb" and part_text("802.11g") == "802.11g"
    assert part_text("k=v") == "k%3Dv" and part_text("é") == "%C3%A9"
    long = part_text("x" * 1000)
    assert len(long) < 100 and long != part_text("x" * 999)
    assert partition_dir({"a": "1"}, ["a", "b"]) == "a=1/b=__HIVE_DEFAULT_PARTITION__"
    assert partition_dir({"a": ""}, ["a"]) == "a=__HIVE_DEFAULT_PARTITION__"


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys):
    bundles = [REPO / "samples" / "sim-baseline"]
    cases = [
        (["campaign", "run", str(bundles[0]), "-o", str(bundles[0] / "out")], "inside bundle"),
        (["campaign", "run", str(tmp_path / "missing"), "-o", str(tmp_path / "o1")], "no such file"),
        (["campaign", "run", str(bundles[0]), "-o", str(tmp_path / "o2"), "--scheduler", "nonsense://x:1"],
         "--scheduler"),
        (["campaign", "run", str(bundles[0]), "-o", str(tmp_path / "o3"), "--window", "5:1"], "--window"),
        (["campaign", "summary", str(tmp_path)], "not a campaign"),
    ]
    for argv, said in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and "Traceback" not in err, (argv, err)
    assert not (bundles[0] / "out").exists()


def test_interrupt_loses_nothing_done_and_a_rerun_goes_on(bundles, tmp_path):
    out = tmp_path / "out"
    some = [str(p) for p in bundles[:6]]
    # a decode cache of its own: every bundle decoded again, so the run is still going when interrupted
    env = {**os.environ, "XLAYER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "xlayer", "campaign", "run", *some, "-o", str(out), "--workers", "1",
                             "-q"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if json.loads((out / MANIFEST).read_text())["counts"]["done"] >= 1:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    man = json.loads((out / MANIFEST).read_text())
    done = [b for b in man["bundles"].values() if b["status"] == "done"]
    assert 1 <= len(done) < 6 and not man["complete"]
    for b in done:
        for f in b["files"]:
            pl.read_parquet(out / f)        # whole files
    assert not [p for p in out.rglob("*") if p.name.endswith(".part")]
    res = run_campaign(some, out, workers=1, progress=False)
    assert sorted(res.skipped) == sorted(b["path"] for b in done)
    assert len(res.done) == 6 - len(done) and json.loads((out / MANIFEST).read_text())["complete"]


def test_study001_notebook_compares_cases_as_a_campaign_with_confidence_intervals(local, bundles, tmp_path,
                                                                                  monkeypatch):
    pytest.importorskip("nbclient")
    from tests.test_notebooks import _bokeh_outputs, _run

    # the cases of the comparison: two shipped samples; the campaign: 10 seeds of two conditions
    cases = [REPO / "samples" / "sim-baseline", REPO / "samples" / "sim-rts_cts"]
    if not all((c / "bundle.json").is_file() for c in cases):
        pytest.skip("the shipped samples are not in this checkout")
    g = [str(p) for p in bundles if p.name.endswith("-g")]      # sim_bundle tags the standard last
    env = {"XLAYER_NB_BUNDLES": os.pathsep.join(map(str, cases)), "XLAYER_NB_CAMPAIGN_BUNDLES": os.pathsep.join(g),
           "XLAYER_NB_CAMPAIGN_DIR": str(tmp_path / "campaign")}
    nb, s = _run("study001_comparison.ipynb", env, tmp_path, monkeypatch)
    assert _bokeh_outputs(nb) == 4                  # the three of the comparison and the campaign's CI bars
    rows = {r["case"]: r for r in s["campaign"]}
    assert sorted(rows) == ["sim=rts_cts, access=802.11g", "sim=steady, access=802.11g"]
    for r in rows.values():
        assert r["n"] == len(SEEDS) and r["goodput_ci95_mbps"] > 0 and 0 < r["measured_over_max"] <= 1
    # the two conditions differ by more than their confidence intervals
    a, b = rows["sim=steady, access=802.11g"], rows["sim=rts_cts, access=802.11g"]
    assert a["goodput_mbps"] - a["goodput_ci95_mbps"] > b["goodput_mbps"] + b["goodput_ci95_mbps"]


def test_summary_of_a_crafted_campaign_uses_1_96_from_30_runs_and_classes_by_kB_per_s(tmp_path):
    from xlayer.campaign.summary import Thresholds, summarize

    store = Store(tmp_path)
    store.fix_partitions([{"location": "a"}], set())
    rates = {"hall": [150_000 * 8.0 + k for k in range(35)], "lab": [50_000 * 8.0] * 3, "cellar": [10_000 * 8.0] * 2}
    for loc, values in rates.items():
        for k, v in enumerate(values):
            key = f"{loc}{k}"
            summary = pl.DataFrame({"goodput_bps": [v], "rtt_ms": [float(k)], "phy_rate_mbps": [None]},
                                   schema={"goodput_bps": pl.Float64, "rtt_ms": pl.Float64, "phy_rate_mbps": pl.Float64})
            inc = pl.DataFrame({"cause": ["hidden_node"] * (k % 2)}, schema={"cause": pl.String})
            store.put_done(key, {"path": f"/x/{key}", "name": key, "tags": {"location": loc}},
                           {"summary": summary, "incidents": inc})
    s = summarize(tmp_path, ["location"], Thresholds(good=100, bad=30))
    by = {c["tags"]["location"]: c for c in s["conditions"]}
    assert {k: c["class"] for k, c in by.items()} == {"hall": "good", "lab": "bad", "cellar": "unacceptable"}
    hall = by["hall"]["metrics"]["goodput_bps"]
    assert hall["n"] == 35 and hall["ci95"] == pytest.approx(1.96 * hall["std"] / math.sqrt(35))
    assert by["hall"]["incidents"] == {"hidden_node": {"count": 17, "per_bundle": 17 / 35}}
    assert by["lab"]["metrics"]["goodput_bps"]["std"] == 0 and by["cellar"]["metrics"]["phy_rate_mbps"]["n"] == 0
    assert "no PHY rate" in by["lab"]["bounds"]["note"]
    assert all(Path(tmp_path / f).is_file() and "location=" in f for b in store.bundles.values() for f in b["files"])
