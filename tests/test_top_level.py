"""`import xlayer`: a real module docstring naming the entry points, and a light import with `analyze` on demand."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.common import REPO


def _python(code: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300,
                         cwd=REPO, env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_import_is_light_and_analyze_is_lazy():
    got = _python("import sys, xlayer\n"
                  "print('polars' in sys.modules, 'xlayer.attribution' in sys.modules)\n"
                  "f = xlayer.analyze\n"
                  "print(f.__module__, 'analyze' in dir(xlayer), 'analyze' in xlayer.__all__)")
    assert got.split() == ["False", "False", "xlayer.attribution.analyze", "True", "True"]


def test_help_names_the_entry_points():
    import xlayer

    doc = xlayer.__doc__ or ""
    assert len(doc.splitlines()) > 5
    for name in ("open_bundle", "open_timeline", "analyze", "xlayer.cli", "xlayer.metrics"):
        assert name in doc, name
    with pytest.raises(AttributeError):
        xlayer.no_such_thing  # noqa: B018


def test_docstring_example_runs(tmp_path):
    sample = REPO / "samples" / "sim-udp_overflow"
    if not (sample / "bundle.json").is_file():
        pytest.skip(f"{sample} is not in this checkout")
    import xlayer

    code = "\n".join(ln.strip() for ln in xlayer.__doc__.splitlines() if ln.startswith("    "))
    code = "\n".join(ln.split("  #")[0] for ln in code.splitlines())     # the comments after the code
    assert "xlayer.analyze(tl)" in code
    # the decode cache goes to tmp_path, not the user's
    assert _python(code, {"XLAYER_CACHE_DIR": str(tmp_path / "cache")}).strip() == "ap_queue_overflow"
    assert any((tmp_path / "cache").iterdir())
