"""The local provider's runtime: AMX hosts (decision 0013), interrupts inside prompt
evaluation, llama.cpp's log as log records. Real model, real processes."""

import json
import logging
import subprocess
import sys
import threading

import pytest

from boundctx.providers import cpu

AMX_MESSAGE = ("AMX CPU detected (amx_bf16, amx_int8, amx_tile): loading without llama.cpp's extra buffer types "
               "to avoid its AMX kernels (SIGILL in llama-cpp-python 0.3.36); set local.extra_buffers = on to override")
SAPPHIRE_RAPIDS = {"fpu", "sse2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16",
                   "amx_bf16", "amx_tile", "amx_int8"}
ZEN4 = {"fpu", "sse2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16"}
HI = [{"role": "user", "content": "Say hello."}]
# About 1,500 tokens: three 512-token batches of prompt evaluation.
LONG = [{"role": "user", "content": "Summarise this. " + "The cat sat on the mat. " * 210}]
# The same conversation start (about 250 tokens): a stale reused prefix would show.
MEDIUM = [{"role": "user", "content": "Summarise this. " + "The cat sat on the mat. " * 30}]


class _Keep(logging.Handler):
    def __init__(self, level):
        super().__init__(level)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def log_records():
    """``capture(name, level)``: the records of logger ``name`` from now on, taken on the
    logger itself (a CLI run in the same process may have stopped boundctx's loggers
    from propagating to caplog's root handler)."""
    attached = []

    def capture(name, level):
        logger = logging.getLogger(name)
        handler = _Keep(level)
        attached.append((logger, handler, logger.level))
        logger.addHandler(handler)
        logger.setLevel(level)
        return handler.records

    yield capture
    for logger, handler, level in attached:
        logger.removeHandler(handler)
        logger.setLevel(level)


# The decision, on flag sets.


@pytest.mark.parametrize(("setting", "flags", "enabled"), [
    ("auto", SAPPHIRE_RAPIDS, False),
    ("auto", {"amx_tile"}, False),  # any AMX flag: the kernels are chosen at run time
    ("auto", {"avx2", "amx_fp16"}, False),  # later AMX generations count too
    ("auto", ZEN4, True),
    ("auto", set(), True),  # no /proc/cpuinfo (macOS, Windows): nothing known to avoid
    ("on", SAPPHIRE_RAPIDS, True),
    ("off", ZEN4, False),
    ("off", set(), False),
])
def test_extra_buffers_are_off_on_amx_hosts_unless_set(setting, flags, enabled):
    decision = cpu.decide_extra_buffers(setting, flags)
    assert decision.enabled is enabled and decision.setting == setting
    assert decision.amx == tuple(sorted(f for f in flags if f.startswith("amx_")))


def test_the_decision_says_why():
    assert cpu.decide_extra_buffers("auto", SAPPHIRE_RAPIDS).reason == AMX_MESSAGE
    assert "SIGILL" in cpu.decide_extra_buffers("on", SAPPHIRE_RAPIDS).reason  # overridden: still warned
    assert "no AMX" in cpu.decide_extra_buffers("auto", ZEN4).reason


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="'auto', 'on', 'off'"):
        cpu.decide_extra_buffers("yes", ZEN4)


def test_cpu_flags_come_from_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 amx_tile amx_int8\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu.cpu_flags(info) == {"fpu", "avx2", "amx_tile", "amx_int8"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert cpu.cpu_flags(arm) == {"fp", "asimd", "sve"}
    assert cpu.cpu_flags(tmp_path / "missing") == frozenset()


# The real model, loaded as decided.


@pytest.fixture
def provider_on(monkeypatch, tmp_path):
    """LlamaCppProvider as built on a CPU whose /proc/cpuinfo lists ``flags``."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")
    from boundctx.providers.local import LlamaCppProvider

    made = []

    def make(flags, **options):
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nflags\t\t: {' '.join(sorted(flags))}\n")
        monkeypatch.setattr(cpu, "CPUINFO", str(info))
        made.append(LlamaCppProvider(n_ctx=512, n_threads=1, **options))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_on_an_amx_host_the_model_loads_without_extra_buffers_and_says_so(provider_on, log_records):
    provider = provider_on(SAPPHIRE_RAPIDS)
    records = log_records("boundctx.local", logging.INFO)
    reply = provider.chat(HI, max_tokens=4, temperature=0)
    llm = provider._llm
    # The struct llama-cpp-python filled in, loaded the model from and kept.
    assert llm.model_params.use_extra_bufts is False and llm._model.params is llm.model_params
    assert reply.text and reply.finish.completion_tokens >= 1  # generation works without them
    assert [(r.levelno, r.getMessage()) for r in records] == [(logging.INFO, AMX_MESSAGE)]


def test_forced_off_loads_without_extra_buffers_on_any_host(provider_on):
    provider = provider_on(ZEN4, extra_buffers="off")
    assert provider.chat(HI, max_tokens=4, temperature=0).finish.completion_tokens >= 1
    assert provider._llm.model_params.use_extra_bufts is False


def test_elsewhere_and_when_forced_on_the_extra_buffers_stay(provider_on):
    elsewhere = provider_on(ZEN4)
    forced = provider_on(SAPPHIRE_RAPIDS, extra_buffers="on")
    for provider in (elsewhere, forced):
        provider.load()
        assert provider._llm.model_params.use_extra_bufts is True


# Interrupts inside prompt evaluation.


@pytest.fixture(scope="module")
def long_local():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")
    from boundctx.providers.local import LlamaCppProvider

    provider = LlamaCppProvider(n_ctx=2048, n_threads=2)
    yield provider
    provider.close()


class SetByAnotherThread:
    """A cancel event that another thread sets once prompt evaluation is under way: the
    first time the provider asks from its abort callback (and ``when()`` holds), it lets
    the other thread set the event and waits until it has."""

    def __init__(self, provider, when):
        self.provider = provider
        self.when = when
        self.before = provider.abort_checks
        self.event = threading.Event()
        self.evaluating = threading.Event()
        self.setter = threading.Thread(target=self._set_when_evaluating)
        self.setter.start()

    def _set_when_evaluating(self):
        if self.evaluating.wait(60):
            self.event.set()

    def is_set(self):
        if self.provider.abort_checks > self.before and not self.evaluating.is_set() and self.when():
            self.evaluating.set()
            assert self.event.wait(60)
        return self.event.is_set()


@pytest.mark.parametrize("when", [
    "first_batch",
    # llama-cpp-python has then counted the first batch as evaluated (n_tokens = 512)
    pytest.param("second_batch", marks=pytest.mark.slow),
])
def test_a_cancel_stops_prompt_evaluation_and_the_model_stays_right(long_local, log_records, when):
    from boundctx.providers import TextChunk
    from boundctx.providers.local import INFERENCE_LOCK, LlamaCppProvider

    assert long_local.count_prompt(LONG) >= 1400
    llama = log_records("boundctx.llama_cpp", logging.DEBUG)
    long_local.load()
    cancel = SetByAnotherThread(long_local, lambda: (long_local._llm.n_tokens > 0) == (when == "second_batch"))
    chunks = list(long_local.stream_chat(LONG, max_tokens=8, temperature=0, cancel=cancel))
    cancel.setter.join()
    assert cancel.evaluating.is_set()  # it was set while the prompt was being evaluated
    assert not any(isinstance(c, TextChunk) for c in chunks)
    assert (chunks[-1].reason, chunks[-1].completion_tokens) == ("cancelled", 0)
    assert not INFERENCE_LOCK.locked()
    # llama.cpp reports the abort it was asked for; that is no error of anyone's.
    assert any("failed to decode" in r.getMessage() and r.levelno == logging.DEBUG for r in llama)
    assert not [r.getMessage() for r in llama if r.levelno >= logging.WARNING]

    after = long_local.chat(MEDIUM, max_tokens=6, temperature=0)
    fresh = LlamaCppProvider(n_ctx=2048, n_threads=2)
    try:
        assert after.text == fresh.chat(MEDIUM, max_tokens=6, temperature=0).text
    finally:
        fresh.close()
    assert after.finish.completion_tokens >= 1


def test_a_time_limit_stops_prompt_evaluation(long_local):
    from boundctx.errors import GenerationTimeout
    from boundctx.providers.local import INFERENCE_LOCK

    chunks = []
    with pytest.raises(GenerationTimeout, match="while evaluating the [0-9]+-token prompt"):
        for chunk in long_local.stream_chat(LONG, max_tokens=8, temperature=0, timeout_s=0.001):
            chunks.append(chunk)
    assert chunks == []  # before the change: raised only after the first token
    assert not INFERENCE_LOCK.locked()
    assert long_local.chat(HI, max_tokens=4, temperature=0).finish.completion_tokens >= 1


def test_a_second_ctrl_c_inside_evaluation_still_raises_keyboard_interrupt(long_local):
    """A SIGINT handler runs in the main thread's next Python code: during evaluation
    that is the abort callback, which must abort and let the interrupt through."""
    from boundctx.providers.local import INFERENCE_LOCK

    class Interrupted:
        def __init__(self):
            self.before = long_local.abort_checks

        def is_set(self):
            if long_local.abort_checks > self.before:
                raise KeyboardInterrupt
            return False

    with pytest.raises(KeyboardInterrupt):
        list(long_local.stream_chat(LONG, max_tokens=8, temperature=0, cancel=Interrupted()))
    assert not INFERENCE_LOCK.locked()
    assert long_local.chat(HI, max_tokens=4, temperature=0).finish.completion_tokens >= 1


def test_a_failing_cancel_object_fails_the_stream_not_the_callback(long_local):
    class Broken:
        def __init__(self):
            self.before = long_local.abort_checks

        def is_set(self):
            if long_local.abort_checks > self.before:
                raise LookupError("the cancel source went away")
            return False

    from boundctx.providers.local import INFERENCE_LOCK

    with pytest.raises(LookupError, match="went away"):
        list(long_local.stream_chat(LONG, max_tokens=8, temperature=0, cancel=Broken()))
    assert not INFERENCE_LOCK.locked()
    assert long_local.chat(HI, max_tokens=4, temperature=0).finish.completion_tokens >= 1


# llama.cpp's log.


def test_llama_cpp_pieces_become_one_record_per_line(log_records):
    from boundctx import _llama_log

    records = log_records("boundctx.llama_cpp", logging.DEBUG)
    lines = _llama_log._Lines()
    lines.take(2, b"load: one ")  # INFO
    lines.take(5, b"line\n")  # CONT: the same line, the same level
    lines.take(3, b"warned\nand ")  # WARN
    lines.take(5, b"continued\n")
    lines.take(4, b"unfinished")  # ERROR, ended by the next message
    lines.take(1, b"debug\n\n")  # DEBUG; the empty line is dropped
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.INFO, "load: one line"), (logging.WARNING, "warned"), (logging.WARNING, "and continued"),
        (logging.ERROR, "unfinished"), (logging.DEBUG, "debug")]


_QUIET_CHILD = """
import json, logging, sys
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))
logging.getLogger("boundctx.llama_cpp").addHandler(Keep(logging.DEBUG))
logging.getLogger("boundctx.llama_cpp").setLevel(logging.DEBUG)
from boundctx.providers.local import LlamaCppProvider
provider = LlamaCppProvider(n_ctx=512, n_threads=1)  # the vocabulary-only load
reply = provider.chat([{"role": "user", "content": "Say hello."}], max_tokens=4, temperature=0)
print(json.dumps({"text": reply.text, "records": records}))
"""


def test_loading_and_generating_print_nothing_on_stderr():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'boundctx[local]')")
    done = subprocess.run([sys.executable, "-c", _QUIET_CHILD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = json.loads(done.stdout)
    assert out["text"]
    records = [tuple(r) for r in out["records"]]
    # What used to reach stderr on every command, now a record at llama.cpp's level.
    assert ("WARNING", "llama_context: n_ctx_seq (512) > n_ctx_train (0) -- possible training context overflow") \
        in records
    assert any(level == "INFO" and message.startswith("llama_model_loader: ") for level, message in records)
    assert any(message.startswith("llama_kv_cache:") for _, message in records)  # the full model's context


def test_forcing_the_buffers_on_against_an_amx_cpu_is_a_warning(provider_on, log_records):
    records = log_records("boundctx.local", logging.INFO)
    provider_on(SAPPHIRE_RAPIDS, extra_buffers="on").load()  # loaded only: this host has no AMX to crash
    assert [r.levelno for r in records] == [logging.WARNING]


def test_the_provider_takes_what_it_is_not_given_from_the_settings(provider_on, monkeypatch):
    """The config file and BOUNDCTX_* apply to the API as to the command line: doctor's
    advice (BOUNDCTX_LOCAL_EXTRA_BUFFERS=off) works for a Python caller too."""
    monkeypatch.setenv("BOUNDCTX_LOCAL_EXTRA_BUFFERS", "off")
    monkeypatch.setenv("BOUNDCTX_CHAT_REPEAT_PENALTY", "1.3")
    provider = provider_on(ZEN4)
    assert provider.extra_buffers_decision.enabled is False and provider.repeat_penalty == 1.3
    explicit = provider_on(ZEN4, extra_buffers="on", repeat_penalty=1.0)
    assert explicit.extra_buffers_decision.enabled is True and explicit.repeat_penalty == 1.0
