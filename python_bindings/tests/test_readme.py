"""The README's Python example runs as written and computes what it says."""

from __future__ import annotations

import numpy as np

from conftest import ROOT


def test_readme_python_example_runs(capsys):
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the documented example
    assert np.allclose(scope["C_"], scope["A_"] @ scope["B_"])
    assert "Split" in capsys.readouterr().out
    assert scope["sch"].primitives() == ["split", "reorder", "parallel"]
