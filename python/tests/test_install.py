"""`pip install ./python` works offline with Debian's pip and setuptools: into a virtual
environment that sees Debian's packages (torch), where Debian's pip installs (its own Python is
externally managed). The installed package steps an optimizer and moves a tensor to disk."""

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent


def test_pip_installs_the_package_offline(tmp_path):
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no venv here (Debian's python3-venv): {made.stderr.strip()}")
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-index", str(PACKAGE)],
        capture_output=True, text=True, cwd=tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    check = """
import os, sys, torch, strata
from strata.optim import CPUAdam
from strata.aio import aio_handle
assert strata.__file__.startswith(sys.prefix), strata.__file__
p = torch.nn.Parameter(torch.ones(8192))
p.grad = torch.ones(8192)
CPUAdam([p], lr=0.1).step()
assert float(p[0]) < 1.0
assert aio_handle().sync_pwrite(p.detach(), os.path.join(sys.argv[1], "p.bin")) == 1
"""
    ran = subprocess.run([str(venv / "bin" / "python"), "-c", check, str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert not (PACKAGE / "build").exists()  # setuptools' files went to the build folder
