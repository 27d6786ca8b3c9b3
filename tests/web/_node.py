"""Runs one of the front end's own JavaScript test files under Node.js's test runner."""

import pathlib
import re
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).parent


def passes_node_tests(name: str) -> None:
    """``node --test`` of ``tests/web/<name>``: every test in it passes (and there are some)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not installed, and tests/web/{name} needs it: "
                    "apt-get install nodejs (CI installs it)", pytrace=False)
    # TAP whatever the node version's default reporter (node 18 has no other default).
    run = subprocess.run([node, "--test", "--test-reporter=tap", name], cwd=HERE, capture_output=True,
                         text=True, timeout=120)
    out = run.stdout + run.stderr
    counts = {key: int(n) for key, n in re.findall(r"^# (tests|pass|fail) (\d+)$", out, re.M)}
    assert run.returncode == 0 and counts.get("fail") == 0, out
    assert counts.get("pass", 0) > 0 and counts["pass"] == counts["tests"], out
