"""Classes whose forwards normjit._fuse_code rewrites (tests/python/test_fuse_code.py): plain
Python stand-ins for a GroupNorm (Norm), an nn.SiLU (Act) and modules that apply one to the
other's output in code. Its own module, so that the code objects are compiled from a file with
`import math` at the top, as a library's are."""
import functools
import math


class Norm:
    def __init__(self, tag="norm"):
        self.tag = tag

    def __call__(self, x):
        return (self.tag, x)


class Act:
    def __call__(self, x):
        return ("act", x)


class Block:
    """diffusers' ResnetBlock2D's shapes: statements (norm1), the end of some branches of an if
    (norm2), the SiLU also applied to another input (t), a nested call (norm3), and a module
    function called as an attribute (math.floor: the method-call layout of a file's compile)."""

    def __init__(self, mode):
        self.mode = mode
        self.norm1, self.norm2, self.norm3, self.act = Norm("n1"), Norm("n2"), Norm("n3"), Act()

    def forward(self, x, t=None, *args, **kwargs):
        x = self.norm1(x)
        x = self.act(x)
        t = self.act(t)
        if self.mode == 1:
            x = self.norm2(x)
        elif self.mode == 2:
            x = self.norm2(x)
            x = ("scaled", x)
        else:
            x = self.norm2(x)
        x = self.act(x)
        y = self.act(self.norm3(math.floor(1.5)))

        def inner(self):  # a nested function keeps its code: its `self` is another
            return self.act(self.norm1(0))

        return x, t, y, inner


class NotAfter:
    """The SiLU applied to something else than the norm's output: nothing to fuse."""

    def __init__(self):
        self.norm, self.act = Norm(), Act()

    def forward(self, x):
        y = self.norm(x)
        x = self.act(x)
        return x, y


class FlagTaken:
    """A local already named like the rewriter's first flag: the flag takes another name."""

    def __init__(self):
        self.norm, self.act = Norm(), Act()

    def forward(self, x, c):
        _normjit_silu_done_0 = "mine"
        if c:
            x = self.norm(x)
        x = self.act(x)
        return x, _normjit_silu_done_0


class Base:
    def forward(self, x):
        return x


class UsesSuper(Base):
    def __init__(self):
        self.norm, self.act = Norm(), Act()

    def forward(self, x):
        x = self.norm(x)
        x = self.act(x)
        return super().forward(x)


def decorated(fn):
    return fn


class Decorated:
    def __init__(self):
        self.norm, self.act = Norm(), Act()

    @decorated
    def forward(self, x):
        return self.act(self.norm(x))


def counted(fn):
    """A functools.wraps decorator (as diffusers' apply_lora_scale): the wrapper runs around fn,
    which one cell of its closure holds."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        self.calls = getattr(self, "calls", 0) + 1
        return fn(self, *args, **kwargs)
    return wrapper


class Wrapped:
    def __init__(self):
        self.norm, self.act = Norm(), Act()

    @counted
    def forward(self, x):
        x = self.norm(x)
        x = self.act(x)
        return x
