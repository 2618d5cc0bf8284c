"""normjit's kernel templates for the host (tests/emulation): copies templates/normjit/*.cuh
from SOURCE to DEST with every inline PTX statement made host code: loads and stores through
volatile pointers (acquire and release with a full fence), atomics through GCC's builtins, a
named barrier through host_cuda.hpp's, conversions through _Float16, prefetches and cache
policies dropped, cp.async a copy; __align__ becomes alignas and `extern __shared__` the CTA's
buffer. The templates compile with __CUDA_ARCH__ 900 (the paths of the device planned for). A PTX
statement it does not know becomes __builtin_trap(): an emulated kernel that reaches one fails
loudly (the ones left are in forward kernels and arch-specific paths this host build leaves out).

    python3 host_templates.py SOURCE DEST
"""
import pathlib
import re
import sys

SRC, DST = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
DST.mkdir(parents=True, exist_ok=True)
TYPES = {"u32": "unsigned int", "b32": "unsigned int", "f32": "float", "u64": "unsigned long long",
         "b64": "unsigned long long", "u16": "unsigned short", "b16": "unsigned short"}


def split_top(s, sep):
    """s split at each sep outside quotes and brackets."""
    out, depth, cur, quote = [], 0, "", False
    for ch in s:
        if ch == '"':
            quote = not quote
        if not quote:
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == sep and depth == 0:
                out.append(cur)
                cur = ""
                continue
        cur += ch
    out.append(cur)
    return out


def operands(part):
    """The expressions of an asm operand list: "constraint"(expression), ..."""
    items = [i.strip() for i in split_top(part, ",") if i.strip()]
    out = []
    for it in items:
        m = re.match(r'"([^"]*)"\s*\((.*)\)$', it, re.S)
        assert m, it
        out.append(m.group(2).strip())
    return out


def host(asm_args):
    """Host code for one asm statement's arguments (template : outputs : inputs : clobbers)."""
    parts = split_top(asm_args, ":")
    template = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', parts[0]))
    outs = operands(parts[1]) if len(parts) > 1 else []
    ins = operands(parts[2]) if len(parts) > 2 else []
    op = template.split()[0] if template.split() else ""
    ops = outs + ins  # %0.. numbering
    suffix = op.split(".")[-1]
    if op.startswith("ld."):
        ty = TYPES[suffix]
        addr = f"emu::shared_pointer({ins[0]})" if ".shared" in op else ins[0]
        fence = " __atomic_thread_fence(__ATOMIC_SEQ_CST);" if ".acquire" in op else ""
        body = " ".join(f"{o} = ((const volatile {ty}*)({addr}))[{i}];" for i, o in enumerate(outs))
        return "{" + body + fence + "}"
    if op.startswith("st."):
        ty = TYPES[suffix]
        refs = [int(x) for x in re.findall(r"%(\d+)", template)]
        addr = ops[refs[0]]
        if ".shared" in op:  # a 32-bit shared-memory address
            addr = f"emu::shared_pointer({addr})"
        vals = [ops[r] for r in refs[1:]]
        if "cache_hint" in op:
            vals = vals[:-1]
        fence = "__atomic_thread_fence(__ATOMIC_SEQ_CST); " if ".release" in op else ""
        return "{" + fence + " ".join(f"((volatile {ty}*)({addr}))[{i}] = {v};"
                                      for i, v in enumerate(vals)) + "}"
    if op.startswith("red.") or op.startswith("atom."):
        ty = TYPES[suffix]
        refs = [int(x) for x in re.findall(r"%(\d+)", template)]
        if op.startswith("red."):
            addr = ops[refs[0]]
            val = ops[refs[1]] if len(refs) > 1 else re.search(r"\],\s*(\w+)", template).group(1)
            return f"{{ __atomic_fetch_add(({ty}*)({addr}), ({ty})({val}), __ATOMIC_SEQ_CST); }}"
        out, addr, val = ops[refs[0]], ops[refs[1]], ops[refs[2]]
        return (f"{{ {out} = __atomic_fetch_add(({ty}*)({addr}), ({ty})({val}), "
                "__ATOMIC_SEQ_CST); }")
    if not template.strip():  # asm volatile("" : "+r"(v)): a compiler barrier on v
        return "{}"
    if "createpolicy" in template:  # a cache policy (alone, or chosen by a predicate)
        return f"{{ {outs[0]} = 0; }}"
    if "cp.async.bulk.prefetch" in template and "mov.b64" in template:  # prefetch_l2_then
        return f"{{ {outs[0]} = (unsigned long long)({ins[0]}); }}"
    if op.startswith(("cp.async.ca.", "cp.async.cg.")):  # [dst], [src], bytes
        refs = [int(x) for x in re.findall(r"%(\d+)", template)]
        size = ops[refs[2]] if len(refs) > 2 else re.search(r"\],\s*(\d+)", template).group(1)
        dst, src = ops[refs[0]], ops[refs[1]]
        return f"{{ std::memcpy(emu::shared_pointer({dst}), (const void*)({src}), {size}); }}"
    if op.startswith("cp.async"):  # commit and wait: the copies above are done already
        return "{}"
    if op == "cvt.rn.bf16.f32":
        return f"{{ {outs[0]} = emu::bf16_bits({ins[0]}); }}"
    if op == "cvt.rn.bf16x2.f32":  # %0 = hi:lo of (%1, %2)
        return f"{{ {outs[0]} = emu::bf16_bits({ins[1]}) | emu::bf16_bits({ins[0]}) << 16; }}"
    if op == "cvt.rn.f16x2.f32":
        return f"{{ {outs[0]} = emu::f16_bits({ins[1]}) | emu::f16_bits({ins[0]}) << 16; }}"
    if op in ("cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.satfinite.e5m2x2.f32"):  # %0 = %1:%2
        f = "emu::e4m3_bits" if "e4m3" in op else "emu::e5m2_bits"
        return f"{{ {outs[0]} = (unsigned short)({f}({ins[1]}) | {f}({ins[0]}) << 8); }}"
    if op == "ex2.approx.ftz.f32":
        return f"{{ {outs[0]} = std::exp2({ins[0]}); }}"
    if op == "rcp.approx.ftz.f32":
        return f"{{ {outs[0]} = 1.0f / ({ins[0]}); }}"
    if op == "bar.sync":
        return f"{{ emu::named_barrier({ops[0]}, {ops[1]}); }}"
    if op == "cvt.f32.f16":
        return (f"{{ unsigned short h_ = {ins[0]}; _Float16 f_; std::memcpy(&f_, &h_, 2); "
                f"{outs[0]} = float(f_); }}")
    if op == "cvt.rn.f16.f32":
        return f"{{ _Float16 f_ = (_Float16)({ins[0]}); std::memcpy(&{outs[0]}, &f_, 2); }}"
    if op.startswith(("prefetch", "cp.async.bulk.prefetch", "fence")):
        return "{}"
    if op.startswith("createpolicy"):
        return f"{{ {outs[0]} = 0; }}"
    return "{ __builtin_trap(); }"  # not emulated: a kernel that reaches it fails loudly


# asm( and asm volatile( ... ); statements.
ASM = re.compile(r"\basm\s*(?:volatile\s*)?\(")
for f in SRC.glob("*.cuh"):
    text = f.read_text()
    out, pos = "", 0
    while True:
        m = ASM.search(text, pos)
        if not m:
            out += text[pos:]
            break
        out += text[pos:m.start()]
        i, depth = m.end(), 1
        while depth:
            ch = text[i]
            if ch == '"':
                i = text.index('"', i + 1)
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            i += 1
        args = text[m.end():i - 1]
        j = i
        while text[j] in " \n":
            j += 1
        assert text[j] == ";", text[m.start():j + 1]
        out += host(args)
        pos = j + 1
    out = re.sub(r"__align__\((\d+)\)", r"alignas(\1)", out)
    out = re.sub(r"__shared__ alignas\((\d+)\)", r"alignas(\1) __shared__", out)
    out = re.sub(r"extern alignas\((\d+)\) __shared__ (\w[\w ]*?) (\w+)\[\];",
                 r"\2* const \3 = reinterpret_cast<\2*>(emu_dynamic_smem);", out)
    (DST / f.name).write_text(out)
