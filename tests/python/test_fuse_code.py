"""normjit._fuse_code, the forward rewriting behind normjit.torch.patch()'s GroupNorm -> SiLU
fusion in code, on plain Python stand-ins (tests/python/fuse_code_sample.py): no PyTorch, so it
runs in CI. Each fused place calls the given fused call with the norm module; every other line
computes what it did; a forward that cannot be rewritten safely is refused with the reason."""
import importlib
import linecache
import textwrap
import traceback

import fuse_code_sample as sample  # (tests/python is on sys.path, as for conftest)
import pytest

from normjit import _fuse_code


def fused(norm, x):
    return ("fused", norm.tag, x)


NORMS = frozenset({"norm1", "norm2", "norm3"})


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_the_three_shapes_are_fused_and_the_rest_computes_as_written(mode):
    cls, pairs = _fuse_code.fused_class(sample.Block, NORMS, frozenset({"act"}), fused)
    assert pairs == [("norm1", "act"), ("norm2", "act"), ("norm3", "act")]  # each pair once
    block = sample.Block(mode)
    x, t, y, inner = block.forward(0, 7)
    block.__class__ = cls
    fx, ft, fy, finner = block.forward(0, 7)
    assert ft == t == ("act", 7)  # the SiLU of the other input stays
    assert fy == ("fused", "n3", 1) and y == ("act", ("n3", 1))
    if mode == 2:  # norm2's output is changed before the SiLU: both kept
        assert x == ("act", ("scaled", ("n2", ("act", ("n1", 0)))))
        assert fx == ("act", ("scaled", ("n2", ("fused", "n1", 0))))
    else:
        assert x == ("act", ("n2", ("act", ("n1", 0))))
        assert fx == ("fused", "n2", ("fused", "n1", 0))
    assert finner(block) == inner(block) == ("act", ("n1", 0))  # nested code untouched
    assert isinstance(block, sample.Block) and cls._normjit_original_class is sample.Block
    assert cls.forward.__qualname__ == "Block.forward"


def test_the_fused_forward_keeps_the_source_lines_of_the_original():
    cls, _ = _fuse_code.fused_class(sample.Block, NORMS, frozenset({"act"}), fused)
    block = sample.Block(1)
    block.__class__ = cls
    block.norm1 = None  # the fused call of norm1 now fails: the traceback names the line
    with pytest.raises(AttributeError) as info:
        block.forward(0)
    frames = traceback.extract_tb(info.value.__traceback__)
    line = [f for f in frames if f.name == "forward"][0]
    assert line.filename == sample.__file__ and line.line.strip() == "x = self.norm1(x)"


def test_a_forward_without_a_pair_and_a_taken_flag_name():
    cls, why = _fuse_code.fused_class(sample.NotAfter, frozenset({"norm"}), frozenset({"act"}),
                                      fused)
    assert cls is None and "applies no SiLU child directly to a GroupNorm child's output" in why
    cls, pairs = _fuse_code.fused_class(sample.FlagTaken, frozenset({"norm"}),
                                        frozenset({"act"}), fused)
    assert pairs == [("norm", "act")]
    m = sample.FlagTaken()
    m.__class__ = cls
    assert m.forward(0, True) == (("fused", "norm", 0), "mine")
    assert m.forward(0, False) == (("act", 0), "mine")


def test_a_forward_decorated_by_a_functools_wraps_wrapper_keeps_the_wrapper():
    cls, pairs = _fuse_code.fused_class(sample.Wrapped, frozenset({"norm"}), frozenset({"act"}),
                                        fused)
    assert pairs == [("norm", "act")]
    m = sample.Wrapped()
    m.__class__ = cls
    assert m.forward(0) == ("fused", "norm", 0) and m.calls == 1  # the wrapper ran
    assert cls.forward.__wrapped__ is not sample.Wrapped.forward.__wrapped__
    assert cls.forward.__code__ is sample.Wrapped.forward.__code__  # the same wrapper code
    assert cls.forward.__qualname__ == "Wrapped.forward"


def test_forwards_that_are_not_rewritten_say_why(tmp_path, monkeypatch):
    def why(cls):
        result, text = _fuse_code.fused_class(cls, frozenset({"norm"}), frozenset({"act"}), fused)
        assert result is None
        return text

    assert why(sample.UsesSuper) == "its forward calls super()"
    assert why(sample.Decorated) == "its forward is decorated"
    namespace = {}
    exec("class NoSource:\n    def forward(self, x):\n        return self.act(self.norm(x))\n",
         namespace)
    assert why(namespace["NoSource"]).startswith("its forward's source cannot be read")

    def outer():
        k = 2

        class Closure:
            def forward(self, x):
                return self.act(self.norm(x)) * k
        return Closure

    assert why(outer()) == "its forward is a closure (uses k of an enclosing function)"
    # A file edited after the import: its text is not the code that runs.
    path = tmp_path / "edited_sample.py"
    path.write_text(textwrap.dedent("""\
        class Edited:
            def forward(self, x):
                x = self.norm(x)
                x = self.act(x)
                return x
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    edited = importlib.import_module("edited_sample")
    path.write_text(path.read_text().replace("return x", "return [x]"))
    linecache.clearcache()
    assert why(edited.Edited) == ("its forward's source is not the code that is loaded (an "
                                  "edited file?)")
