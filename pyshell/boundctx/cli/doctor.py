"""``boundctx doctor``: what this machine runs, and whether local generation works.

The versions, the CPU features llama.cpp cares about, the extra-buffer-types decision
(decision 0013) and the model are checked in this process; generation is tried in a
child process (a fresh interpreter that loads the model and generates a few tokens), so
a crash inside llama.cpp is reported, not suffered: a child killed by a signal is named
by the signal, with what it most likely means on this host.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from boundctx.providers.cpu import ExtraBuffersSetting

__all__ = ["ChildResult", "GenerationCheck", "ModelCheck", "Report", "add_parser", "child_main", "diagnose",
           "diagnose_signal", "exit_status", "generation_command", "render", "run_child"]

#: What the child is asked; a few tokens show that the kernels run.
_PROMPT = [{"role": "user", "content": "Say hello."}]
_CHILD_CODE = "import sys; from boundctx.cli.doctor import child_main; sys.exit(child_main(sys.argv[1:]))"
_NOT_INSTALLED = "not installed: pip install 'boundctx[local]'"


class ModelCheck(msgspec.Struct):
    """The GGUF file: where, how big, whether llama.cpp opens it (vocabulary only)."""

    path: str | None
    exists: bool = False
    size: int | None = None
    opens: bool = False
    error: str | None = None


class ChildResult(msgspec.Struct):
    """How a child process ended."""

    command: list[str]
    returncode: int | None
    signal: str | None = None
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""


class GenerationCheck(msgspec.Struct):
    """The generation tried in a child process.

    Attributes
    ----------
    ran : bool
        False with ``--no-generate`` or when there is nothing to run it on.
    ok : bool
    loaded : bool
        The child loaded the model before it ended.
    text : str, optional
        What the model said.
    tokens : int, optional
    returncode : int, optional
        The child's exit status (negative: killed by a signal).
    signal : str, optional
        The signal's name (``"SIGILL"``).
    diagnosis : str, optional
        One line: what went wrong and what to do.
    stderr_tail : str, optional
        The last lines the child wrote on stderr.
    """

    ran: bool = False
    ok: bool = False
    loaded: bool = False
    text: str | None = None
    tokens: int | None = None
    returncode: int | None = None
    signal: str | None = None
    diagnosis: str | None = None
    stderr_tail: str | None = None


class Report(msgspec.Struct):
    """Everything ``boundctx doctor`` found; ``ok`` is its exit status in one bit."""

    ok: bool
    boundctx: str
    python: str
    python_executable: str
    platform: str
    machine: str
    llama_cpp_python: str | None
    llama_cpp_system_info: str | None
    cpu_features: dict[str, bool]
    amx: list[str]
    extra_buffers: dict[str, object]
    model: ModelCheck
    generation: GenerationCheck
    settings_error: str | None = None
    problems: list[str] = msgspec.field(default_factory=list)


def add_parser(sub, summary: str) -> None:
    p = sub.add_parser(
        "doctor", help=summary,
        description="Report boundctx's, Python's and llama-cpp-python's versions, the CPU features llama.cpp "
                    "uses, the extra-buffer-types decision (local.extra_buffers) and the model, then try a "
                    "short generation in a child process, so that a crash is reported rather than suffered. "
                    "Exit status 0 when everything works, 1 when generation fails or the model is missing.")
    p.add_argument("--model", metavar="PATH", help="a GGUF model (default: the embedded SmolLM2)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-generate", action="store_true", help="skip the generation check")
    p.add_argument("--timeout", type=float, default=180.0, metavar="S",
                   help="seconds the generation child may take (default 180)")
    p.set_defaults(run=run)


def run(args) -> int:
    report = diagnose(model_path=args.model, generate=not args.no_generate, timeout_s=args.timeout)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")
    else:
        print(render(report))
    return exit_status(report)


def exit_status(report: Report) -> int:
    """0 when everything works; 1 when generation fails, the model is missing or any
    other check failed."""
    return 0 if report.ok else 1


def diagnose(*, model_path: str | None = None, generate: bool = True, timeout_s: float = 180.0,
             extra_buffers: ExtraBuffersSetting | None = None, flags: Iterable[str] | None = None,
             child_command: Sequence[str] | None = None) -> Report:
    """Check this machine (see the module docstring).

    Parameters
    ----------
    model_path : str, optional
        A GGUF file; default: the embedded model.
    generate : bool
        Try a generation in a child process.
    timeout_s : float
        How long the child may take.
    extra_buffers : {"auto", "on", "off"}, optional
        Default: the ``local.extra_buffers`` setting.
    flags : iterable of str, optional
        The CPU's flags; default: this CPU's (``/proc/cpuinfo``).
    child_command : sequence of str, optional
        The child to run instead of :func:`generation_command`'s (tests).
    """
    from boundctx import __version__, config
    from boundctx.providers import cpu

    problems: list[str] = []
    settings = settings_error = None
    try:
        settings = config.load()
    except (OSError, ValueError) as exc:
        settings_error = str(exc)
        problems.append(f"settings: {exc} (the defaults are used)")
    local = (settings or config.Settings({name: key.default for name, key in config.KEYS.items()},
                                        dict.fromkeys(config.KEYS, "default"))).local
    setting = extra_buffers or local.extra_buffers
    threads, gpu_layers = local.threads, local.gpu_layers
    flags = cpu.cpu_flags() if flags is None else frozenset(flags)
    decision = cpu.decide_extra_buffers(setting, flags)

    version, system_info = _llama_cpp_python()
    if version is None:
        problems.append(f"llama-cpp-python is {_NOT_INSTALLED}")
    model = _check_model(model_path, importable=version is not None)
    if model.error:
        problems.append(f"model: {model.error}")

    generation = GenerationCheck()
    if generate and (model.opens or child_command is not None):
        if child_command is not None:
            command = list(child_command)
        else:
            assert model.path is not None, "a model that opens was found at a path"
            command = generation_command(model.path, extra_buffers=decision.enabled, threads=threads,
                                         gpu_layers=gpu_layers)
        generation = _generation(run_child(command, timeout_s=timeout_s), amx=decision.amx,
                                 extra_buffers=decision.enabled)
        if not generation.ok:
            problems.append(f"generation: {generation.diagnosis}")
    elif generate:
        generation.diagnosis = "not tried: no model to run"
        problems.append("generation: not tried (no model to run)")

    return Report(
        ok=not problems,
        boundctx=__version__, python=platform.python_version(), python_executable=sys.executable,
        platform=platform.platform(), machine=platform.machine(), llama_cpp_python=version,
        llama_cpp_system_info=system_info, cpu_features={f: f in flags for f in cpu.FEATURES},
        amx=list(decision.amx),
        extra_buffers={"setting": decision.setting, "enabled": decision.enabled, "reason": decision.reason},
        model=model, generation=generation, settings_error=settings_error, problems=problems)


def _llama_cpp_python() -> tuple[str | None, str | None]:
    """(llama-cpp-python's version, llama.cpp's system info), None for what is missing."""
    from importlib import metadata

    try:
        version = metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return None, None
    try:
        from boundctx.tokens.llama import _llama_cpp

        info = _llama_cpp().llama_print_system_info().decode("utf-8", "replace").strip()
    except (ImportError, OSError) as exc:
        return version, f"cannot be loaded: {exc}"
    return version, info


def _check_model(path: str | None, *, importable: bool) -> ModelCheck:
    if path is None:
        try:
            from boundctx.tokens.llama import default_model_path

            path = default_model_path()
        except (ImportError, FileNotFoundError) as exc:
            return ModelCheck(None, error=f"no embedded model: {exc}")
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        return ModelCheck(path, error=f"no model file at {path}")
    check = ModelCheck(path, exists=True, size=os.path.getsize(path))
    if not importable:
        check.error = "cannot be opened without llama-cpp-python"
        return check
    try:
        from boundctx.tokens.llama import LlamaVocab

        LlamaVocab(path)
    except (ValueError, OSError, RuntimeError) as exc:
        check.error = f"llama.cpp cannot open {path}: {exc}"
        return check
    check.opens = True
    return check


def generation_command(model_path: str, *, extra_buffers: bool, threads: int = 0, gpu_layers: int = 0,
                       max_tokens: int = 8) -> list[str]:
    """The child that loads ``model_path`` and generates ``max_tokens`` tokens
    (:func:`child_main` in a fresh interpreter, with faulthandler on, so that a crash
    also leaves the Python stack on its stderr)."""
    return [sys.executable, "-X", "faulthandler", "-c", _CHILD_CODE, "--model", model_path,
            "--extra-buffers", "on" if extra_buffers else "off", "--threads", str(threads),
            "--gpu-layers", str(gpu_layers), "--max-tokens", str(max_tokens)]


def run_child(command: Sequence[str], *, timeout_s: float) -> ChildResult:
    """Run ``command`` to its end (killed past ``timeout_s``); never raises for how it
    ended, only for a command that cannot be started."""
    try:
        done = subprocess.run(list(command), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        return ChildResult(list(command), None, timed_out=True, stdout=_text(exc.stdout), stderr=_text(exc.stderr))
    name = None
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
    return ChildResult(list(command), done.returncode, signal=name, stdout=_text(done.stdout),
                       stderr=_text(done.stderr))


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def diagnose_signal(name: str, *, amx: Sequence[str], extra_buffers: bool, loaded: bool) -> str:
    """One line on a child killed by signal ``name``."""
    when = "while generating (the model had loaded)" if loaded else "before the model had loaded"
    if name == "SIGILL" and amx and extra_buffers:
        return (f"killed by SIGILL {when}: the AMX kernels of llama-cpp-python's ggml crash on this CPU "
                f"({', '.join(amx)}); set local.extra_buffers = off (BOUNDCTX_LOCAL_EXTRA_BUFFERS=off, "
                "--extra-buffers off) to load models without them (decision 0013)")
    if name == "SIGILL":
        also = (" (llama.cpp's extra buffer types were already off, so not its known AMX crash)"
                if amx else "")
        return (f"killed by SIGILL {when}: llama.cpp ran an instruction this CPU does not have{also}; "
                "llama-cpp-python was probably built for another CPU: reinstall it on this machine "
                "(pip install --force-reinstall --no-cache-dir llama-cpp-python)")
    if name == "SIGKILL":
        return (f"killed by SIGKILL {when}: most often the out-of-memory killer; try a smaller model "
                "or free memory")
    return (f"killed by {name} {when}: llama.cpp crashed; the child's stderr below has the Python stack "
            "and llama.cpp's own error lines")


def _generation(child: ChildResult, *, amx: Sequence[str], extra_buffers: bool) -> GenerationCheck:
    stages = {}
    for line in child.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "stage" in record:
            stages[record["stage"]] = record
    tail = "\n".join(child.stderr.strip().splitlines()[-12:]) or None
    check = GenerationCheck(ran=True, loaded="loaded" in stages, returncode=child.returncode,
                            signal=child.signal, stderr_tail=tail)
    generated = stages.get("generated")
    if generated is not None:
        check.text, check.tokens = generated.get("text"), generated.get("tokens")
    if child.timed_out:
        check.diagnosis = "the child did not finish in time" + (" (the model loaded)" if check.loaded else "")
    elif child.signal is not None:
        check.diagnosis = diagnose_signal(child.signal, amx=amx, extra_buffers=extra_buffers, loaded=check.loaded)
    elif child.returncode != 0:
        last = child.stderr.strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        check.diagnosis = f"the child failed: {last[0]}"
    elif generated is None:
        check.diagnosis = "the child ended without generating"
    else:
        check.ok = True
    return check


def render(report: Report) -> str:
    """The report as aligned lines for a terminal."""
    rows = [("boundctx", report.boundctx),
            ("python", f"{report.python} ({report.python_executable})"),
            ("platform", f"{report.platform} ({report.machine})"),
            ("llama-cpp-python", report.llama_cpp_python or _NOT_INSTALLED)]
    if report.llama_cpp_system_info:
        rows.append(("llama.cpp", report.llama_cpp_system_info))
    have = [f for f, on in report.cpu_features.items() if on]
    lack = [f for f, on in report.cpu_features.items() if not on]
    if have or report.amx:
        rows.append(("cpu features", " ".join(have) + (f" (not: {' '.join(lack)})" if lack else "")))
    else:
        rows.append(("cpu features", "unknown (no CPU flags in /proc/cpuinfo)"))
    eb = report.extra_buffers
    rows.append(("extra buffers", f"{'on' if eb['enabled'] else 'off'} (local.extra_buffers = {eb['setting']}): "
                                  f"{eb['reason']}"))
    m = report.model
    if m.exists:
        state = "opens" if m.opens else f"FAILED: {m.error}"
        rows.append(("model", f"{m.path} ({(m.size or 0) / 2**20:.1f} MiB): {state}"))
    else:
        rows.append(("model", f"MISSING: {m.error}"))
    g = report.generation
    if not g.ran:
        rows.append(("generation", g.diagnosis or "not tried (--no-generate)"))
    elif g.ok:
        rows.append(("generation", f"OK in a child process: {g.tokens} tokens, {g.text!r}"))
    else:
        rows.append(("generation", f"FAILED: {g.diagnosis}"))
    if report.settings_error:
        rows.append(("settings", f"FAILED: {report.settings_error}"))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    if g.ran and not g.ok and g.stderr_tail:
        lines += ["", "the child's stderr ended with:"] + ["  " + line for line in g.stderr_tail.splitlines()]
    lines += ["", "everything works" if report.ok else f"{len(report.problems)} problem(s): "
              + "; ".join(report.problems)]
    return "\n".join(lines)


def child_main(argv: Sequence[str]) -> int:
    """The generation check itself, in the child: load the model, generate, and print
    one JSON line per stage reached (``loaded``, ``generated``) on stdout."""
    p = argparse.ArgumentParser(prog="boundctx doctor (child)")
    p.add_argument("--model", required=True)
    p.add_argument("--extra-buffers", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--gpu-layers", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=8)
    args = p.parse_args(list(argv))
    try:  # a crash is the finding: no core file for it
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("boundctx.llama_cpp").setLevel(logging.ERROR)
    from boundctx.providers.local import LlamaCppProvider

    def stage(name: str, **data) -> None:
        print(json.dumps({"stage": name, **data}), flush=True)

    provider = LlamaCppProvider(args.model, n_ctx=512, n_threads=args.threads or None,
                                n_gpu_layers=args.gpu_layers, extra_buffers=args.extra_buffers)
    provider.load()
    stage("loaded")
    reply = provider.chat(_PROMPT, max_tokens=args.max_tokens, temperature=0)
    stage("generated", text=reply.text, tokens=reply.finish.completion_tokens)
    provider.close()
    return 0
