"""GroupNorm -> SiLU pairs that a module's forward calls in code (diffusers' ResnetBlock2D, its
VAE's Encoder/Decoder), fused by rewriting that forward: normjit.torch.patch() gives the module
a subclass whose forward is the class's own, parsed from its source, with each fused pair
replaced by one call of the fused kernel. Plain Python (ast, dis, inspect), no PyTorch: the
caller gives the fused call, fused_call(norm_module, x), and tests run without PyTorch.

A pair is fused where the forward provably applies the SiLU to the GroupNorm's output and to
nothing else at that place, in one of three shapes (N a GroupNorm child that patch() computes,
A an nn.SiLU child, V a local name, E any expression):
  1. `V = self.N(E)` immediately followed by `V = self.A(V)` in one block;
  2. an `if` whose branches may end with `V = self.N(E)`, immediately followed by
     `V = self.A(V)`: the branches that end so call the fused kernel and set a flag, and the
     SiLU runs only where the flag is unset (diffusers' norm2, whose 'scale_shift' branch
     changes the norm's output before the SiLU: that branch keeps both);
  3. the expression `self.A(self.N(E))`.
Everything else in the forward stays as written, the SiLU module included where the forward
uses it elsewhere (diffusers applies its one `nonlinearity` to the time embedding too), and
nested functions, classes and lambdas keep their code (their `self` may be another). The
fused call computes F.silu(group_norm(x)) in one kernel where normjit serves the call, else the
GroupNorm's own forward then F.silu, exactly as before.

A forward decorated by a functools.wraps wrapper that holds the function in its closure
(diffusers' apply_lora_scale on UNet2DConditionModel.forward) keeps the wrapper's code around
the rewritten function. Not rewritten, and reported with the reason: a forward whose source
cannot be read or does not compile to the code that is loaded (an edited file), another
decorator or closure, zero-argument super(), GroupNorm or SiLU modules with hooks (the fused
call would bypass them), and a forward with no pair of these shapes.

A rewritten class, made at run time, is found by no import: its instances pickle (and copy) as
the arguments of fused_class, which pickle finds by import, so that loading rewrites the class's
forward again (reduce_through; where the forward can no longer be rewritten, its source edited
since the pickle was written, the instance gets its class's own forward, with a warning).
"""
import ast
import copy
import copyreg
import dis
import inspect
import types
import warnings
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple, Union

_FUSED_CALL = "_normjit_group_norm_silu"  # the closure variable the rewritten code calls
_FLAG = "_normjit_silu_done_"             # prefix of the flags of shape 2


def _self_call(node: ast.AST, self_name: str) -> Optional[Tuple[str, ast.expr]]:
    """(attribute, argument) of `self.<attribute>(<argument>)` with one positional argument and
    no keywords; else None."""
    if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and not isinstance(node.args[0], ast.Starred)
            and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == self_name):
        return node.func.attr, node.args[0]
    return None


class _Rewriter:
    """Finds and rewrites the fusable pairs of one forward's AST (the three shapes above)."""

    def __init__(self, self_name: str, norms: FrozenSet[str], silus: FrozenSet[str],
                 taken: set) -> None:
        self.self_name = self_name
        self.norms, self.silus = norms, silus
        self.taken = taken       # names used in the function: the flags avoid them
        self.fused: List[Tuple[str, str]] = []  # (norm, silu) per fused place

    def _fused_call(self, norm: str, arg: ast.expr, like: ast.AST) -> ast.Call:
        call = ast.Call(
            func=ast.Name(id=_FUSED_CALL, ctx=ast.Load()),
            args=[ast.Attribute(value=ast.Name(id=self.self_name, ctx=ast.Load()), attr=norm,
                                ctx=ast.Load()), arg],
            keywords=[])
        return ast.copy_location(call, like)

    def _norm_assign(self, stmt: ast.stmt) -> Optional[Tuple[str, str, ast.expr]]:
        """(V, N, E) of `V = self.N(E)`, N a fusable GroupNorm."""
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            call = _self_call(stmt.value, self.self_name)
            if call is not None and call[0] in self.norms:
                return stmt.targets[0].id, call[0], call[1]
        return None

    def _silu_assign(self, stmt: ast.stmt) -> Optional[Tuple[str, str]]:
        """(V, A) of `V = self.A(V)`, A a fusable SiLU."""
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            call = _self_call(stmt.value, self.self_name)
            if (call is not None and call[0] in self.silus and isinstance(call[1], ast.Name)
                    and call[1].id == stmt.targets[0].id):
                return stmt.targets[0].id, call[0]
        return None

    def _branch_ends(self, stmt: ast.If) -> List[List[ast.stmt]]:
        """The statement lists of an if/elif/else chain's branches (a final else included)."""
        branches = [stmt.body]
        rest = stmt.orelse
        while len(rest) == 1 and isinstance(rest[0], ast.If):
            branches.append(rest[0].body)
            rest = rest[0].orelse
        if rest:
            branches.append(rest)
        return branches

    def block(self, stmts: List[ast.stmt]) -> List[ast.stmt]:
        out: List[ast.stmt] = []
        i = 0
        while i < len(stmts):
            stmt = stmts[i]
            nxt = stmts[i + 1] if i + 1 < len(stmts) else None
            silu = self._silu_assign(nxt) if nxt is not None else None
            norm = self._norm_assign(stmt)
            if silu is not None and norm is not None and norm[0] == silu[0]:  # shape 1
                stmt.value = self._fused_call(norm[1], norm[2], stmt.value)
                self.fused.append((norm[1], silu[1]))
                out.append(self.expressions(stmt))
                i += 2
                continue
            if silu is not None and isinstance(stmt, ast.If):  # shape 2
                flag = self._flag()
                hits = []
                for branch in self._branch_ends(stmt):
                    last = self._norm_assign(branch[-1]) if branch else None
                    if last is not None and last[0] == silu[0]:
                        hits.append((branch, last))
                if hits:
                    for branch, (_, norm_name, arg) in hits:
                        end = branch[-1]
                        end.value = self._fused_call(norm_name, arg, end.value)
                        branch.append(ast.copy_location(
                            ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())],
                                       value=ast.Constant(value=True)), end))
                        self.fused.append((norm_name, silu[1]))
                    out.append(ast.copy_location(
                        ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())],
                                   value=ast.Constant(value=False)), stmt))
                    out.append(self.statement(stmt))
                    out.append(ast.copy_location(
                        ast.If(test=ast.UnaryOp(op=ast.Not(),
                                                operand=ast.Name(id=flag, ctx=ast.Load())),
                               body=[nxt], orelse=[]), nxt))
                    i += 2
                    continue
            out.append(self.statement(stmt))
            i += 1
        return out

    def _flag(self) -> str:
        k = 0
        while f"{_FLAG}{k}" in self.taken:
            k += 1
        name = f"{_FLAG}{k}"
        self.taken.add(name)
        return name

    def statement(self, stmt: ast.stmt) -> ast.stmt:
        """The statement with its nested blocks rewritten, and its expressions (shape 3). Nested
        functions and classes keep their code (their `self` may be another object)."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return stmt
        for field in ("body", "orelse", "finalbody"):
            block = getattr(stmt, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                setattr(stmt, field, self.block(block))
        for handler in getattr(stmt, "handlers", []) or []:
            handler.body = self.block(handler.body)
        return self.expressions(stmt)

    def expressions(self, stmt: ast.stmt) -> ast.stmt:
        rewriter = self

        class Calls(ast.NodeTransformer):
            def visit_Call(self, node: ast.Call) -> ast.AST:
                self.generic_visit(node)
                outer = _self_call(node, rewriter.self_name)
                if outer is not None and outer[0] in rewriter.silus:
                    inner = _self_call(outer[1], rewriter.self_name)
                    if inner is not None and inner[0] in rewriter.norms:
                        rewriter.fused.append((inner[0], outer[0]))
                        return rewriter._fused_call(inner[0], inner[1], node)
                return node

            # Nested functions and classes keep their own code (a nested `self` is another).
            def visit_FunctionDef(self, node):
                return node

            visit_AsyncFunctionDef = visit_FunctionDef
            visit_ClassDef = visit_FunctionDef
            visit_Lambda = visit_FunctionDef

        # Only the statement's own expressions: its nested blocks were rewritten by block().
        for field, value in ast.iter_fields(stmt):
            if field in ("body", "orelse", "finalbody", "handlers"):
                continue
            if isinstance(value, ast.AST):
                setattr(stmt, field, Calls().visit(value))
            elif isinstance(value, list):
                setattr(stmt, field, [Calls().visit(v) if isinstance(v, ast.AST) else v
                                      for v in value])
        return stmt


def _compile(fn_def: ast.FunctionDef, filename: str, globals_: dict,
             fused_call: Optional[Callable]) -> Callable:
    """fn_def compiled as a function of the original module's globals (the same dict: later
    changes to them are seen, nothing is added to them), fused_call in its closure."""
    factory = ast.FunctionDef(
        name="_normjit_factory",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=_FUSED_CALL)], vararg=None,
                           kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[fn_def, ast.Return(value=ast.Name(id=fn_def.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    if hasattr(ast, "TypeAlias"):  # Python 3.12: type_params
        factory.type_params = []
    tree = ast.fix_missing_locations(ast.Module(body=[ast.copy_location(factory, fn_def)],
                                                type_ignores=[]))
    module_code = compile(tree, filename, "exec")
    (factory_code,) = [c for c in module_code.co_consts if isinstance(c, types.CodeType)]
    make = types.FunctionType(factory_code, globals_, "_normjit_factory")
    return make(fused_call)


def _parse_forward(fn: Callable,
                   undecorated: bool = False) -> Union[Tuple[ast.FunctionDef, str], str]:
    """The forward's definition, parsed from its source at its own line numbers, and its file;
    or why it cannot be rewritten. undecorated: fn is the function a decorator wrapped (its
    __wrapped__), whose source names the decorators: they are left out."""
    if not isinstance(fn, types.FunctionType):
        return "its forward is not a Python function"
    if "__class__" in fn.__code__.co_freevars:
        return "its forward calls super()"  # (zero-argument super: a cell of its class)
    if fn.__code__.co_freevars:
        return ("its forward is a closure (uses " + ", ".join(fn.__code__.co_freevars) +
                " of an enclosing function)")
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError) as e:
        return f"its forward's source cannot be read ({type(e).__name__}: {e})"
    # A method's source is indented: parsed inside an `if` rather than dedented, which would
    # change the text of string literals continued over several lines.
    source = "".join(lines)
    indented = source[:1] in (" ", "\t")
    try:
        tree = ast.parse("if 1:\n" + source if indented else source)
    except SyntaxError as e:
        return f"its forward's source does not parse ({e})"
    body = tree.body[0].body if indented else tree.body
    if len(tree.body) != 1 or len(body) != 1 or not isinstance(body[0], ast.FunctionDef):
        return "its forward's source is not one function definition"
    fn_def = body[0]
    first -= indented  # (the line of the `if`)
    if fn_def.decorator_list:
        if not undecorated:
            return "its forward is decorated"
        fn_def.decorator_list = []
    ast.increment_lineno(fn_def, first - 1)
    for node in ast.walk(fn_def):
        if isinstance(node, ast.Name) and node.id == "super":
            return "its forward calls super()"
    return fn_def, filename


def _instructions(code: types.CodeType) -> list:
    """A code object's instructions as (operation, argument), jumps without their targets and a
    method load as an attribute load: compiled alone, a function lays the same code out with
    other offsets, and calls `module.f(...)` as a method (Python 3.11: LOAD_METHOD; 3.12 on:
    LOAD_ATTR without a PUSH_NULL) where the module's own compile, which sees `import module`,
    loads an attribute and pushes a NULL."""
    out = []
    for ins in dis.get_instructions(code):
        if ins.opname == "PUSH_NULL":
            continue
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            out.append((ins.opname, None))
        elif ins.opname == "LOAD_METHOD":
            out.append(("LOAD_ATTR", repr(ins.argval)))
        elif isinstance(ins.argval, types.CodeType):
            out.append((ins.opname, tuple(_instructions(ins.argval))))
        elif isinstance(ins.argval, str) and ".<locals>." in ins.argval:
            # A nested function's qualified name (a constant before Python 3.11): the compiled
            # alone one is nested in the rewriter's factory.
            out.append((ins.opname, ins.argval.rsplit(".<locals>.", 1)[1]))
        else:
            out.append((ins.opname, repr(ins.argval)))
    return out


def _same_code(a: types.CodeType, b: types.CodeType) -> bool:
    """Whether two code objects compute the same: the same instructions on the same names,
    constants and arguments (line numbers, file and jump offsets aside)."""
    return (a.co_names == b.co_names and a.co_varnames == b.co_varnames
            and a.co_argcount == b.co_argcount and a.co_kwonlyargcount == b.co_kwonlyargcount
            and _instructions(a) == _instructions(b))


def _rewritten_function(fn: types.FunctionType, norms: FrozenSet[str], silus: FrozenSet[str],
                        fused_call: Callable, undecorated: bool = False
                        ) -> Union[Tuple[types.FunctionType, List[Tuple[str, str]]], str]:
    """fn rewritten (the module's docstring), with its (norm, silu) pairs; or why not."""
    parsed = _parse_forward(fn, undecorated)
    if isinstance(parsed, str):
        return parsed
    fn_def, filename = parsed
    to_rewrite = copy.deepcopy(fn_def)
    # The source must be the code that runs: compiled as is, it gives the loaded code.
    try:
        as_read = _compile(fn_def, filename, fn.__globals__, None)
    except (SyntaxError, ValueError, TypeError) as e:
        return f"its forward's source does not compile ({type(e).__name__}: {e})"
    if not _same_code(as_read.__code__, fn.__code__):
        return "its forward's source is not the code that is loaded (an edited file?)"
    if not fn_def.args.args:
        return "its forward takes no self argument"
    fn_def = to_rewrite
    taken = {n.id for n in ast.walk(fn_def) if isinstance(n, ast.Name)}
    if _FUSED_CALL in taken:
        return f"its forward uses the name {_FUSED_CALL} (the rewritten code's fused call)"
    rewriter = _Rewriter(fn_def.args.args[0].arg, norms, silus, taken)
    fn_def.body = rewriter.block(fn_def.body)
    if not rewriter.fused:
        return ("its forward applies no SiLU child directly to a GroupNorm child's output (the "
                "shapes normjit fuses)")
    forward = _compile(fn_def, filename, fn.__globals__, fused_call)
    for name in ("__doc__", "__qualname__", "__module__", "__defaults__", "__kwdefaults__"):
        setattr(forward, name, getattr(fn, name))
    forward.__dict__.update(fn.__dict__)
    return forward, list(dict.fromkeys(rewriter.fused))


def _rewrapped(wrapper: types.FunctionType, norms: FrozenSet[str], silus: FrozenSet[str],
               fused_call: Callable
               ) -> Union[Tuple[types.FunctionType, List[Tuple[str, str]]], str, None]:
    """A decorated forward (functools.wraps: the function it wraps in __wrapped__, held in one
    cell of the wrapper's closure, as diffusers' apply_lora_scale does): the same wrapper code
    around the rewritten function; None where the wrapper is not of that form."""
    inner = getattr(wrapper, "__wrapped__", None)
    closure = wrapper.__closure__ or ()
    holders = [i for i, cell in enumerate(closure)
               if _cell_contents(cell) is inner]
    if not isinstance(inner, types.FunctionType) or len(holders) != 1:
        return None
    rewritten = _rewritten_function(inner, norms, silus, fused_call, undecorated=True)
    if isinstance(rewritten, str):
        return rewritten
    function, pairs = rewritten
    cells = list(closure)
    cells[holders[0]] = types.CellType(function)
    forward = types.FunctionType(wrapper.__code__, wrapper.__globals__, wrapper.__name__,
                                 wrapper.__defaults__, tuple(cells))
    for name in ("__doc__", "__qualname__", "__module__", "__kwdefaults__"):
        setattr(forward, name, getattr(wrapper, name))
    forward.__dict__.update(wrapper.__dict__)
    forward.__wrapped__ = function
    return forward, pairs


def _cell_contents(cell) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


_Result = Tuple[Optional[type], Union[List[Tuple[str, str]], str]]
_rewritten: Dict[Tuple[type, FrozenSet[str], FrozenSet[str], Callable], _Result] = {}


def fused_class(cls: type, norms: FrozenSet[str], silus: FrozenSet[str],
                fused_call: Callable) -> _Result:
    """A subclass of cls whose forward calls fused_call(self.<norm>, x) at each place where it
    applies one of `silus` (attribute names of nn.SiLU children) to the output of one of
    `norms` (GroupNorm children) of x, and those places as (norm, silu) pairs; or (None, why
    not). A forward decorated with a functools.wraps wrapper keeps the wrapper, around the
    rewritten function. Cached per (cls, norms, silus, fused_call)."""
    key = (cls, norms, silus, fused_call)
    if key not in _rewritten:
        fn = cls.forward
        rewritten = _rewritten_function(fn, norms, silus, fused_call)
        if isinstance(rewritten, str) and isinstance(fn, types.FunctionType):
            rewrapped = _rewrapped(fn, norms, silus, fused_call)
            if rewrapped is not None:
                rewritten = rewrapped
        if isinstance(rewritten, str):
            _rewritten[key] = (None, rewritten)
        else:
            forward, pairs = rewritten
            text = ", ".join(f"{n} + {a}" for n, a in pairs)
            _rewritten[key] = (type("Normjit" + cls.__name__, (cls,), {
                "forward": forward,
                "_normjit_original_class": cls,
                "_normjit_fused_pairs": tuple(pairs),
                "_normjit_rewritten_from": key,
                "__reduce_ex__": _reduce_fused,
                "__module__": __name__,
                "__doc__": (f"{cls.__module__}.{cls.__qualname__} with its GroupNorm -> SiLU "
                            f"pairs ({text}) fused by normjit.torch.patch."),
            }), pairs)
    return _rewritten[key]


def _reduce_fused(self, protocol: int) -> tuple:
    """An instance of a fused_class class pickled (and copied) as that class's key: the class it
    was made of, found by import, the children's names and the fused call (a function found by
    import); loading makes the class again through fused_class (_fused_class_again)."""
    key = type(self)._normjit_rewritten_from
    return reduce_through(self, key[0], _fused_class_again, key)


def _fused_class_again(cls: type, norms: FrozenSet[str], silus: FrozenSet[str],
                       fused_call: Callable) -> type:
    """fused_class's class, for an instance being loaded; cls itself, with a warning that says
    why, where its forward cannot be rewritten here (its source edited since the pickle was
    written, or not readable): the instance then runs its class's own forward, its pairs not
    fused, the function it computed before patch()."""
    patched, why = fused_class(cls, norms, silus, fused_call)
    if patched is None:
        warnings.warn(f"normjit: a {_qualified(cls)} loaded without its GroupNorm -> SiLU pairs "
                      f"fused: {why}; it runs its class's own forward", stacklevel=3)
        return cls
    return patched


def reduce_through(obj: object, original: type, make: Callable[..., type],
                   make_args: tuple) -> tuple:
    """The pickle reduction (the value of __reduce_ex__) of obj, an instance of the class that
    make(*make_args), a cached factory, made at run time from `original`: what
    object.__reduce_ex__ gives (obj's state, the arguments of its __new__), the class replaced
    by make and its arguments, which pickle finds by import (`original` by its qualified name).
    Loading calls make(*make_args) again (the same class in the process that made it), then
    sets the state as usual; copy.deepcopy goes the same way. A class that pickles its
    instances its own way (__reduce__, __reduce_ex__, keywords to __new__) is refused with a
    TypeError that says what to do: its reduction would name the class made at run time."""
    own = [name for name in ("__reduce_ex__", "__reduce__", "__getnewargs_ex__")
           if getattr(original, name, None) is not getattr(object, name, None)]
    if own:
        raise TypeError(
            f"cannot pickle a {_qualified(original)} patched by normjit.torch.patch: its class "
            f"pickles its instances its own way ({', '.join(own)}), which normjit cannot redo "
            "for the class patch() made; call normjit.torch.unpatch(model) before saving the "
            "model (and normjit.torch.patch(model) after loading it)")
    new, args, *rest = object.__reduce_ex__(obj, 2)  # (copyreg.__newobj__, (class, *args), ...)
    assert new is copyreg.__newobj__ and args[0] is type(obj), new
    return (_made_instance, (make, make_args, args[1:]), *rest)


def _made_instance(make: Callable[..., type], make_args: tuple, new_args: tuple) -> object:
    """An instance of make(*make_args), its state not yet set: what loading a reduce_through
    reduction does first (copyreg.__newobj__, the class made again)."""
    cls = make(*make_args)
    return cls.__new__(cls, *new_args)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
