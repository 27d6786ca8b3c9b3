"""The front end's reply clock tested alone: ``clock.test.mjs`` beside this file, under
node's own test runner (``node --test``), as the event-stream reader is
(``test_stream_reader.py``). Node is required, not optional: where it is missing this
fails and says how to install it (.ci/run does)."""

import pathlib
import re
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).parent
TEST = HERE / "clock.test.mjs"


def test_the_reply_clock_passes_its_node_tests():
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed, and tests/web/clock.test.mjs needs it: "
                    "apt-get install nodejs (CI installs it)", pytrace=False)
    # TAP whatever the node version's default reporter (node 18 has no other default).
    run = subprocess.run([node, "--test", "--test-reporter=tap", TEST.name], cwd=HERE, capture_output=True,
                         text=True, timeout=120)
    out = run.stdout + run.stderr
    counts = {key: int(n) for key, n in re.findall(r"^# (tests|pass|fail) (\d+)$", out, re.M)}
    assert run.returncode == 0 and counts.get("fail") == 0, out
    assert counts.get("pass", 0) > 0 and counts["pass"] == counts["tests"], out
