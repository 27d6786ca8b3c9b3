"""What the CPU can do, and what local inference should therefore avoid (decision 0013).

llama-cpp-python 0.3.36's vendored ggml dies with SIGILL on Intel hosts with AMX: the
first generation runs ggml-cpu's AMX matrix kernels (``tileloadd`` in
``ggml/src/ggml-cpu/amx/mmq.cpp``). Those kernels are reached only through llama.cpp's
*extra buffer types* (the AMX and repacked weight layouts), so loading the model with
``use_extra_bufts = false`` avoids them. :func:`decide_extra_buffers` makes that choice
from the CPU's flags; it is a pure function so that every host's answer can be tested.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal, NamedTuple

__all__ = ["CPUINFO", "FEATURES", "ExtraBuffers", "ExtraBuffersSetting", "amx_flags", "cpu_flags",
           "decide_extra_buffers"]

#: Where Linux lists the CPU's flags.
CPUINFO = "/proc/cpuinfo"

#: The flags that matter to llama.cpp's CPU backend, in the order a report lists them.
FEATURES = ("avx", "avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16", "f16c", "fma")

ExtraBuffersSetting = Literal["auto", "on", "off"]
_SETTINGS = ("auto", "on", "off")


def cpu_flags(path: str | os.PathLike | None = None) -> frozenset[str]:
    """The flags of the first CPU in ``/proc/cpuinfo`` (every core of a host has the same
    ones); empty where the file does not exist (macOS, Windows) or lists none."""
    try:
        with open(CPUINFO if path is None else path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):  # x86, ARM
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def amx_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """The AMX flags among ``flags`` (``amx_tile``, ``amx_int8``, ``amx_bf16`` and any
    later ``amx_*``), sorted."""
    return tuple(sorted(f for f in set(flags) if f.startswith("amx_")))


class ExtraBuffers(NamedTuple):
    """Whether llama.cpp may use its extra buffer types, and why.

    Attributes
    ----------
    enabled : bool
        The value given to llama.cpp's model parameter ``use_extra_bufts``.
    setting : str
        ``"auto"``, ``"on"`` or ``"off"`` (``local.extra_buffers``).
    amx : tuple of str
        The AMX flags the CPU reported.
    reason : str
        One sentence for a log line or a report.
    """

    enabled: bool
    setting: str
    amx: tuple[str, ...]
    reason: str


def decide_extra_buffers(setting: ExtraBuffersSetting, flags: Iterable[str]) -> ExtraBuffers:
    """Whether to load a local model with llama.cpp's extra buffer types.

    Parameters
    ----------
    setting : {"auto", "on", "off"}
        ``auto`` turns them off on AMX hosts and leaves them on elsewhere; ``on`` and
        ``off`` are obeyed whatever the CPU.
    flags : iterable of str
        The CPU's flags (:func:`cpu_flags`).

    Raises
    ------
    ValueError
        ``setting`` is not one of the three.
    """
    if setting not in _SETTINGS:
        raise ValueError(f"extra_buffers must be one of {', '.join(map(repr, _SETTINGS))}, got {setting!r}")
    amx = amx_flags(flags)
    if setting == "on":
        why = (f"on as set, although the CPU has AMX ({', '.join(amx)}): llama-cpp-python 0.3.36 may die "
               "with SIGILL in its AMX kernels" if amx else "on as set")
        return ExtraBuffers(True, setting, amx, why)
    if setting == "off":
        return ExtraBuffers(False, setting, amx, "off as set: no repacked or AMX weight layouts")
    if amx:
        return ExtraBuffers(False, setting, amx,
                            f"AMX CPU detected ({', '.join(amx)}): loading without llama.cpp's extra buffer types "
                            "to avoid its AMX kernels (SIGILL in llama-cpp-python 0.3.36); "
                            "set local.extra_buffers = on to override")
    return ExtraBuffers(True, setting, amx, "no AMX on this CPU: llama.cpp's extra buffer types stay on")
