"""`pip install .` lays the folders out as the sagespec namespace; the editable install serves the
same names from the checkout."""

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import sagespec.common

ROOT = Path(__file__).resolve().parents[1]


def test_editable_install_serves_the_checkout():
    assert Path(sagespec.common.__file__).resolve().parent == ROOT / "common"


def test_wheel_install_maps_folders_into_the_namespace(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("sagespec-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    sources = sorted(
        f"sagespec/{path.relative_to(ROOT).as_posix()}"
        for top in ("common", "kernels", "plugins")
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    )
    missing = [name for name in sources if name not in names]
    assert not missing, f"source files the wheel leaves out (list their package in pyproject.toml): {missing}"
    assert not any(n.startswith(("common/", "kernels/", "plugins/", "tests/")) for n in names)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    # -S: no site processing, so the editable finder is off; torch comes from the environment's site dir
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]]))
    code = "import sagespec.common.tree as t, sagespec.kernels as k; print(t.__file__); print(k.__file__)"
    out = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, check=True)
    assert all(line.startswith(str(target)) for line in out.stdout.split())
