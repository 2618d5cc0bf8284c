"""One version everywhere: normjit.__version__ is the C header's NORMJIT_VERSION_* (which
configuring holds CMakeLists.txt's project version to), pyproject.toml's and the loaded
library's normjit_version(), so a release that bumps one of them alone fails here. No GPU, no
PyTorch."""
import re
from pathlib import Path

import pytest

import normjit

REPO = Path(__file__).resolve().parents[2]


def header_version() -> str:
    text = (REPO / "runtime" / "include" / "normjit" / "normjit.h").read_text()
    parts = [re.search(rf"^#define NORMJIT_VERSION_{part} +(\d+)$", text, re.M)
             for part in ("MAJOR", "MINOR", "PATCH")]
    assert all(parts), "normjit.h lacks a NORMJIT_VERSION_MAJOR, _MINOR or _PATCH"
    return ".".join(m.group(1) for m in parts)


def pyproject_version() -> str:
    text = (REPO / "pyproject.toml").read_text()
    project = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    assert project, "pyproject.toml has no [project] table"
    version = re.search(r'^version = "([^"]*)"$', project.group(1), re.M)
    assert version, "pyproject.toml's [project] has no version"
    return version.group(1)


def cmake_version() -> str:
    text = (REPO / "CMakeLists.txt").read_text()
    version = re.search(r"^project\(normjit VERSION (\S+)", text, re.M)
    assert version, "CMakeLists.txt has no project(normjit VERSION ...)"
    return version.group(1)


@pytest.mark.parametrize("where, version", [
    ("runtime/include/normjit/normjit.h NORMJIT_VERSION_*", header_version),
    ("pyproject.toml [project] version", pyproject_version),
    ("CMakeLists.txt project(normjit VERSION ...)", cmake_version),
    ("normjit.library_version() (libnormjit's normjit_version())", normjit.library_version),
], ids=["header", "pyproject", "cmake", "library"])
def test_every_version_is_the_packages(where, version):
    assert version() == normjit.__version__, f"{where} differs from normjit.__version__"


def test_library_version_is_the_c_functions():
    from normjit import _capi
    assert normjit.library_version() == _capi.library().normjit_version().decode()
    assert re.fullmatch(r"\d+\.\d+\.\d+", normjit.library_version())
