"""Every kernel source compiles with nvcc for the Jetson Orin (sm_87) and Hopper (sm_90)."""
import shutil
import subprocess
from pathlib import Path

import pytest

from vilib_ros.frontend.config import frontend_defines as kernel_defines, ransac_defines

KERNELS = sorted((Path(__file__).resolve().parents[1] / "vilib_ros" / "kernels").glob("*.cu"))
VARIANTS = {"fast.cu": [[f"-DFAST_N={n}", f"-DFAST_SCORE={s}"] for n in (9, 12) for s in (0, 1, 2)],
            "nms.cu": [[f"-DNMS_R={r}"] for r in (1, 2, 3, 4)],
            "frontend.cu": [[f"-D{k}={v}" for k, v in kernel_defines().items()]],
            "ransac.cu": [["-fmad=false", *(f"-D{k}={v}" for k, v in {**ransac_defines(), "RS_LO_ITERATIONS": lo}.items())]
                          for lo in (0, 2)]}   # the refits: off by default, on here

pytestmark = pytest.mark.nvcc


def test_kernel_sources_found():
    assert {"pyramid.cu", "fast.cu", "nms.cu", "lk.cu", "frontend.cu", "ransac.cu"} <= {k.name for k in KERNELS}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.slow
class TestNvccCompile:
    @pytest.mark.parametrize("arch", ["sm_87", "sm_90"])
    @pytest.mark.parametrize("src", KERNELS, ids=lambda p: p.name)
    def test_compiles(self, src, arch, tmp_path):
        for defines in VARIANTS.get(src.name, [[]]):
            out = tmp_path / (src.stem + ".o")
            cmd = ["nvcc", "-std=c++17", f"-arch={arch}", "-c", "-o", str(out), *defines, str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
            assert out.stat().st_size > 0


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.slow
class TestInlinedSource:
    """What NVRTC compiles: the source with its headers inlined by _cuda.kernel_source (so that
    CuPy's source-keyed cache sees header edits), compiled outside the kernel folder."""

    @pytest.mark.parametrize("src", KERNELS, ids=lambda p: p.name)
    def test_compiles(self, src, tmp_path):
        from vilib_ros._cuda import kernel_source

        code = kernel_source(src.stem)
        assert "#include \"" not in code
        f = tmp_path / src.name
        f.write_text(code)
        defines = VARIANTS.get(src.name, [[]])[0]
        cmd = ["nvcc", "-std=c++17", "-arch=sm_90", "-c", "-o", str(tmp_path / "k.o"), *defines, str(f)]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
        assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stderr}"
