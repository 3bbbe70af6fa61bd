"""Issue 12: no value given to `xlayer capture` / `xlayer monitor` may reach a tool as an option, and
`xlayer monitor` checks an interface is wireless before it changes anything.

Argument building is tested as pure functions; the real tools run only where it is cheap and cannot
touch anything: ss inside a fresh, empty network namespace (`unshare -n`), tcpdump on a filter that
it refuses before capturing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import xlayer.acquire.capture as cap
from xlayer.acquire.capture import CaptureSetupError, capture_argv, parse_iface_spec, parse_ss_spec
from xlayer.acquire.sampler import SamplerError, SsFilterError, SsSampler, check_ss_filter, port_filter


def xlayer(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlayer", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------------------------------
# item 1: capture filters, interface and namespace names

def test_capture_filter_is_one_argument_after_an_explicit_flag_or_double_dash(tmp_path) -> None:
    argv, _ = capture_argv("dumpcap", "eth0", tmp_path / "v-eth0", bpf="tcp port 80")
    i = argv.index("-f")
    assert argv[i + 1] == "tcp port 80" and argv.count("tcp port 80") == 1
    argv, _ = capture_argv("tcpdump", "eth0", tmp_path / "v-eth0", bpf="tcp port 80",
                           ring_seconds=5, ring_files=3)
    # tcpdump: the expression comes after "--", the end of its options, as the very last argument
    assert argv[-2:] == ["--", "tcp port 80"]
    argv, _ = capture_argv("tcpdump", "eth0", tmp_path / "v-eth0")
    assert "--" not in argv


@pytest.mark.parametrize("bpf", ["-w/some/path", " -w /x", "--version", "", "   ", "tcp\nport 80"])
@pytest.mark.parametrize("tool", ["dumpcap", "tcpdump"])
def test_option_looking_or_empty_capture_filter_is_refused(tmp_path, tool, bpf) -> None:
    with pytest.raises(CaptureSetupError, match="filter"):
        capture_argv(tool, "eth0", tmp_path / "v-eth0", bpf=bpf)


@pytest.mark.parametrize("text", ["-w", "v=-i", "ns1:-w", "v=ns1:--help", ".hidden", "a b",
                                  "toolongname12345", "eth/0", "..", "v=-n:eth0", "-v=eth0",
                                  ".=eth0"])
def test_bad_interface_namespace_or_vantage_names_are_refused(text) -> None:
    with pytest.raises(CaptureSetupError):
        parse_iface_spec(text, "wired")


def test_good_interface_names_pass() -> None:
    for text in ("eth0", "server=ns1:veth-s", "wlan0mon", "br_lan.10", "v=lab-1:enp0s31f6"):
        s = parse_iface_spec(text, "wired")
        assert not s.iface.startswith("-") and (s.netns is None or not s.netns.startswith("-"))
    with pytest.raises(CaptureSetupError):
        parse_iface_spec("eth0", "wired", default_netns="-x")
    with pytest.raises(CaptureSetupError):
        capture_argv("dumpcap", "-D", Path("/nonexistent/v"))


@pytest.mark.parametrize("text", ["-K", "srv=-N", "srv=--kill", "-srv"])
def test_bad_ss_vantage_or_namespace_is_refused(text) -> None:
    with pytest.raises(CaptureSetupError):
        parse_ss_spec(text, [], 0.05)


@pytest.mark.parametrize("expr,tokens", [
    ("dport = :5201", ["dport", "=", ":5201"]),
    ("(dport=:5201 or sport=:5201)", ["(", "dport", "=", ":5201", "or", "sport", "=", ":5201", ")"]),
    ("state established ( dport eq :ssh || ! sport >= :1024 )",
     ["state", "established", "(", "dport", "eq", ":ssh", "||", "!", "sport", ">=", ":1024", ")"]),
    ("exclude listening dst 10.0.0.0/24 src [::1]:80 dev = lo", None),
    ("dst *:80 and fwmark = 0x1/0x3 autobound", None),
])
def test_ss_filter_grammar_accepts_and_splits(expr, tokens) -> None:
    import shlex

    got = check_ss_filter(shlex.split(expr))
    if tokens is not None:
        assert got == tokens
    assert not any(t.startswith("-") for t in got)
    assert check_ss_filter(port_filter(5201)) == port_filter(5201)


@pytest.mark.parametrize("tokens", [["-K"], ["-K", "dport", "=", ":5201"], ["dport", "=", ":5201", "-K"],
                                    ["dport", "=", "-K"], ["--kill"], ["dst", "-1.2.3.4"],
                                    ["state", "bogus"], ["(", "dport", "=", ":1"], ["dport", "=", ":1", ")"],
                                    ["dport"], ["rm", "-rf"], ["dport", "=", ":1", "or"],
                                    ["dev", "=", "-x"], ["dst", "!=", "10.0.0.1"]])
def test_ss_filter_outside_the_grammar_is_refused(tmp_path, tokens) -> None:
    with pytest.raises(SsFilterError) as info:
        check_ss_filter(tokens)
    assert "\n" not in str(info.value)
    # the sampler refuses it too, before ss is ever run
    with pytest.raises(SamplerError):
        SsSampler(tmp_path / "x.txt", 0.1, tokens)
    assert not (tmp_path / "x.txt").exists()


def test_ss_filter_comes_after_double_dash(tmp_path) -> None:
    s = SsSampler(tmp_path / "x", 0.1, ["dport", "=", ":5201"], netns="ns1")
    assert s.cmd == ["ss", "-N", "ns1", "-t", "-i", "-n", "--", "dport", "=", ":5201"]
    assert "--" not in SsSampler(tmp_path / "x", 0.1).cmd


@pytest.mark.skipif(not shutil.which("ss") or not shutil.which("unshare"), reason="needs ss and unshare")
def test_real_ss_takes_tokens_after_double_dash_as_filter_only(tmp_path) -> None:
    # A fresh, empty network namespace: there is no connection that anything could touch.
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("cannot create a network namespace here")
    p = subprocess.run(["unshare", "-n", "ss", "-t", "-n", "--", "-K"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode != 0           # after "--", -K is a (bad) filter token, not an option
    st = SsSampler(tmp_path / "ss.txt", 0.05, port_filter(5201), cmd_prefix=["unshare", "-n"],
                   ss_args=["-t", "-n"]).run(duration=0.3, handle_signals=False)
    assert st.samples >= 1 and st.errors == 0


@pytest.mark.skipif(not shutil.which("tcpdump") or os.geteuid() != 0, reason="needs tcpdump and root")
def test_real_tcpdump_takes_the_expression_after_double_dash(tmp_path) -> None:
    evil = tmp_path / "evil.pcap"
    argv, _ = capture_argv("tcpdump", "lo", tmp_path / "v-lo", bpf="tcp")
    argv[-1] = f"-w{evil}"          # what the old code passed through; refused by tcpdump as a filter
    p = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert p.returncode != 0, p.stderr
    assert not evil.exists()


def test_cli_refuses_option_looking_filters_before_anything_runs(tmp_path) -> None:
    out = tmp_path / "b"
    evil = tmp_path / "evil.pcap"
    p = xlayer("capture", "-o", str(out), "--tool", "tcpdump", "--wired", "lo", f"--filter=-w{evil}",
               "--duration", "1")
    assert p.returncode == 2 and "--filter" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = xlayer("capture", "-o", str(out), "--tcp-state", "srv", "--ss-filter=-K dport = :5201",
               "--duration", "1")
    assert p.returncode == 2 and "--ss-filter" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = xlayer("capture", "-o", str(out), "--wired", "-w", "--duration", "1")
    assert p.returncode == 2
    for extra in (["--snaplen", "-1"], ["--ring-files", "-3", "--ring-size", "1"]):
        p = xlayer("capture", "-o", str(out), "--wired", "lo", *extra, "--duration", "1")
        assert p.returncode == 2, p.stderr
    assert not out.exists() and not evil.exists()


# ---------------------------------------------------------------------------------------------
# item 3: monitor mode checks first, changes after

class Recorder:
    def __init__(self, wiphy: bool = False):
        self.calls: list[list[str]] = []
        self.wiphy = wiphy

    def __call__(self, argv, timeout: float = 5.0):
        self.calls.append(list(argv))
        info = os.path.basename(argv[0]) == "iw" and argv[1] == "dev" and argv[-1] == "info"
        ok = not info or self.wiphy
        out = "Interface x\n\twiphy 0\n\ttype monitor\n" if info and self.wiphy else ""
        return subprocess.CompletedProcess(argv, 0 if ok else 237, out, "" if ok else "No such device")


@pytest.fixture()
def fake_iw(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(cap, "_run", rec)
    real_which = shutil.which
    monkeypatch.setattr(cap.shutil, "which", lambda name, *a, **k: "/usr/sbin/iw" if name == "iw"
                        else real_which(name, *a, **k))
    return rec


def test_monitor_refuses_a_wired_interface_and_changes_nothing(fake_iw) -> None:
    # lo is never wireless: no /sys/class/net/lo/wireless, and (fake) iw does not know it
    with pytest.raises(CaptureSetupError, match="not a wireless interface.*nothing was changed"):
        cap.setup_monitor("lo", 6)
    assert all(c[:2] == ["iw", "dev"] and c[-1] == "info" for c in fake_iw.calls), fake_iw.calls
    with pytest.raises(CaptureSetupError):
        cap.setup_monitor("lo", 6, new_name="lomon")
    assert not any("set" in c or "add" in c for c in fake_iw.calls)


@pytest.mark.parametrize("iface,new_name,channel", [("-x", None, 6), ("wlan0", "-x", 6), ("../..", None, 6),
                                                    ("wlan0", None, 0), ("wlan0", None, -1)])
def test_monitor_refuses_bad_names_and_channels_before_running_anything(fake_iw, iface, new_name,
                                                                        channel) -> None:
    with pytest.raises(CaptureSetupError):
        cap.setup_monitor(iface, channel, new_name)
    assert fake_iw.calls == []


def test_monitor_on_a_wireless_interface_checks_then_changes(fake_iw, monkeypatch) -> None:
    fake_iw.wiphy = True
    assert cap.setup_monitor("wlan9", 6) == "wlan9"
    first_change = next(i for i, c in enumerate(fake_iw.calls) if "set" in c)
    assert fake_iw.calls[first_change] == ["ip", "link", "set", "wlan9", "down"]
    assert fake_iw.calls[0] == ["iw", "dev", "wlan9", "info"]      # the wireless check came first


def test_cli_monitor_on_lo_exits_2(tmp_path) -> None:
    p = xlayer("monitor", "lo", "--channel", "6")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    up = subprocess.run(["ip", "-o", "link", "show", "lo"], capture_output=True, text=True)
    assert up.returncode != 0 or "UP" in up.stdout


def test_a_ring_is_bounded_so_its_files_fit_in_one_manifest():
    # an unbounded ring outgrows the manifest's capture cap in a long run and would leave no manifest
    import argparse

    from xlayer.bundle.validate import MAX_CAPTURES
    from xlayer.cli import capture as cli_capture

    parser = argparse.ArgumentParser()
    cli_capture.register(parser.add_subparsers())
    args = parser.parse_args(["capture", "-o", "x", "--wired", "lo", "--wired", "eth0", "--ring-seconds", "1"])
    cfg = cli_capture.config_from_args(args, [])
    assert cfg.ring_files == cli_capture.DEFAULT_RING_FILES and 2 * cfg.ring_files <= MAX_CAPTURES
    args = parser.parse_args(["capture", "-o", "x", "--wired", "lo", "--wired", "eth0", "--ring-seconds", "1",
                              "--ring-files", str(MAX_CAPTURES)])
    with pytest.raises(CaptureSetupError, match="at most"):
        cli_capture.config_from_args(args, [])
    args = parser.parse_args(["capture", "-o", "x", "--wired", "lo"])
    assert cli_capture.config_from_args(args, []).ring_files is None      # no ring: one file
