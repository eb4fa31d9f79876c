"""The distribution: templates/ and jni/ found the same way from a wheel and from an editable install."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

PROBE = (
    "import json, tvmgen, tvmgen.core.resources as r; "
    "print(json.dumps({'pkg': tvmgen.__file__, 'templates': str(r.templates_dir()), 'jni': str(r.jni_dir())}))"
)


def shipped(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_editable_install_finds_repo_dirs():
    import tvmgen.core.resources as r

    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, cwd="/")
    import json

    found = json.loads(out.stdout)
    assert Path(found["templates"]) == REPO / "templates" == r.templates_dir()
    assert Path(found["jni"]) == REPO / "jni"
    assert Path(found["pkg"]).parent == REPO / "generator" / "tvmgen"  # generator/ is the source root


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    import shutil

    # Built from a copy without the checkout's build/ and egg-info: setuptools reuses build/lib and
    # never removes a file from it, so a deleted source would still be shipped.
    source = tmp_path_factory.mktemp("src") / "tvmgen"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "out", "*.egg-info", "__pycache__", ".pytest_cache"
        ),
    )
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
    )
    (whl,) = dist.glob("tvmgen-*.whl")
    return whl


def test_wheel_contents(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "tvmgen/cli.py" in names and "tvmgen/frontends/onnx.py" in names and "tvmgen/ios/project.py" in names
    for sub in ("templates", "jni"):
        want = {f"tvmgen/{sub}/{n}" for n in shipped(REPO / sub)}
        assert want and want <= names, want - names
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "tvmgen = tvmgen.cli:entry" in entry
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "Requires-Dist: apache-tvm==0.27.0.post1" in meta
    for extra in ("tensorflow", "torch", "test"):
        assert f"Provides-Extra: {extra}" in meta


def test_installed_wheel_finds_packaged_dirs(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ, PYTHONPATH=str(target), PYTHONNOUSERSITE="1")
    # -S keeps the editable install's path hook out, so only the wheel's copy can be imported
    out = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path.append({str(_site_packages())!r}); " + PROBE],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    import json

    found = json.loads(out.stdout)
    assert Path(found["pkg"]).parent == target / "tvmgen"
    assert Path(found["templates"]) == target / "tvmgen" / "templates"
    assert shipped(Path(found["jni"])) == shipped(REPO / "jni")
    assert shipped(Path(found["templates"])) == shipped(REPO / "templates")


def _site_packages() -> Path:
    import click

    return Path(click.__file__).parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```sh\n")[1:]]
    quick = blocks[:2]  # the quick start's two commands
    assert quick[0].startswith("bash scripts/bootstrap.sh && .venv/bin/tvmgen compile builtin:mobilenet")
    assert quick[1] == "bash scripts/bootstrap.sh && bash scripts/check.sh && .venv/bin/python -m pytest"
    assert quick[1] in (REPO / ".ci" / "run").read_text().splitlines()


def test_tvm_loads_without_torch_and_torch_models_still_import(torch_pt2):
    """The command line keeps tvm_ffi and tvm.relax from importing PyTorch as they load (2 s of CPU per
    command), except for a PyTorch model; torch stays importable after TVM (the frontend still works)."""
    from tvmgen import cli

    assert cli.wants_torch(["compile", "m.pt2", "--check"]) and not cli.wants_torch(["compile", "m.onnx"])
    code = (
        "import sys, tvmgen\n"
        "tvmgen.load_tvm_without_torch()\n"
        "import tvm\n"
        "from tvm import relax\n"
        "print('torch' in sys.modules)\n"
        "from tvmgen import frontends\n"
        f"m = frontends.load({str(torch_pt2)!r}, [])\n"
        "print('torch' in sys.modules, m.format, [i.shape for i in m.inputs])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["False", "True pytorch [(1, 3, 64, 64)]"], r.stdout
