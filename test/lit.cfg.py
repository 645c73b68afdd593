# lit configuration for the qd text-format tests (see test/CMakeLists.txt).
import os

import lit.formats

config.name = "qd"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".qd"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "lit.site.cfg.py.in",
                   "Inputs", "run-doc.py"]

config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.qd_obj_root, "test")

# Every run starts from empty Output directories, as CI's clean clone does: a
# RUN line that reads a file a later RUN line writes fails here too, instead
# of passing on what an earlier run left behind.
import shutil as _shutil
for _dir, _subdirs, _files in os.walk(config.test_exec_root):
    if "Output" in _subdirs:
        _shutil.rmtree(os.path.join(_dir, "Output"), ignore_errors=True)
        _subdirs.remove("Output")

# Tests must not depend on the caller's locale; tools are substituted by full
# path, so a stray qd-opt in PATH is never used.
config.environment["LC_ALL"] = "C"


def tool(name, directory):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        lit_config.fatal(f"cannot find {name} at {path}")
    return path


config.substitutions.append(("%qd_src_root", config.qd_src_root))
config.substitutions.append(("%qd_obj_root", config.qd_obj_root))
# Whole-word substitutions, as LLVM's ToolSubst does: '-o' or 'count' inside a
# CHECK pattern on the RUN line is never rewritten.
for name, directory in [("qd-opt", config.qd_tools_dir),
                        ("qd-run", config.qd_run_dir),
                        ("qd-check-grad", config.qd_check_grad_dir),
                        ("qd-translate", config.qd_translate_dir),
                        ("FileCheck", config.llvm_tools_dir),
                        ("not", config.llvm_tools_dir),
                        ("split-file", config.llvm_tools_dir),
                        ("count", config.llvm_tools_dir),
                        ("llvm-readobj", config.llvm_tools_dir),
                        ("llvm-objdump", config.llvm_tools_dir)]:
    config.substitutions.append(
        (r"(?<![\w/.-])" + name.replace("-", r"\-") + r"(?![\w/.-])", tool(name, directory)))

# The backends this build has: tests that use one say `REQUIRES: cuda-backend`,
# `amdgpu-backend` or `vulkan-backend` (or `%if ... %{ %}` on a RUN line);
# SPIR-V code generation comes with the Vulkan backend (`spirv`).
for backend in config.qd_backends:
    config.available_features.add(backend + "-backend")
if "vulkan" in config.qd_backends:
    config.available_features.add("spirv")

# The Vulkan device the loader finds (lavapipe in CI, a GPU's driver
# elsewhere): tests that run kernels on it say `REQUIRES: vulkan`.
for var in ["QD_VULKAN_DEVICE", "VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_LOADER_DEBUG"]:
    if var in os.environ:
        config.environment[var] = os.environ[var]



def vulkan_device_available():
    import subprocess
    import tempfile
    probe = "field @y : i32\nkernel @k() {\n  serial {\n  }\n}\n"
    with tempfile.NamedTemporaryFile("w", suffix=".qd", delete=False) as f:
        f.write(probe)
    try:
        env = dict(os.environ, **config.environment)
        r = subprocess.run([tool("qd-run", config.qd_run_dir), f.name, "--backend=vulkan"],
                           env=env, capture_output=True, timeout=60)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        os.unlink(f.name)


if vulkan_device_available():
    config.available_features.add("vulkan")

# NVIDIA's assembler, where the CUDA toolkit is installed (its usual place,
# else on PATH): tests that assemble the PTX qd-translate writes say
# `REQUIRES: ptxas` (reported UNSUPPORTED without it) or `%if ptxas %{ ... %}`.
import shutil
_ptxas = "/usr/local/cuda/bin/ptxas"
if not os.path.exists(_ptxas):
    _ptxas = shutil.which("ptxas")
if _ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append((r"(?<![\w/.-])ptxas(?![\w/.-])", _ptxas))

# The Python package over libqd-c (python/qd, docs/python.md): pages that use
# it run with QD_PYTHON (%qd_python) and say `REQUIRES: python-torch`, which
# holds where that Python has NumPy and PyTorch. A sanitized libqd-c cannot
# be loaded into an uninstrumented Python, so sanitized builds leave them out.
config.substitutions.append(("%qd_python", config.qd_python))


def python_has_torch():
    import subprocess
    try:
        return subprocess.run([config.qd_python, "-c", "import numpy, torch"],
                              capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


if not config.qd_sanitize and python_has_torch():
    config.available_features.add("python-torch")
