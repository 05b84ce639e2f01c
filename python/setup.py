"""Builds ddp_torch against the torch of the Python that runs pip:

    pip install --no-build-isolation ./python

(--no-build-isolation: the build must see your torch, not a fresh one.)
CMake builds libddp and the extension module from this checkout into
$DDP_TORCH_BUILD_DIR (default: build-python/ beside python/), with ccache
when it is installed; the package then holds the module, libddp and ddp's
Gloo module side by side. $DDP_TORCH_CMAKE_ARGS (space-separated) go to
CMake's configuration as well.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent.parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        try:
            import torch
        except ImportError:
            sys.exit("ddp-torch: the build needs the torch it is for; install torch, then "
                     "pip install --no-build-isolation ./python")
        build = Path(os.environ.get("DDP_TORCH_BUILD_DIR", ROOT / "build-python")).resolve()
        import sysconfig
        from torch.utils import cmake_prefix_path
        # Torch_DIR as well as the prefix: a build folder reused for another
        # torch would otherwise keep the one in its cache.
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     f"-DCMAKE_PREFIX_PATH={os.path.dirname(torch.__file__)}",
                     f"-DTorch_DIR={os.path.join(cmake_prefix_path, 'Torch')}",
                     "-UDDP_TORCH_PYTHON_LIBRARY", "-UPython3_*",
                     f"-DDDP_REFERENCE_PYTHON={sys.executable}", f"-DPython3_EXECUTABLE={sys.executable}",
                     "-DDDP_BUILD_TESTS=OFF", "-DDDP_BUILD_BENCH=OFF", "-DDDP_BUILD_EXAMPLES=OFF",
                     "-DDDP_BUILD_PYTHON=ON"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        configure += os.environ.get("DDP_TORCH_CMAKE_ARGS", "").split()
        subprocess.check_call(configure)
        jobs = os.environ.get("DDP_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build), "--target", "ddp_torch_C", "-j", jobs])
        module = Path(self.get_ext_fullpath(ext.name))
        module.parent.mkdir(parents=True, exist_ok=True)
        built = build / "python" / "ddp_torch" / ("_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        shutil.copy2(built, module)
        # The module finds libddp beside itself ($ORIGIN), and libddp its
        # Gloo module beside itself.
        if not (build / "libddp.so.0").exists():
            sys.exit(f"ddp-torch: the build made no {build / 'libddp.so.0'}")
        shutil.copy2(build / "libddp.so.0", module.parent)
        if (build / "libddp_gloo.so").exists():  # not built without Gloo's headers
            shutil.copy2(build / "libddp_gloo.so", module.parent)


setup(ext_modules=[Extension("ddp_torch._C", sources=[])], cmdclass={"build_ext": CMakeBuild})
