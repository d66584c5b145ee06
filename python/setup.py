"""`pip install ./python`: builds the package with the project's CMake (the release preset, as
`cmake --build --preset release` does; the target strata_python alone) and installs what it made
in build/release/python/strata. Offline, with Debian's setuptools."""

import shutil
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent.parent
# setuptools' own files go under the ignored build folder, not beside this file.
SCRATCH = ROOT / "build" / "release" / "python-pip"
SCRATCH.mkdir(parents=True, exist_ok=True)


class BuildWithCMake(build_py):
    def run(self):
        super().run()  # the Python modules
        subprocess.check_call(["cmake", "--preset", "release"], cwd=ROOT)
        subprocess.check_call(["cmake", "--build", "--preset", "release", "--target",
                               "strata_python"], cwd=ROOT)
        built = ROOT / "build" / "release" / "python" / "strata"
        # The module is built for Debian's python3 (cmake/dependencies.cmake): a pip of another
        # Python would install a module its interpreter cannot import.
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if not (built / f"_native{suffix}").exists():
            raise RuntimeError(f"the build made a module for another Python than this pip's "
                               f"({suffix}); fix: run the pip of Debian's python3, or of a venv "
                               f"made from it")
        shutil.copytree(built, Path(self.build_lib) / "strata", dirs_exist_ok=True)


class NativeDistribution(Distribution):
    """The package holds a compiled module: a wheel of this platform, not a pure one."""

    def has_ext_modules(self):
        return True


setup(name="strata", version="0.1.0",
      description="strata's CPU optimizers and DeepNVMe aio handle for PyTorch",
      packages=["strata"], cmdclass={"build_py": BuildWithCMake}, distclass=NativeDistribution,
      python_requires=">=3.11", zip_safe=False,
      options={"build": {"build_base": str(SCRATCH / "build")},
               "egg_info": {"egg_base": str(SCRATCH)}})
