"""The ctypes binding (python/normjit/_capi.py) against the C header it binds
(runtime/include/normjit/normjit.h): enum values, every struct's fields (the engine options,
the launch arguments), their types, order and layout (offsetof from a C compiler), and every
function's prototype. Changing either side alone fails here. No GPU, no PyTorch."""
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
    "int64_t[2]": ctypes.c_int64 * 2,
    "size_t": ctypes.c_size_t,
    "const int64_t*": P(ctypes.c_int64),
    "uint64_t": ctypes.c_uint64,
    "uint64_t*": P(ctypes.c_uint64),
    "double": ctypes.c_double,
    "const char*": ctypes.c_char_p,
    "const void*": ctypes.c_void_p,
    "void*": ctypes.c_void_p,
    "const float*": ctypes.c_void_p,  # device pointers: Python ints
    "float*": ctypes.c_void_p,
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
    "normjit_engine_options": _capi.EngineOptions,  # a field of normjit_engine_config
    "normjit_engine_config*": P(_capi.EngineConfig),
    "const normjit_engine_config*": P(_capi.EngineConfig),
    "normjit_launch_args*": P(_capi.LaunchArgs),
    "const normjit_launch_args*": P(_capi.LaunchArgs),
    "normjit_backward_args*": P(_capi.BackwardArgs),
    "const normjit_backward_args*": P(_capi.BackwardArgs),
    "normjit_engine_stats*": P(_capi.EngineStats),
}


def same_ctype(a, b) -> bool:
    """ctypes types are equal: the same object, or arrays of the same element and length."""
    if a is b:
        return True
    array = ctypes.Array
    return (isinstance(a, type) and isinstance(b, type) and issubclass(a, array)
            and issubclass(b, array) and a._length_ == b._length_ and a._type_ is b._type_)


def strip_comments(text: str) -> str:
    """The declarations: comments and preprocessor lines (continued ones included) removed."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


# struct -> the macro normjit_<struct>_init(p), which the header defines as the sized init
# with the caller's sizeof (the library's own would overrun an older program's struct).
INIT_MACROS = ("engine_config", "launch_args", "backward_args", "engine_stats")


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
            m = re.fullmatch(r"(.*?)(\w+)\s*(\[\s*\d+\s*\])?", decl, re.S)
            assert m, f"struct {name}: field not understood: {decl!r}"
            array = re.sub(r"\s+", "", m.group(3) or "")
            fields.append((norm_type(m.group(1)) + array, m.group(2)))
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
    # Structs: the same set, each with the same field names, order and types.
    for cname in sorted(set(parsed["structs"]) ^ set(_capi.STRUCTS)):
        where = "header only" if cname in parsed["structs"] else "binding only"
        problems.append(f"struct {cname}: {where}")
    for cname in sorted(set(parsed["structs"]) & set(_capi.STRUCTS)):
        fields = parsed["structs"][cname]
        py_fields = [(name, t) for name, t in _capi.STRUCTS[cname]._fields_]
        if [f for _, f in fields] != [n for n, _ in py_fields]:
            problems.append(f"{cname} fields: header {[f for _, f in fields]}, "
                            f"binding {[n for n, _ in py_fields]}")
            continue
        for (ctype, fname), (_, pytype) in zip(fields, py_fields):
            if not same_ctype(C_TYPES.get(ctype, "?"), pytype):
                problems.append(f"{cname}.{fname}: header {ctype}, binding {ctype_name(pytype)}")
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
    assert set(parsed["structs"]) == {"normjit_engine_options", "normjit_engine_config",
                                      "normjit_launch_args", "normjit_backward_args",
                                      "normjit_engine_stats"}
    # Every "normjit_...(" declaration in the header was understood.
    declared = set(re.findall(r"\b(normjit_\w+)\s*\(", strip_comments(HEADER.read_text())))
    assert declared == set(parsed["functions"]), declared ^ set(parsed["functions"])
    assert len(parsed["functions"]) >= 12


def test_binding_matches_header():
    problems = mismatches(parse_header(HEADER.read_text()))
    assert not problems, "\n".join(problems)


def test_each_init_is_the_sized_init_with_the_callers_sizeof():
    defines = {}
    for name, params, body in re.findall(
            r"^#define\s+(normjit_\w+)\(([^)]*)\)\s*((?:[^\n]*\\\n)*[^\n]*)",
            HEADER.read_text(), re.M):
        defines[name] = (params.strip(), re.sub(r"\s+", " ", body.replace("\\\n", " ")).strip())
    assert set(defines) == {f"normjit_{s}_init" for s in INIT_MACROS}, sorted(defines)
    functions = parse_header(HEADER.read_text())["functions"]
    for struct in INIT_MACROS:
        param, body = defines[f"normjit_{struct}_init"]
        assert body == f"normjit_{struct}_init_sized(({param}), sizeof *({param}))", body
        assert functions[f"normjit_{struct}_init_sized"] == (
            "void", [f"normjit_{struct}*", "size_t"])
        # The function of the same name stays, for programs built before the macro.
        assert functions[f"normjit_{struct}_init"] == ("void", [f"normjit_{struct}*"])


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
    replace("NORMJIT_E5M2 = 4", "NORMJIT_E5M2 = 5"),                 # a new enumerator's value
    replace("int64_t inner_rows;", "int inner_rows;"),                # a launch_args field type
    swap("float* mean;", "float* rstd;"),                              # launch_args field order
    replace("int64_t y_strides[2];", "int64_t y_strides[3];"),        # an array's length
    replace("int64_t residual_out_strides[2];",
            "int64_t residual_out_strides[2];\n  int64_t added;"),   # a field appended
    replace("const normjit_launch_args* args,\n", "normjit_launch_args args,\n"),  # a parameter
    replace("typedef struct normjit_engine normjit_engine;",
            "typedef struct normjit_engine normjit_engine;\n"
            "typedef struct normjit_new { int a; } normjit_new;"),    # a struct
], ids=["enum-value", "enumerator", "field-type", "field-order", "param-type", "function",
        "fp8-enum-value", "args-field-type", "args-field-order", "args-array-length",
        "args-field-added", "launch-ex-param", "struct"])
def test_an_edit_of_the_header_alone_is_caught(edit):
    text = HEADER.read_text()
    edited = edit(text)
    assert edited != text
    assert mismatches(parse_header(edited)), "the edited header still matches the binding"


@pytest.mark.parametrize("cname", sorted(_capi.STRUCTS))
def test_struct_layout_matches_a_c_compiler(tmp_path, cname):
    """offsetof and sizeof from the C compiler against ctypes' layout."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to compute offsetof")
    struct = _capi.STRUCTS[cname]
    fields = [name for name, _ in struct._fields_]
    src = tmp_path / "layout.c"
    src.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <normjit/normjit.h>\n"
                   "int main(void) {\n"
                   + "".join(f'  printf("%zu ", offsetof({cname}, {f}));\n' for f in fields)
                   + f'  printf("%zu\\n", sizeof({cname}));\n  return 0;\n}}\n')
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", str(HEADER.parent.parent), str(src), "-o", str(exe)], check=True)
    numbers = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True,
                                              text=True).stdout.split()]
    ours = [getattr(struct, f).offset for f in fields]
    assert numbers == ours + [ctypes.sizeof(struct)]


def test_launch_args_init_fills_the_defaults():
    """normjit_launch_args_init_sized through the binding: size is the C struct's, eps 1e-5,
    one level of contiguous rows, every pointer NULL."""
    lib = _capi.library()
    args = _capi.LaunchArgs()
    ctypes.memset(ctypes.byref(args), 0x5A, ctypes.sizeof(args))
    lib.normjit_launch_args_init_sized(ctypes.byref(args), ctypes.sizeof(args))
    assert args.size == ctypes.sizeof(_capi.LaunchArgs)
    assert args.eps == 1e-5 and args.inner_rows == 1 and args.batch == 0
    for name in ("x", "y", "weight", "bias", "residual", "residual_out", "scale", "mean", "rstd"):
        assert getattr(args, name) is None, name
    for name in ("x_strides", "y_strides", "residual_strides", "residual_out_strides"):
        assert list(getattr(args, name)) == [0, 0], name
    # The struct reaches the library whole: a launch without a kernel names the kernel, one
    # with a wrong size names args.size.
    args.x = args.y = 1 << 40
    args.batch = 2
    status = lib.normjit_launch_ex(None, ctypes.byref(args), None)
    assert status == _capi.Status.ERROR_INVALID_ARGUMENT
    assert b"invalid kernel" in lib.normjit_last_error()
    args.size = 8
    assert lib.normjit_launch_ex(None, ctypes.byref(args), None) == status
    assert b"invalid args.size 8" in lib.normjit_last_error()


def test_the_ctypes_launch_functions_pass_the_whole_struct():
    """Without the extension module: the ctypes launch functions fill their struct with the sized
    init, so that its size is ctypes' sizeof and the fields after the first published struct
    (backward's dresidual_out and bias) reach the library (the plain init's size dropped them)."""
    lib = _capi.library()
    seen = []

    class Recording:  # the library's init functions, a launch that keeps what it is given
        normjit_launch_args_init_sized = lib.normjit_launch_args_init_sized
        normjit_backward_args_init_sized = lib.normjit_backward_args_init_sized

        @staticmethod
        def normjit_launch_ex(kernel, args, stream):
            seen.append(_capi.LaunchArgs.from_buffer_copy(args._obj))
            return 0

        @staticmethod
        def normjit_launch_backward(kernel, args, stream):
            seen.append(_capi.BackwardArgs.from_buffer_copy(args._obj))
            return 0

    launch_ex = _capi._ctypes_launch_ex(Recording)
    assert launch_ex(1, 2, 3, None, None, 4, 1e-6, 5, 6, 7, None, None, None, None) == 0
    launch_backward = _capi._ctypes_launch_backward(Recording)
    assert launch_backward(1, 2, 3, None, 4, None, 5, None, None, 6, None, 7, 8) == 0
    forward, backward = seen
    assert forward.size == ctypes.sizeof(_capi.LaunchArgs)
    assert (forward.residual, forward.residual_out, forward.scale, forward.eps) == (5, 6, 7, 1e-6)
    assert backward.size == ctypes.sizeof(_capi.BackwardArgs)
    assert (backward.batch, backward.dresidual_out, backward.bias) == (6, 7, 8)


def test_every_prototype_resolves_in_the_library():
    lib = _capi.library()
    for name, (restype, argtypes) in _capi.PROTOTYPES.items():
        fn = getattr(lib, name)
        assert fn.restype is restype and fn.argtypes == argtypes, name
