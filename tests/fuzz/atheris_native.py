#!/usr/bin/env python3
"""Coverage-guided fuzzing of every native entry point, with atheris (libFuzzer).

Each input is arbitrary bytes; ``targets.run`` reads one call's arguments from them,
makes the native call and compares it with the twin (see ``targets.py``). A native
crash kills the process (libFuzzer keeps the input); a disagreement or an unexpected
exception is an uncaught exception (the same). Both exit non-zero and write the input
to ``<artifact_prefix>crash-<sha1>``.

Usage, from the repository root (libFuzzer flags pass through)::

    python -m tests.fuzz.atheris_native -atheris_runs=20000              # N inputs (CI: seconds)
    python -m tests.fuzz.atheris_native -max_total_time=3600 CORPUS_DIR   # a time budget, keeping a corpus
    python -m tests.fuzz.atheris_native crash-0123abcd                   # replay one input
    python -m tests.fuzz.atheris_native --target sections.next_cut -atheris_runs=5000

``--target NAME`` fuzzes one entry point (names: ``targets.TARGETS``). ``--plant``
adds a planted finding, to check that a finding fails the run (the test suite does).

What guides the search: atheris instruments Python bytecode, so coverage comes from
the twins (``tests/reference/``, ``twins.py``) and the targets, which follow the native
logic branch for branch; the compiled core itself is not instrumented (that would need
a clang build with ``-fsanitize=fuzzer-no-link``). The grapheme table is built before
instrumentation starts (it takes seconds and has no branches worth guiding).

Without atheris installed this says how to install it and exits 0, so CI on a
platform without a wheel still runs the Hypothesis side (``test_fuzz_native.py``).
"""

from __future__ import annotations

import sys

try:
    import atheris
except ImportError:
    print("atheris is not installed, so there is no coverage-guided run: pip install atheris "
          "(wheels for x86-64 Linux, CPython 3.10-3.14; elsewhere it builds from source with clang). "
          "The Hypothesis fuzz tests in tests/fuzz/ still run.", file=sys.stderr)
    sys.exit(0)

from tests.reference import graphemes  # noqa: E402

graphemes.property_values()  # cached: built once, uninstrumented

with atheris.instrument_imports(include=["tests.reference", "tests.fuzz.twins", "tests.fuzz.targets"]):
    from tests.fuzz import targets  # noqa: E402


def main(argv: list[str]) -> None:
    target, plant, rest = None, False, [argv[0]]
    args = iter(argv[1:])
    for arg in args:
        if arg == "--target":
            target = next(args)
        elif arg.startswith("--target="):
            target = arg.split("=", 1)[1]
        elif arg == "--plant":
            plant = True
        else:
            rest.append(arg)
    if target is not None and target not in targets.TARGETS:
        raise SystemExit(f"unknown target {target!r}; one of: {', '.join(sorted(targets.TARGETS))}")

    def one_input(data: bytes) -> None:
        if plant and len(data) >= 4:
            raise targets.Mismatch("planted finding (--plant)")
        targets.run(data, target)

    atheris.Setup(rest, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
