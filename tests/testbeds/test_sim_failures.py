"""A simulation that fails or is stopped says why in one line and leaves nothing half made.

The stderr of the first tests is shaped as ns-3 3.44 printed it for `xlayer sim random --seed 1147`
(an assertion inside ns-3's own fragmentation code, then cppyy's handler listing every thread and
frame)."""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers.common import REPO, signal_once
from xlayer.testbeds.sim.run import child_failure

HAVE_NS3 = importlib.util.find_spec("ns") is not None

FRAMES = "\n".join(f"#{i} 0x00007fa9 in _PyEval_EvalFrameDefault (tstate=<optimized out>) at Python/ceval.c:4769"
                   for i in range(30, 60))
CRASH = f"""NS_ASSERT failed, cond="m_buffer.GetSize() >= start + length", +2.332304508s 1 file=/b/src/network/model/packet.cc, line=233
NS_FATAL, terminating
terminate called without an active exception
 *** Break *** abort

Thread 2 (Thread 0x7fa9639ff6c0 (LWP 2478) "python3"):
#14 0x00007fa935d17f00 in ns3::FatalImpl::FlushStreams() () from libns3.44-core.so
#15 0x00007fa935d180ab in ns3::Packet::CreateFragment(unsigned int, unsigned int) const () from libns3.44-network.so
#16 0x00007fa9335607a3 in ns3::FrameExchangeManager::GetNextFragment() () from libns3.44-wifi.so
#17 0x00007fa93356a6b6 in ns3::FrameExchangeManager::ReceivedNormalAck(ns3::Ptr<ns3::WifiMpdu>) () from libns3.44-wifi.so
{FRAMES}
"""


def test_an_ns3_assertion_is_reported_with_where_it_failed() -> None:
    msg = child_failure(CRASH)
    assert msg.startswith('NS_ASSERT failed, cond="m_buffer.GetSize() >= start + length"')
    assert "terminate called without an active exception" in msg
    # the first ns-3 function below the packet helpers it failed in
    assert msg.endswith("(in ns3::FrameExchangeManager::GetNextFragment)")
    assert "_PyEval" not in msg and "Thread" not in msg and len(msg) < 400


def test_other_output_is_reported_by_its_last_lines_without_frames() -> None:
    out = "\n".join(f"line {i}" for i in range(20)) + "\n" + FRAMES
    msg = child_failure(out)
    assert msg.endswith("line 19") and "line 12" in msg and "line 11" not in msg and "#3" not in msg
    assert child_failure("") == "no output"


@pytest.mark.skipif(not HAVE_NS3, reason="ns-3 Python bindings not installed (pip install ns3)")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_simulation_stopped_by_a_signal_leaves_nothing(tmp_path, sig) -> None:
    """Signalled once the ns-3 child has its job (however busy the machine): exit 130 and no output
    directory (the command made it), no work files, no captures without their manifest."""
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, "-m", "xlayer", "sim", "baseline", "--seconds", "3", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    _, err = signal_once(proc, out / ".sim-work" / "job.json", sig)
    assert "Traceback" not in err
    if proc.returncode == 130:
        assert not out.exists(), sorted(p.name for p in out.rglob("*"))
        assert "interrupted" in err.strip().splitlines()[-1], err
    else:                       # the simulation had finished when the signal came: a whole bundle
        assert proc.returncode == 0, err
        assert (out / "bundle.json").exists() and not (out / ".sim-work").exists()


@pytest.mark.skipif(not HAVE_NS3, reason="ns-3 Python bindings not installed (pip install ns3)")
def test_an_output_directory_given_relative_to_the_working_directory_is_written(tmp_path) -> None:
    """`xlayer sim -o b` from the directory the user is in: the ns-3 child runs in the work directory,
    so a path relative to the user's would name a file that is not there (it failed with "no such
    file ... b/.sim-work/job.json")."""
    proc = subprocess.run([sys.executable, "-m", "xlayer", "sim", "steady", "--seconds", "0.8", "-o", "b"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr       # 1: a run this short may not show the effect
    assert (tmp_path / "b" / "bundle.json").exists() and (tmp_path / "b" / "sniffer.pcap").stat().st_size > 24
    assert not (tmp_path / "b" / ".sim-work").exists()
