"""``boundctx doctor``: the report, and a generation child whose crash is reported."""

import importlib.util
import json
import sys

import pytest

from boundctx.cli import doctor, main

AMX = {"avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"}
SIGILL_CHILD = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]

needs_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                 reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")


@needs_llama
def test_the_real_doctor_generates_in_a_child_and_exits_0(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "generation" in out and "OK in a child process" in out
    assert "llama-cpp-python  0.3" in out and "extra buffers" in out
    assert out.rstrip().endswith("everything works")


@needs_llama
def test_json_is_the_whole_report(capsys):
    assert main(["doctor", "--json", "--no-generate"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"ok", "boundctx", "python", "platform", "machine", "llama_cpp_python",
                           "llama_cpp_system_info", "cpu_features", "amx", "extra_buffers", "model", "generation",
                           "problems"}
    assert set(report["cpu_features"]) == {"avx", "avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8",
                                           "amx_bf16", "f16c", "fma"}
    assert set(report["extra_buffers"]) == {"setting", "enabled", "reason"}
    assert report["model"]["exists"] and report["model"]["opens"] and report["model"]["size"] > 0
    assert report["generation"]["ran"] is False and report["ok"] is True
    assert "CPU :" in report["llama_cpp_system_info"]


@needs_llama
def test_a_child_killed_by_sigill_on_an_amx_host_is_named_with_the_fix():
    report = doctor.diagnose(flags=AMX, extra_buffers="on", child_command=SIGILL_CHILD)
    g = report.generation
    assert (g.ran, g.ok, g.signal, g.returncode) == (True, False, "SIGILL", -4)
    assert "AMX kernels" in g.diagnosis and "local.extra_buffers = off" in g.diagnosis
    assert "BOUNDCTX_LOCAL_EXTRA_BUFFERS=off" in g.diagnosis
    assert doctor.exit_status(report) == 1
    assert "FAILED: killed by SIGILL" in doctor.render(report)


def test_other_crashes_get_a_plain_diagnosis():
    plain = doctor.diagnose_signal("SIGILL", amx=(), extra_buffers=True, loaded=True)
    assert "instruction this CPU does not have" in plain and "extra_buffers" not in plain
    already_off = doctor.diagnose_signal("SIGILL", amx=("amx_tile",), extra_buffers=False, loaded=True)
    assert "already off" in already_off and "set local.extra_buffers" not in already_off
    assert "llama.cpp crashed" in doctor.diagnose_signal("SIGSEGV", amx=("amx_tile",), extra_buffers=True,
                                                         loaded=False)


def test_a_child_that_fails_or_hangs_is_reported_not_waited_for():
    failed = doctor.run_child([sys.executable, "-c", "raise LookupError('no such thing')"], timeout_s=60)
    check = doctor._generation(failed, amx=(), extra_buffers=True)
    assert not check.ok and check.signal is None and "LookupError: no such thing" in check.diagnosis
    hung = doctor.run_child([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=0.5)
    assert hung.timed_out and "did not finish in time" in doctor._generation(hung, amx=(), extra_buffers=True).diagnosis


def test_a_missing_model_exits_1_with_a_clear_line(tmp_path, capsys):
    missing = tmp_path / "nothing.gguf"
    assert main(["doctor", "--model", str(missing)]) == 1
    out = capsys.readouterr().out
    assert f"MISSING: no model file at {missing}" in out
    assert "generation" in out and "not tried: no model to run" in out  # no child for nothing
