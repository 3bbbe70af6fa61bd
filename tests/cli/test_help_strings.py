"""Every argument of every `xlayer` command says what it is in `--help`."""
from __future__ import annotations

import argparse
import subprocess
import sys

from tests.helpers.common import REPO
from xlayer.cli.main import build_parser


def _undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    """Return 'command: argument' for every action of `parser` and its subcommands without a help string."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            for name, sub in action.choices.items():
                if sub.prog.rsplit(" ", 1)[-1] == name and name not in helped:     # an alias is listed once
                    missing.append(f"{path} {name}: (the subcommand)")
                missing += _undocumented(sub, f"{path} {name}")
            continue
        if not action.help or not action.help.strip():
            missing.append(f"{path}: {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_argument_of_every_command_has_help():
    assert _undocumented(build_parser(), "xlayer") == []


def test_walk_finds_an_argument_without_help():
    # the walk itself must see nested subcommands, positionals and options
    p = argparse.ArgumentParser(prog="t")
    sub = p.add_subparsers(dest="cmd")
    g = sub.add_parser("group", help="a group").add_subparsers(dest="inner")
    leaf = g.add_parser("leaf")
    leaf.add_argument("thing")
    leaf.add_argument("--flag", action="store_true", help="documented")
    leaf.add_argument("--quiet", action="store_true")
    assert _undocumented(p, "t") == ["t group leaf: (the subcommand)", "t group leaf: thing", "t group leaf: --quiet"]


def test_help_of_every_subcommand_renders():
    # positional arguments show their help in the rendered text, not only in the parser
    out = subprocess.run([sys.executable, "-m", "xlayer", "bundle", "show", "--help"], capture_output=True,
                         check=False,
                         text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "bundle directory (or its bundle.json)" in out.stdout
    assert "print the description as one JSON object" in out.stdout


def test_capture_kinds_take_the_right_article(tmp_path):
    text = tmp_path / "notes.jsonl"
    text.write_text('{"ts_ns": 1700000000500002000, "src": "10.0.0.1", "sport": 40000, "dst": "10.0.0.2", '
                    '"dport": 5001, "state": "ESTAB", "tcpi_snd_cwnd": 10, "tcpi_rtt": 1000}\n')
    out = subprocess.run([sys.executable, "-m", "xlayer", "bundle", "new", str(tmp_path / "b"), "--air", f"s={text}"],
                         capture_output=True, text=True, check=False, timeout=60, cwd=REPO)
    assert out.returncode == 2 and "an air capture must be pcap" in out.stderr, out.stderr
    assert not (tmp_path / "b").exists()
    helptext = subprocess.run([sys.executable, "-m", "xlayer", "bundle", "new", "--help"], capture_output=True,
                              check=False,
                              text=True, timeout=60, cwd=REPO).stdout
    assert "an air capture taken at VANTAGE" in helptext and "a TCP state capture taken" in helptext
    assert "a air" not in helptext


def test_sim_list_names_the_sample_steady_ships_as():
    out = subprocess.run([sys.executable, "-m", "xlayer", "sim", "--list"], capture_output=True, text=True, check=False,
                         timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    (steady,) = [ln for ln in out.stdout.splitlines() if ln.startswith("steady ")]
    assert "samples/sim-baseline" in steady and "the shipped baseline sample" not in steady
