"""patch(model): the norm layers of a model written by others, computed by normjit.

Each layer that computes a function normjit has is patched in place by swapping its class for
a subclass whose forward calls normjit: the module object, its parameters, buffers, hooks,
attribute names and state_dict keys stay as they were, and isinstance() still holds. When a
call cannot be served (see normjit.torch), the layer's own forward runs, so a patched model
never computes anything its original would not. unpatch(model) restores the classes.

Recognised layers:
  * torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.RMSNorm and subclasses that keep their
    forward;
  * Hugging Face transformers' *RMSNorm classes whose forward is LlamaRMSNorm's (weight *
    normalized x; a weight whose dtype promotes x's, such as a float32 weight with a bfloat16 x,
    runs the layer's own forward, whose result has the promoted dtype), and those whose forward
    and _norm are GemmaRMSNorm's (GemmaRMSNorm, Gemma2RMSNorm, Gemma3RMSNorm: float32 math times
    (1 + weight), rounded once), computed by rms_norm with weight_offset=1;
  * timm's LayerNorm, GroupNorm, GroupNorm1, RmsNorm (trailing dims) and RmsNorm2d (channels);
  * LayerNorm over the channels of [N, C, *spatial], computed by layer_norm_channels: timm's
    LayerNorm2d and LayerNormExp2d, and any layer of class name LayerNorm2d with a float eps and
    weight and bias of shape [C] (or both None): torchvision's ConvNeXt, SAM, detectron2 and
    the copies of ConvNeXt's layer in other projects, whose forward is permute + layer_norm +
    permute (or the same function written with mean and var over dim 1). Recognised by class
    name (the report names each), since their forwards are spelled many ways; a LayerNorm2d
    that is an nn.GroupNorm (one group: C and the positions normalized together) is a GroupNorm.
  * the original Stable Diffusion's (ldm's) GroupNorm32 (GroupNorm of x.float(), cast back to
    x's dtype: normjit's GroupNorm, which rounds once).
Other layers whose class name has "Norm" in it are reported as skipped, with the reason.

GroupNorm -> SiLU: in an nn.Sequential, a GroupNorm layer immediately followed by an nn.SiLU
(ldm's ResBlock in_layers/out_layers, VAE blocks written as Sequentials) is fused: the
GroupNorm computes F.silu of its output in the same kernel (activation='silu') and the SiLU's
place in the Sequential holds an nn.Identity (unpatch() puts the SiLU back). Not fused, and
reported as skipped with the reason: a GroupNorm or SiLU module that appears at more than one
place in the model, or that has hooks.

GroupNorm -> SiLU in code: a module that holds GroupNorm and nn.SiLU children and applies the
SiLU to a GroupNorm's output in its forward (diffusers' ResnetBlock2D: `nonlinearity` after
norm1 and norm2, and to the time embedding; its VAE's and UNet's conv_norm_out + conv_act) gets
a subclass whose forward is its class's own, parsed from the source, with each such pair one
call of the fused kernel and everything else as written (normjit._fuse_code says which shapes,
and when a forward is not rewritten: unreadable or edited source, decorators other than a
functools.wraps wrapper, closures, super(), hooked children; reported with the reason, the
GroupNorms then patched alone).
unpatch() gives the module its class back.

Saving: a patched model pickles (torch.save, pickle, copy.deepcopy) with its patched classes
named by what makes them (the layer's own class, by its qualified name, and patch()'s factory
and arguments), so that loading it, with normjit importable, makes the same classes again: the
same layers, fused places and state_dict, and unpatch() works on the copy. A fused forward is
rewritten again from its class's source where the model is loaded.
"""
import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch

from ._ops import (_fallback_warn, _group_norm, _layer_norm, _layer_norm_channels, _param,
                   _rms_norm, _rms_norm_channels, _variant)
from .._fuse_code import fused_class, reduce_through

__all__ = ["patch", "unpatch", "PatchReport"]


@dataclass
class PatchReport:
    """What patch() did: (module name, class) replaced; (module name, class, reason) skipped."""
    replaced: List[Tuple[str, str]] = field(default_factory=list)
    skipped: List[Tuple[str, str, str]] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"normjit.torch.patch: {len(self.replaced)} replaced, "
                 f"{len(self.skipped)} skipped"]
        lines += [f"  replaced {name or '(root)'}: {cls}" for name, cls in self.replaced]
        lines += [f"  skipped {name or '(root)'}: {cls}: {why}" for name, cls, why in self.skipped]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The forwards of patched layers. `orig` is the layer class's own forward: the fallback,
# called as orig(self, input) (no closure per call).
# ---------------------------------------------------------------------------------------

def _layer_norm_forward(orig: Callable) -> Callable:
    def forward(self, input):
        return _layer_norm(input, self.normalized_shape, _param(self, "weight"),
                           _param(self, "bias"), self.eps, orig, self)
    return forward


def _group_norm_forward(orig: Callable, activation: Optional[str] = None) -> Callable:
    """activation 'silu': a GroupNorm fused with the SiLU that followed it (its fallback is its
    own forward, then F.silu), in training too (the backward kernel takes the gradient through
    the SiLU's derivative)."""
    def forward(self, input):
        return _group_norm(input, self.num_groups, _param(self, "weight"), _param(self, "bias"),
                           self.eps, orig, self, activation)
    return forward


def _rms_norm_forward(orig: Callable) -> Callable:
    def forward(self, input):
        return _rms_norm(input, self.normalized_shape, _param(self, "weight"), self.eps, orig,
                         self)
    return forward


def _rms_norm_channels_forward(orig: Callable) -> Callable:
    def forward(self, input):
        return _rms_norm_channels(input, _param(self, "weight"), self.eps, orig, self)
    return forward


def _layer_norm_channels_forward(orig: Callable) -> Callable:
    def forward(self, x):
        return _layer_norm_channels(x, _param(self, "weight"), _param(self, "bias"), self.eps,
                                    orig, self)
    return forward


def _hf_rms_norm_forward(orig: Callable) -> Callable:
    """LlamaRMSNorm: weight * (x_f32 * rsqrt(mean(x_f32^2, -1) + eps)).to(x.dtype), of the dtype
    weight and x promote to; normjit rounds once instead of twice (same function, at most one
    rounding apart) where that is x's dtype. A weight that promotes it (a float32 weight with a
    bfloat16 x: a float32 result, the product of the normalized x rounded to bfloat16) runs the
    layer's own forward, with the fallback warning: normjit's rms_norm returns x's dtype."""
    def forward(self, hidden_states):
        eps = getattr(self, "variance_epsilon", None)
        if eps is None:
            eps = self.eps
        weight = _param(self, "weight")
        dtype = hidden_states.dtype
        if weight.dtype != dtype and torch.promote_types(weight.dtype, dtype) != dtype:
            _fallback_warn("rms_norm", (
                f"weight dtype {weight.dtype} with input dtype {dtype} "
                f"({type(self)._normjit_original_class.__name__} returns weight * "
                f"normalized.to({dtype}), of dtype "
                f"{torch.promote_types(weight.dtype, dtype)}; normjit returns the input's)"),
                hidden_states, weight, None, eps)
            return orig(self, hidden_states)
        return _rms_norm(hidden_states, weight.shape, weight, eps, orig, self)
    return forward


def _gemma_rms_norm_forward(orig: Callable) -> Callable:
    """GemmaRMSNorm: (x_f32 * rsqrt(mean(x_f32^2, -1) + eps) * (1 + weight_f32)).type_as(x),
    which is normjit's rms_norm with weight_offset=1 (the same single rounding)."""
    def forward(self, x):
        weight = _param(self, "weight")
        return _variant("rms_norm", x, None, weight.shape, weight, None, self.eps, 1.0, None,
                        None, False, False, orig, self)
    return forward


# ---------------------------------------------------------------------------------------
# Which layers
# ---------------------------------------------------------------------------------------

def _body(fn: Callable) -> str:
    """The AST of a function's body, docstring and formatting left out (compares code)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return "\n".join(ast.dump(node) for node in body)


_llama_body: Optional[str] = None


def _is_llama_rms_norm(cls: type) -> Union[bool, str]:
    global _llama_body
    try:
        if _llama_body is None:
            from transformers.models.llama.modeling_llama import LlamaRMSNorm
            _llama_body = _body(LlamaRMSNorm.forward)
        return _body(cls.forward) == _llama_body
    except (ImportError, OSError, TypeError, SyntaxError) as e:
        return f"cannot compare its forward with LlamaRMSNorm's ({type(e).__name__}: {e})"


_gemma_bodies: Optional[Tuple[str, str]] = None


def _is_gemma_rms_norm(cls: type) -> Union[bool, str]:
    """Whether cls's forward and _norm are GemmaRMSNorm's (Gemma2's and Gemma3's are copies)."""
    global _gemma_bodies
    try:
        if _gemma_bodies is None:
            from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
            _gemma_bodies = (_body(GemmaRMSNorm.forward), _body(GemmaRMSNorm._norm))
        norm = getattr(cls, "_norm", None)
        return (norm is not None and _body(cls.forward) == _gemma_bodies[0]
                and _body(norm) == _gemma_bodies[1])
    except (ImportError, OSError, TypeError, SyntaxError, AttributeError) as e:
        return f"cannot compare its forward with GemmaRMSNorm's ({type(e).__name__}: {e})"


class _LdmGroupNorm32(torch.nn.GroupNorm):
    """ldm's GroupNorm32 (ldm/modules/diffusionmodules/util.py), whose forward a layer's is
    compared with."""

    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


_ldm_group_norm_body: Optional[str] = None


def _is_ldm_group_norm32(cls: type) -> bool:
    global _ldm_group_norm_body
    try:
        if _ldm_group_norm_body is None:
            _ldm_group_norm_body = _body(_LdmGroupNorm32.forward)
        return _body(cls.forward) == _ldm_group_norm_body
    except (OSError, TypeError, SyntaxError):
        return False


_TIMM = {
    "LayerNorm": _layer_norm_forward,
    "GroupNorm": _group_norm_forward,
    "GroupNorm1": _group_norm_forward,
    "RmsNorm": _rms_norm_forward,
    "RmsNorm2d": _rms_norm_channels_forward,
    "LayerNorm2d": _layer_norm_channels_forward,
    "LayerNormExp2d": _layer_norm_channels_forward,
}


def _layer_norm_2d(module: torch.nn.Module) -> Union[bool, str]:
    """Whether a layer of class name LayerNorm2d has what layer_norm_channels reads: a float eps
    and weight and bias, both tensors of one shape [C] or both None; else why not."""
    eps = getattr(module, "eps", None)
    if not isinstance(eps, float):
        return f"its eps is {eps!r}, not a float"
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    if weight is None and bias is None:
        return True
    if not (isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
            and weight.dim() == 1 and bias.shape == weight.shape):
        return ("its weight and bias are not two tensors of one shape [C] (nor both None): "
                f"weight {_shape_text(weight)}, bias {_shape_text(bias)}")
    return True


def _shape_text(t) -> str:
    return f"of shape {list(t.shape)}" if isinstance(t, torch.Tensor) else repr(t)


def _choose(module: torch.nn.Module) -> Union[Callable[[Callable], Callable], str]:
    """The forward factory that serves module, or why none does."""
    cls = type(module)
    where = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__.startswith("timm."):
        if cls.__name__ in _TIMM:
            return _TIMM[cls.__name__]
    if cls.__name__ == "LayerNorm2d" and not isinstance(module, torch.nn.GroupNorm):
        # (A LayerNorm2d built on nn.GroupNorm with one group normalizes over C and the positions
        # together, not over C at each position: it is a GroupNorm, below.)
        fits = _layer_norm_2d(module)
        return _layer_norm_channels_forward if fits is True else f"{where}: {fits}"
    if (isinstance(module, torch.nn.GroupNorm) and cls.__name__ == "GroupNorm32"
            and _is_ldm_group_norm32(cls)):
        return _group_norm_forward
    for base, factory in ((torch.nn.LayerNorm, _layer_norm_forward),
                          (torch.nn.GroupNorm, _group_norm_forward),
                          (torch.nn.RMSNorm, _rms_norm_forward)):
        if isinstance(module, base):
            if cls.forward is base.forward:
                return factory
            return (f"{where} overrides {base.__name__}.forward, so normjit cannot tell that it "
                    "computes the same function")
    if cls.__module__.startswith("transformers.") and cls.__name__.endswith("RMSNorm"):
        same = _is_llama_rms_norm(cls)
        factory = _hf_rms_norm_forward
        if same is False:
            same = _is_gemma_rms_norm(cls)
            factory = _gemma_rms_norm_forward
        if same is True:
            weight = getattr(module, "weight", None)
            if not isinstance(weight, torch.Tensor):
                return "has no weight tensor"
            if factory is _gemma_rms_norm_forward and (
                    weight.dim() != 1 or not isinstance(getattr(module, "eps", None), float)):
                return "its weight is not one-dimensional, or it has no float eps"
            return factory
        if same is False:
            return ("its forward is neither LlamaRMSNorm's nor GemmaRMSNorm's (an offset, cast "
                    "or scale normjit does not do)")
        return same
    if "Norm" in cls.__name__:
        return f"{where} is not one of the layers normjit computes"
    return ""


_patched_classes: Dict[Tuple[type, Optional[str]], type] = {}


def _patched_class(cls: type, factory: Callable[..., Callable],
                   activation: Optional[str] = None) -> type:
    """The subclass of cls whose forward is factory's (with the activation fused), made once per
    (cls, activation); what loading a pickled patched layer calls again (_reduce_patched)."""
    patched = _patched_classes.get((cls, activation))
    if patched is None:
        fused = f" and the SiLU that followed it (activation={activation!r})" if activation else ""
        patched = type("Normjit" + cls.__name__ + ("SiLU" if activation else ""), (cls,), {
            "forward": factory(cls.forward, activation) if activation else factory(cls.forward),
            "_normjit_original_class": cls,
            "_normjit_factory": staticmethod(factory),
            "_normjit_activation": activation,
            "__reduce_ex__": _reduce_patched,
            "__module__": __name__,
            "__doc__": f"{cls.__module__}.{cls.__qualname__}{fused}, computed by normjit "
                       "(normjit.torch.patch); its own forward when normjit cannot serve a call.",
        })
        _patched_classes[(cls, activation)] = patched
    return patched


def _reduce_patched(self, protocol: int) -> tuple:
    """A patched layer pickled (torch.save, copy.deepcopy) as the arguments of _patched_class,
    which pickle finds by import (the layer's own class by its qualified name), and its state
    (parameters, buffers, attributes: those of the layer): loading makes its class again through
    _patched_class, the same class in the process that patched it."""
    cls = type(self)
    return reduce_through(self, cls._normjit_original_class, _patched_class,
                          (cls._normjit_original_class, cls._normjit_factory,
                           cls._normjit_activation))


class _FusedAway(torch.nn.Identity):
    """The place of an nn.SiLU that patch() fused into the GroupNorm before it; keeps the SiLU
    (not as a submodule) for unpatch()."""

    def __init__(self, original: torch.nn.Module, into: str) -> None:
        super().__init__()
        self.__dict__["_normjit_original_module"] = original
        self.__dict__["_normjit_fused_into"] = into

    def extra_repr(self) -> str:
        return f"fused into {self._normjit_fused_into or '(root)'} by normjit.torch.patch"


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _fuse_group_norm_silu(model: torch.nn.Module, report: PatchReport) -> set:
    """Fuses each nn.Sequential's GroupNorm -> nn.SiLU pair that may be fused (see the module's
    docstring), reporting it, and reports the pairs and modules that are not fused. Returns
    the ids of the GroupNorm layers it patched."""
    places: Dict[int, List[str]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        places.setdefault(id(module), []).append(name)
    fused = set()
    for seq_name, seq in list(model.named_modules()):
        children = list(seq._modules.items())
        if not isinstance(seq, torch.nn.Sequential):
            # GroupNorms and a SiLU held as attributes, called in code: the forward rewritten
            # where it provably applies the SiLU to a GroupNorm's output (_fuse_code).
            norms = [n for n, m in children if "GroupNorm" in type(m).__name__
                     and _choose(m) is _group_norm_forward]
            silus = [n for n, m in children if type(m) is torch.nn.SiLU]
            if norms and silus:
                _fuse_in_code(seq_name, seq, norms, silus, report, fused)
            continue
        prefix = seq_name + "." if seq_name else ""
        for (norm_key, norm), (silu_key, silu) in zip(children, children[1:]):
            if (type(silu) is not torch.nn.SiLU or "GroupNorm" not in type(norm).__name__
                    or _choose(norm) is not _group_norm_forward):
                continue  # (a GroupNorm patched before has another class: left as it is)
            why = ""
            for what, m in (("GroupNorm", norm), ("SiLU", silu)):
                others = [p or "(root)" for p in places[id(m)]]
                if len(others) > 1:
                    why = (f"the {what} module is shared: it is at {', '.join(others)}, so "
                           "fusing would change what the other places compute")
                    break
                if m._forward_hooks or m._forward_pre_hooks:
                    why = f"the {what} has forward hooks, which would see another output"
                    break
            if why:
                report.skipped.append((prefix + silu_key, _name(type(silu)),
                                       f"not fused with the GroupNorm {prefix + norm_key}: {why}"))
                continue
            norm.__class__ = _patched_class(type(norm), _group_norm_forward, "silu")
            seq._modules[silu_key] = _FusedAway(silu, prefix + norm_key)
            fused.add(id(norm))
            report.replaced.append((prefix + norm_key, (
                f"{_name(type(norm)._normjit_original_class)} + {_name(type(silu))} at "
                f"{prefix + silu_key} (fused: activation='silu'; the SiLU's place holds an "
                "nn.Identity)")))
    return fused


def _group_norm_silu(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """F.silu(norm(x)) in one kernel where normjit serves the call (in training too: the
    backward kernel takes the gradient through the SiLU's derivative); else norm's own
    (original class's) forward, then F.silu: the fused call of a rewritten forward
    (_fuse_in_code)."""
    cls = type(norm)
    own = cls.__dict__.get("_normjit_original_class", cls)
    weight, bias = _param(norm, "weight"), _param(norm, "bias")
    return _group_norm(x, norm.num_groups, weight, bias, norm.eps, own.forward, norm, "silu")


def _hooked(module: torch.nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _fuse_in_code(name: str, module: torch.nn.Module, norms: List[str], silus: List[str],
                  report: PatchReport, fused: set) -> None:
    """Gives `module` a forward that calls the fused kernel where its own applies one of
    `silus` to the output of one of `norms` (_fuse_code), reporting what it fused or why not.
    GroupNorm or SiLU children with hooks are left out (the fused call would bypass them)."""
    cls = type(module)
    what = f"GroupNorm {', '.join(norms)} not fused with the SiLU {', '.join(silus)}"
    if "_normjit_original_class" in cls.__dict__:
        report.skipped.append((name, cls._normjit_original_class.__name__, "already patched"))
        fused.add(id(module))
        return
    hooked = [n for n in norms + silus if _hooked(getattr(module, n))]
    norms = [n for n in norms if n not in hooked]
    silus = [n for n in silus if n not in hooked]
    if not norms or not silus:
        report.skipped.append((name, _name(cls), (
            f"{what}: {', '.join(hooked)} {'has' if len(hooked) == 1 else 'have'} forward "
            "hooks, which a fused call would bypass (the GroupNorms are patched alone)")))
        return
    patched, result = fused_class(cls, frozenset(norms), frozenset(silus), _group_norm_silu)
    if patched is None:
        report.skipped.append((name, _name(cls), (
            f"{what}: {result}; normjit fuses a GroupNorm -> SiLU pair in a forward's code only "
            "where it can rewrite that forward (the GroupNorms are patched alone)")))
        return
    module.__class__ = patched
    fused.add(id(module))
    pairs = ", ".join(f"{n} -> {a}" for n, a in result)
    left = [n for n in norms if n not in {p for p, _ in result}]
    report.replaced.append((name, (
        f"{_name(cls)}: GroupNorm -> SiLU fused in its forward ({pairs}; activation='silu', "
        "each pair one kernel; the forward is the class's own, rewritten at those places)" +
        (f"; {', '.join(left)} not followed by a SiLU there" if left else "") +
        (f"; not fused: {', '.join(hooked)} (forward hooks)" if hooked else ""))))


def _check_model(function: str, model) -> None:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"normjit.torch.{function}: model must be a torch.nn.Module, not "
                        f"{type(model).__name__} ({model!r:.80})")


def patch(model: torch.nn.Module) -> PatchReport:
    """Makes the norm layers of `model` (and model itself, if it is one) compute with normjit,
    in place; returns what was replaced and what was skipped, and why. Idempotent: a layer
    patched before is reported as skipped ("already patched"). The patched model can be saved
    whole (torch.save, pickle): loading it needs normjit importable, and gives the patched
    layers back (a forward fused in code is rewritten again there; where its class's source no
    longer allows it, the layer runs its own forward, with a warning)."""
    _check_model("patch", model)
    report = PatchReport()
    fused = _fuse_group_norm_silu(model, report)
    for name, module in model.named_modules():
        cls = type(module)
        if id(module) in fused:
            continue
        if "_normjit_original_class" in cls.__dict__:
            report.skipped.append((name, cls._normjit_original_class.__name__, "already patched"))
            continue
        if cls.__module__ == "normjit.torch.modules":  # njt.LayerNorm, ...: nothing to patch
            report.skipped.append((name, f"normjit.torch.{cls.__qualname__}",
                                   "already a normjit module"))
            continue
        choice = _choose(module)
        if callable(choice):
            module.__class__ = _patched_class(cls, choice)
            report.replaced.append((name, f"{cls.__module__}.{cls.__qualname__}"))
        elif choice:
            report.skipped.append((name, f"{cls.__module__}.{cls.__qualname__}", choice))
    return report


def unpatch(model: torch.nn.Module) -> int:
    """Undoes patch(model): every patched layer gets its class back, and every SiLU fused into
    a GroupNorm its place. Returns how many layers got their class back."""
    _check_model("unpatch", model)
    count = 0
    for module in list(model.modules()):
        for key, child in list(module._modules.items()):
            if isinstance(child, _FusedAway):
                module._modules[key] = child._normjit_original_module
    for module in model.modules():
        original = type(module).__dict__.get("_normjit_original_class")
        if original is not None:
            module.__class__ = original
            count += 1
    return count
