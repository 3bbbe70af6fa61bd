"""The notebooks run top to bottom (nbclient) against the samples, and what they compute matches the truth.

Each notebook reads its bundle(s) from environment variables (its parameter cell) and, when
XLAYER_NB_SUMMARY is set, writes what it found as JSON; the tests check those numbers against the
bundles' truth files. The shipped samples (samples/sim-*) are used when present, else the cached
ns-3 runs of `sim_bundle`.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.helpers.common import REPO, sim_bundle

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("bokeh")

NOTEBOOKS = REPO / "notebooks"
SAMPLES = REPO / "samples"
CELL_TIMEOUT_S = 300
# The cases study 001's comparison needs when the shipped samples are missing (each a cached ns-3 run).
FALLBACK_CASES = ("baseline", "performance_anomaly", "udp_overflow")


# jupyter_client starts a kernelspec whose argv[0] is a bare "python" with sys.executable.
_BARE = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}


def _sample_or_sim(scenario: str) -> Path:
    """Return samples/sim-SCENARIO if shipped, else the cached ns-3 run of seed 1."""
    p = SAMPLES / f"sim-{scenario}"
    return p if (p / "bundle.json").is_file() else sim_bundle(scenario, 1)


def _kernel_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Return a kernel that runs this interpreter: 'python3' when it does, else a kernelspec made for the test."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        argv0 = KernelSpecManager().get_kernel_spec("python3").argv[0]
    except NoSuchKernel:
        argv0 = None
    if argv0 is not None and (argv0 in _BARE or os.path.realpath(argv0) == os.path.realpath(sys.executable)):
        return "python3"
    name = "xlayer-test-python"
    spec = tmp_path / "jupyter" / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "xlayer tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(tmp_path / "jupyter"),
                                                                      os.environ.get("JUPYTER_PATH")])))
    return name


def _run(name: str, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         cwd: Path = NOTEBOOKS) -> tuple[object, dict]:
    """Execute notebooks/NAME with `env`, the kernel in `cwd` (Jupyter's: the notebook's directory);
    return the executed notebook and its JSON summary."""
    from nbclient import NotebookClient

    summary = tmp_path / "summary.json"
    for k, v in {**env, "XLAYER_NB_SUMMARY": str(summary)}.items():
        monkeypatch.setenv(k, v)
    # The kernel imports xlayer from this checkout even where the package is not installed.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    kernel = _kernel_name(tmp_path, monkeypatch)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=kernel,
                            resources={"metadata": {"path": str(cwd)}})
    client.execute()            # raises CellExecutionError (with the cell and traceback) on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert summary.is_file(), f"{name} did not write its summary"
    return nb, json.loads(summary.read_text())


def _bokeh_outputs(nb) -> int:
    """Return how many Bokeh documents the executed notebook shows."""
    return sum("application/vnd.bokehjs_exec.v0+json" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.mark.parametrize("name", ["explore_bundle.ipynb", "study001_comparison.ipynb"])
def test_committed_notebook_has_no_outputs(name):
    # CI executes them; committed outputs would be stale and bloat the diff.
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    assert any("parameters" in c.metadata.get("tags", []) for c in code)



def _decidable_drops(bundle: Path) -> int:
    """Return the AP queue drops truth has before each station's last delivery (a passive observer's limit).

    A packet that reached the AP after the last packet its station ever received cannot be told from
    one still queued when the captures stopped; the join calls those `unknown`.
    """
    t = pl.read_parquet(bundle / "truth_packets.parquet")
    last = t.filter(pl.col("fate") == "delivered").group_by("station").agg(pl.col("t_ap_wired_ns").max().alias("_l"))
    t = t.join(last, on="station").filter(pl.col("t_ap_wired_ns") <= pl.col("_l"))
    return t.filter(pl.col("fate") == "dropped_at_ap_queue").height

def test_explore_bundle_on_simulated_overflow(tmp_path, monkeypatch):
    bundle = _sample_or_sim("udp_overflow")
    truth = json.loads((bundle / "truth.json").read_text())
    nb, s = _run("explore_bundle.ipynb", {"XLAYER_NB_BUNDLE": str(bundle)}, tmp_path, monkeypatch)

    assert _bokeh_outputs(nb) >= 5              # stations, AP queue, flows, host state, overview
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert sorted(s["captures"]) == sorted(c["file"] for c in manifest["captures"] if c["kind"] in ("air", "wired"))

    # Retry fraction per station, from the sniffer, against the simulator's count of MPDUs sent.
    for st in truth["mac"]["stations"].values():
        assert st["mac"] in s["stations"], st["mac"]
        d = s["stations"][st["mac"]]["retry_fraction"] - st["retry_fraction"]
        assert -0.08 < d < 0.02, (st, d)      # a far station's unheard uplink retries make it a lower bound
    # Packets the AP dropped (wired side, never on the air) against the queue's own drop count.
    want = _decidable_drops(bundle)
    assert want > 0 and abs(s["fates"].get("dropped_at_ap", 0) - want) <= max(5, 0.05 * want), (s["fates"], want)
    # Goodput of each flow nearest its receiver against the bytes the station's application got.
    for f in truth["flows"]:
        got = [v for k, v in s["flows"].items()
               if k.startswith(f["proto"] + " ") and k.endswith(f">{f['dst']}:{f['dport']}")]
        assert len(got) == 1, (f["name"], list(s["flows"]))
        assert got[0]["goodput_bytes"] == pytest.approx(f["received_bytes"], rel=0.02), f["name"]
    assert s["host_samples"] == truth["run"]["tcp_samples"]
    # Every TCP retransmission the server sent, classed at the server's capture.
    at_server = sum(s["retransmissions"].get("server", {}).values())
    assert abs(at_server - truth["summary"]["tcp_retransmissions"]) <= 2, s["retransmissions"]
    assert isinstance(s["incidents"], int) and len(s["incident_causes"]) == s["incidents"]


def test_explore_bundle_on_wired_lab_sample(tmp_path, monkeypatch):
    # A bundle without an air capture: the radio sections must say so, not fail.
    bundle = SAMPLES / "lab-queue_overflow"
    if not (bundle / "bundle.json").is_file():
        pytest.skip(f"{bundle} is not in this checkout")
    truth = json.loads((bundle / "truth.json").read_text())
    _, s = _run("explore_bundle.ipynb", {"XLAYER_NB_BUNDLE": str(bundle)}, tmp_path, monkeypatch)
    assert s["stations"] == {} and s["fates"] == {}
    (transfer,) = [t for t in truth["transfers"] if t["proto"] == "tcp"]
    got = [v for k, v in s["flows"].items() if k.startswith("tcp ") and f":{transfer['port']}>" in k]
    assert len(got) == 1, list(s["flows"])
    assert got[0]["goodput_bps"] == pytest.approx(transfer["goodput_bps"], rel=0.05)
    # Linux counted the retransmissions the tbf drops caused; the server's capture sees each one.
    at_server = sum(s["retransmissions"].get("server", {}).values())
    assert abs(at_server - truth["summary"]["RetransSegs"]) <= 2, s["retransmissions"]


def test_explore_bundle_from_the_repository_root_finds_its_default_sample(tmp_path, monkeypatch):
    # `jupyter lab` started in the root, or nbclient/papermill run from there: the default bundle is
    # the checkout's samples/sim-udp_overflow all the same (no path relative to notebooks/).
    bundle = SAMPLES / "sim-udp_overflow"
    if not (bundle / "bundle.json").is_file():
        pytest.skip(f"{bundle} is not in this checkout")
    monkeypatch.delenv("XLAYER_NB_BUNDLE", raising=False)
    _, s = _run("explore_bundle.ipynb", {}, tmp_path, monkeypatch, cwd=REPO)
    assert Path(s["bundle"]).resolve() == bundle.resolve()
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert sorted(s["captures"]) == sorted(c["file"] for c in manifest["captures"] if c["kind"] in ("air", "wired"))
    assert s["incidents"] >= 1 and s["fates"].get("dropped_at_ap", 0) > 0


@pytest.mark.parametrize("name", ["explore_bundle.ipynb", "study001_comparison.ipynb"])
def test_notebooks_refer_to_nothing_missing(name):
    # default paths come from the checkout, not from the kernel's working directory
    text = "\n".join(c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells)
    assert "../" not in text and "Path.cwd().parent)" not in text
    # every repository path a notebook names in backquotes exists (samples/*, notebooks/..., docs/...)
    for ref in re.findall(r"`((?:samples|notebooks|docs|xlayer|tests)(?:/[\w.*-]+)*/?)`", text):
        assert list(REPO.glob(ref.rstrip("/"))), f"{name} names {ref}, which is not in the repository"
    assert "`docs`" not in text


def _comparison_bundles() -> list[Path]:
    shipped = sorted(SAMPLES.glob("sim-*/bundle.json"))
    if len(shipped) >= 2:
        return [p.parent for p in shipped]
    return [sim_bundle(c, 1) for c in FALLBACK_CASES]


def test_study001_comparison(tmp_path, monkeypatch):
    bundles = _comparison_bundles()
    env = {"XLAYER_NB_BUNDLES": os.pathsep.join(str(b) for b in bundles)}
    nb, s = _run("study001_comparison.ipynb", env, tmp_path, monkeypatch)
    assert _bokeh_outputs(nb) == 3              # throughput bars, retry bars, RTT CDF

    truths, paths = {}, {}
    for b in bundles:
        t = json.loads((b / "truth.json").read_text())
        truths[t["scenario"]] = t
        paths[t["scenario"]] = b
    assert s["cases"] == list(truths)
    # One row per case, every data flow with goodput.
    assert [r["case"] for r in s["comparison"]] == list(truths)
    assert all(r["flows"] >= 1 and r["goodput_min_mbps"] > 0 for r in s["comparison"]), s["comparison"]

    for case, t in truths.items():
        flows = [f for f in s["flows"] if f["case"] == case]
        assert len(flows) == len(t["flows"]), (case, flows)
        for f in flows:
            # Bytes, not rates: a flow that stalls early (walkaway) is seen for less than its scheduled run.
            assert f["truth_bytes"] is not None, (case, f["flow"])
            # (a station walking away: the last frames on the air before it is lost never reach it,
            # so the count nearest the receiver may run up to 3 % over what its application got)
            assert f["goodput_bytes"] == pytest.approx(f["truth_bytes"], rel=0.03), (case, f["label"])
        row = next(r for r in s["comparison"] if r["case"] == case)
        want = _decidable_drops(paths[case])
        assert abs(row["ap_drops"] - want) <= max(5, 0.05 * want), (case, row["ap_drops"], want)
        stations = {st["station"]: st for st in s["stations"] if st["case"] == case}
        for st in t["mac"]["stations"].values():
            # a sniffer by the AP misses a far station's failed uplink attempts: a lower bound there
            d = stations[st["mac"]]["retry_fraction"] - st["retry_fraction"]
            assert -0.08 < d < 0.02, (case, st, d)
        tcp = [f for f in flows if f["proto"] == "tcp"]
        assert {c["label"] for c in s["rtt_cdf"] if c["case"] == case} == {f["label"] for f in tcp}

    # Study 001's findings, as the notebook evaluates them from the tables.
    expected = 3 * ("performance_anomaly" in truths) + 2 * ("udp_overflow" in truths)
    assert len(s["claims"]) == expected
    assert all(c["holds"] for c in s["claims"]), [c for c in s["claims"] if not c["holds"]]


def test_kernel_resolves_to_this_interpreter(tmp_path, monkeypatch):
    from jupyter_client.kernelspec import KernelSpecManager

    name = _kernel_name(tmp_path, monkeypatch)
    argv0 = KernelSpecManager().get_kernel_spec(name).argv[0]
    if name == "python3":       # jupyter_client swaps a bare "python" for sys.executable when it starts it
        assert argv0 in _BARE or os.path.realpath(argv0) == os.path.realpath(sys.executable)
    else:
        assert argv0 == sys.executable
