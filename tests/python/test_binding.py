"""The ctypes binding (python/normjit/_capi.py) against the C header it binds
(runtime/include/normjit/normjit.h): enum values, the options struct's fields, types, order
and layout (offsetof from a C compiler), and every function's prototype. Changing either side
alone fails here. No GPU, no PyTorch."""
import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from normjit import _capi

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "runtime" / "include" / "normjit" / "normjit.h"

# C type (spaces normalised) -> the ctypes type the binding must use.
P = ctypes.POINTER
C_TYPES = {
    "void": None,
    "int": ctypes.c_int,
    "int*": P(ctypes.c_int),
    "int64_t": ctypes.c_int64,
    "const int64_t*": P(ctypes.c_int64),
    "uint64_t": ctypes.c_uint64,
    "uint64_t*": P(ctypes.c_uint64),
    "double": ctypes.c_double,
    "const char*": ctypes.c_char_p,
    "const void*": ctypes.c_void_p,
    "void*": ctypes.c_void_p,
    "struct CUstream_st*": ctypes.c_void_p,
    "normjit_status": ctypes.c_int,  # C enums are ints
    "normjit_dtype": ctypes.c_int,
    "normjit_engine*": ctypes.c_void_p,
    "const normjit_engine*": ctypes.c_void_p,
    "normjit_engine**": P(ctypes.c_void_p),
    "normjit_kernel*": ctypes.c_void_p,
    "const normjit_kernel*": ctypes.c_void_p,
    "normjit_kernel**": P(ctypes.c_void_p),
    "normjit_engine_options*": P(_capi.EngineOptions),
    "const normjit_engine_options*": P(_capi.EngineOptions),
}


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def norm_type(text: str) -> str:
    text = re.sub(r"\s+", " ", text.strip())
    return re.sub(r"\s*\*", "*", text)


def parse_header(text: str) -> dict:
    """enums {name: {enumerator: value}}, structs {name: [(type, field)]},
    functions {name: (return type, [param types])}."""
    code = strip_comments(text)
    enums = {}
    for name, body in re.findall(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*\1\s*;", code, re.S):
        values = {}
        for item in filter(None, (i.strip() for i in body.split(","))):
            m = re.fullmatch(r"(\w+)\s*=\s*(-?\d+)", item)
            assert m, f"enum {name}: enumerator without an explicit value: {item!r}"
            values[m.group(1)] = int(m.group(2))
        enums[name] = values
    structs = {}
    for name, body in re.findall(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*\1\s*;", code, re.S):
        fields = []
        for decl in filter(None, (d.strip() for d in body.split(";"))):
            m = re.fullmatch(r"(.*?)(\w+)", decl, re.S)
            fields.append((norm_type(m.group(1)), m.group(2)))
        structs[name] = fields
    functions = {}
    for chunk in code.split(";"):
        m = re.search(r"((?:const\s+)?\w+(?:\s*\*)*)\s*\b(normjit_\w+)\s*\(([^()]*)\)\s*$",
                      chunk, re.S)
        if not m:
            continue
        ret, name, params = m.groups()
        types = []
        params = params.strip()
        if params and params != "void":
            for p in params.split(","):
                m = re.fullmatch(r"(.*?)(\w+)", p.strip(), re.S)
                types.append(norm_type(m.group(1)))
        functions[name] = (norm_type(ret), types)
    return {"enums": enums, "structs": structs, "functions": functions}


def ctype_name(t) -> str:
    return "None" if t is None else getattr(t, "__name__", repr(t))


def mismatches(parsed: dict) -> list:
    """Every difference between the parsed header and the binding; empty when they agree."""
    problems = []
    # Enums: every enumerator with its value, and nothing more in Python.
    if set(parsed["enums"]) != set(_capi.ENUMS):
        problems.append(f"enums: header {sorted(parsed['enums'])}, binding {sorted(_capi.ENUMS)}")
    for cname, values in parsed["enums"].items():
        if cname not in _capi.ENUMS:
            continue
        py_enum, prefix = _capi.ENUMS[cname]
        py_values = {prefix + m.name: m.value for m in py_enum}
        if py_values != values:
            problems.append(f"enum {cname}: header {values}, binding {py_values}")
    # The options struct: field names, order and types.
    fields = parsed["structs"].get("normjit_engine_options")
    py_fields = [(name, t) for name, t in _capi.EngineOptions._fields_]
    if fields is None:
        problems.append("struct normjit_engine_options not found in the header")
    elif [f for _, f in fields] != [n for n, _ in py_fields]:
        problems.append(f"normjit_engine_options fields: header {[f for _, f in fields]}, "
                        f"binding {[n for n, _ in py_fields]}")
    else:
        for (ctype, fname), (_, pytype) in zip(fields, py_fields):
            if C_TYPES.get(ctype, "?") is not pytype:
                problems.append(f"normjit_engine_options.{fname}: header {ctype}, binding "
                                f"{ctype_name(pytype)}")
    # Functions: the same set, each with the same return and parameter types.
    header_fns, py_fns = parsed["functions"], _capi.PROTOTYPES
    for name in sorted(set(header_fns) ^ set(py_fns)):
        where = "header only" if name in header_fns else "binding only"
        problems.append(f"function {name}: {where}")
    for name in sorted(set(header_fns) & set(py_fns)):
        ret, params = header_fns[name]
        py_ret, py_params = py_fns[name]
        want = [C_TYPES.get(t, f"unknown C type {t!r}") for t in params]
        if C_TYPES.get(ret, f"unknown C type {ret!r}") is not py_ret:
            problems.append(f"{name} returns {ret}; binding restype {ctype_name(py_ret)}")
        if len(want) != len(py_params) or any(w is not p for w, p in zip(want, py_params)):
            problems.append(f"{name}({', '.join(params)}); binding argtypes "
                            f"[{', '.join(ctype_name(p) for p in py_params)}]")
    return problems


def test_header_parses_completely():
    parsed = parse_header(HEADER.read_text())
    assert set(parsed["enums"]) == {"normjit_status", "normjit_dtype"}
    assert "normjit_engine_options" in parsed["structs"]
    # Every "normjit_...(" declaration in the header was understood.
    declared = set(re.findall(r"\b(normjit_\w+)\s*\(", strip_comments(HEADER.read_text())))
    assert declared == set(parsed["functions"]), declared ^ set(parsed["functions"])
    assert len(parsed["functions"]) >= 12


def test_binding_matches_header():
    problems = mismatches(parse_header(HEADER.read_text()))
    assert not problems, "\n".join(problems)


def swap(a: str, b: str):
    return lambda t: t.replace(a, "\0").replace(b, a).replace("\0", b)


def replace(old: str, new: str):
    def edit(text: str) -> str:
        assert old in text, f"the test's edit no longer applies: {old!r}"
        return text.replace(old, new, 1)
    return edit


@pytest.mark.parametrize("edit", [
    replace("NORMJIT_BF16 = 2", "NORMJIT_BF16 = 3"),                 # an enum value
    replace("NORMJIT_ERROR_INTERNAL = 7", "NORMJIT_ERROR_INTERNAL = 7, NORMJIT_ERROR_NEW = 8"),
    replace("uint64_t cache_max_bytes;", "uint32_t cache_max_bytes;"),  # a field's type
    swap("memory_only;", "jit_disabled;"),                              # the fields' order
    replace("int64_t batch, double eps", "int batch, double eps"),      # a parameter's type
    replace("void normjit_engine_destroy(normjit_engine* engine);",
            "void normjit_engine_destroy(normjit_engine* engine);\nint normjit_new(void);"),
], ids=["enum-value", "enumerator", "field-type", "field-order", "param-type", "function"])
def test_an_edit_of_the_header_alone_is_caught(edit):
    text = HEADER.read_text()
    edited = edit(text)
    assert edited != text
    assert mismatches(parse_header(edited)), "the edited header still matches the binding"


def test_struct_layout_matches_a_c_compiler(tmp_path):
    """offsetof and sizeof from the C compiler against ctypes' layout."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to compute offsetof")
    fields = [name for name, _ in _capi.EngineOptions._fields_]
    src = tmp_path / "layout.c"
    src.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <normjit/normjit.h>\n"
                   "int main(void) {\n"
                   + "".join(f'  printf("%zu ", offsetof(normjit_engine_options, {f}));\n'
                             for f in fields)
                   + '  printf("%zu\\n", sizeof(normjit_engine_options));\n  return 0;\n}\n')
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", str(HEADER.parent.parent), str(src), "-o", str(exe)], check=True)
    numbers = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True,
                                              text=True).stdout.split()]
    ours = [getattr(_capi.EngineOptions, f).offset for f in fields]
    assert numbers == ours + [ctypes.sizeof(_capi.EngineOptions)]


def test_every_prototype_resolves_in_the_library():
    lib = _capi.library()
    for name, (restype, argtypes) in _capi.PROTOTYPES.items():
        fn = getattr(lib, name)
        assert fn.restype is restype and fn.argtypes == argtypes, name
