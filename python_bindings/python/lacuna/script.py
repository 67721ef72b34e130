"""Authoring kernels in Python, close to SparseTIR's script.

::

    import lacuna.script as T

    with T.kernel("spmm") as K:
        I = T.dense_fixed("m")
        J = T.sparse_variable(I, ("n", "nnz"))
        J_ = T.dense_fixed("n")
        K_ = T.dense_fixed("feat")
        A = T.match_sparse_buffer((I, J), "float64")
        B = T.match_sparse_buffer((J_, K_), "float64")
        C = T.match_sparse_buffer((I, K_), "float64")
        with T.sp_iter([I, J, K_], "SRS", "spmm") as [i, j, k]:
            with T.init():
                C[i, k] = 0.0
            C[i, k] = C[i, k] + A[i, j] * B[j, k]
    spmm = K.kernel                    # a lacuna.Kernel, verified by the Rust parser

Sizes are parameter names (strings, or :func:`param`) or integer constants. Axes and buffers
without a ``name=`` take the name of the local variable they are assigned to when the
``with T.kernel(...)`` block ends (``I``, ``J``, ``A``, ...), and iterator variables the names
they are bound to (``i``, ``j``, ``k``; otherwise the axis name in lower case). A buffer given by
``match_sparse_buffer`` is an output when the kernel stores into it and an input otherwise,
unless ``role=`` says so; ``alloc_sparse_buffer`` declares an intermediate. Statements are
recorded by assignment to buffer elements (``C[i, k] = ...``, ``C[i, k] += ...``) inside
``sp_iter`` blocks, and compile to the text statements of the RON kernel format
(:meth:`KernelBuilder.to_ron`). Expressions have ``+ - * /``, comparisons ``< <= > >=`` (and
:func:`eq`, :func:`ne`), ``&`` / ``|`` / ``~`` for ``&& || !``, and the functions
:func:`exp`, :func:`log`, :func:`sqrt`, :func:`abs`, :func:`min`, :func:`max`, :func:`pow`,
:func:`select` and the casts :func:`f32`, :func:`f64`, :func:`i32`, :func:`i64`;
:func:`raw` inserts expression text as is (e.g. MLIR's semiring operations).
"""

from __future__ import annotations

import inspect
import json
import math
import threading
from typing import Any, Sequence

import numpy as np

__all__ = [
    "Axis",
    "Buffer",
    "Expr",
    "KernelBuilder",
    "abs",
    "alloc_sparse_buffer",
    "dense_fixed",
    "dense_variable",
    "eq",
    "exp",
    "f32",
    "f64",
    "i32",
    "i64",
    "i8",
    "init",
    "kernel",
    "log",
    "match_sparse_buffer",
    "max",
    "min",
    "ne",
    "param",
    "pow",
    "raw",
    "select",
    "sp_iter",
    "sparse_fixed",
    "sparse_variable",
    "sqrt",
    "attach",
]

_local = threading.local()


def _current() -> "KernelBuilder":
    stack = getattr(_local, "stack", [])
    if not stack:
        raise RuntimeError("lacuna.script: use this inside `with lacuna.script.kernel(...)`")
    return stack[-1]


def _ron(s: str) -> str:
    return json.dumps(s)


class Param:
    """A symbolic size of the kernel."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Param({self.name!r})"


def _size(builder: "KernelBuilder", s: Any) -> str:
    if isinstance(s, Param):
        builder._param(s.name)
        return s.name
    if isinstance(s, str):
        builder._param(s)
        return s
    if isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0:
        return str(int(s))
    raise TypeError(f"a size is a parameter name or a non-negative integer, not {s!r}")


# Expressions ---------------------------------------------------------------------------------


class Expr:
    """A scalar expression; operators build larger ones."""

    def _text(self) -> str:
        raise NotImplementedError

    def __add__(self, o: Any) -> "Expr":
        return _Bin("+", self, o)

    def __radd__(self, o: Any) -> "Expr":
        return _Bin("+", o, self)

    def __sub__(self, o: Any) -> "Expr":
        return _Bin("-", self, o)

    def __rsub__(self, o: Any) -> "Expr":
        return _Bin("-", o, self)

    def __mul__(self, o: Any) -> "Expr":
        return _Bin("*", self, o)

    def __rmul__(self, o: Any) -> "Expr":
        return _Bin("*", o, self)

    def __truediv__(self, o: Any) -> "Expr":
        return _Bin("/", self, o)

    def __rtruediv__(self, o: Any) -> "Expr":
        return _Bin("/", o, self)

    def __neg__(self) -> "Expr":
        return _Bin("-", 0, self)

    def __lt__(self, o: Any) -> "Expr":
        return _Bin("<", self, o)

    def __le__(self, o: Any) -> "Expr":
        return _Bin("<=", self, o)

    def __gt__(self, o: Any) -> "Expr":
        return _Bin(">", self, o)

    def __ge__(self, o: Any) -> "Expr":
        return _Bin(">=", self, o)

    def __and__(self, o: Any) -> "Expr":
        return _Bin("&&", self, o)

    def __or__(self, o: Any) -> "Expr":
        return _Bin("||", self, o)

    def __invert__(self) -> "Expr":
        return _Raw(lambda: f"!({_text(self)})")

    def __bool__(self) -> bool:
        raise TypeError("a lacuna expression has no truth value; use select(cond, a, b)")

    def __str__(self) -> str:
        return _text(self)


def _text(e: Any) -> str:
    if isinstance(e, Expr):
        return e._text()
    if isinstance(e, bool):
        raise TypeError("booleans are not values of a kernel; use a comparison")
    if isinstance(e, (int, np.integer)):
        return str(int(e))
    if isinstance(e, (float, np.floating)):
        f = float(e)
        if not math.isfinite(f):
            raise ValueError(f"{f} cannot be written in a kernel")
        t = repr(f)
        return t if ("." in t or "e" in t) else t + ".0"
    raise TypeError(f"{e!r} is not a kernel expression")


class _Bin(Expr):
    def __init__(self, op: str, a: Any, b: Any):
        self.op, self.a, self.b = op, a, b
        _text_check(a)
        _text_check(b)

    def _text(self) -> str:
        return f"({_text(self.a)} {self.op} {_text(self.b)})"


def _text_check(e: Any) -> None:
    if not isinstance(e, (Expr, int, float, np.integer, np.floating)) or isinstance(e, bool):
        raise TypeError(f"{e!r} is not a kernel expression")


class _Call(Expr):
    def __init__(self, fn: str, *args: Any):
        self.fn, self.args = fn, args
        for a in args:
            _text_check(a)

    def _text(self) -> str:
        return f"{self.fn}({', '.join(_text(a) for a in self.args)})"


class _Raw(Expr):
    def __init__(self, render: Any):
        self.render = render

    def _text(self) -> str:
        return self.render()


class IterVar(Expr):
    """An iterator variable of a sparse iteration (its coordinate, an i64, as a value)."""

    def __init__(self, axis: "Axis", name: str | None):
        self.axis, self.name = axis, name

    def _text(self) -> str:
        if self.name is None:
            raise RuntimeError("iterator variables are named when the kernel block ends")
        return self.name


class _Load(Expr):
    def __init__(self, buf: "Buffer", idx: tuple):
        self.buf, self.idx = buf, idx

    def _text(self) -> str:
        return f"{self.buf.name}[{', '.join(_text(i) for i in self.idx)}]"


def eq(a: Any, b: Any) -> Expr:
    """``a == b``."""
    return _Bin("==", a, b)


def ne(a: Any, b: Any) -> Expr:
    """``a != b``."""
    return _Bin("!=", a, b)


def exp(x: Any) -> Expr:
    """``exp(x)``."""
    return _Call("exp", x)


def log(x: Any) -> Expr:
    """``log(x)``."""
    return _Call("log", x)


def sqrt(x: Any) -> Expr:
    """``sqrt(x)``."""
    return _Call("sqrt", x)


def abs(x: Any) -> Expr:  # noqa: A001 - the kernel language's name
    """``abs(x)``."""
    return _Call("abs", x)


def min(a: Any, b: Any) -> Expr:  # noqa: A001
    """``min(a, b)``."""
    return _Call("min", a, b)


def max(a: Any, b: Any) -> Expr:  # noqa: A001
    """``max(a, b)``."""
    return _Call("max", a, b)


def pow(a: Any, b: Any) -> Expr:  # noqa: A001
    """``pow(a, b)``."""
    return _Call("pow", a, b)


def select(cond: Any, a: Any, b: Any) -> Expr:
    """``select(cond, a, b)``: ``a`` where ``cond`` holds, else ``b`` (lazy)."""
    return _Call("select", cond, a, b)


def f32(x: Any) -> Expr:
    """Cast to f32."""
    return _Call("f32", x)


def f64(x: Any) -> Expr:
    """Cast to f64."""
    return _Call("f64", x)


def i8(x: Any) -> Expr:
    """Cast to i8."""
    return _Call("i8", x)


def i32(x: Any) -> Expr:
    """Cast to i32."""
    return _Call("i32", x)


def i64(x: Any) -> Expr:
    """Cast to i64."""
    return _Call("i64", x)


def raw(text: str) -> Expr:
    """Expression text inserted as is, e.g. ``raw("binary(A[i, j], B[i, j], x + y, identity, identity)")``."""
    return _Raw(lambda: text)


# Axes, buffers, iterations -------------------------------------------------------------------


class Axis:
    """A sparse axis (SparseTIR's ``dense_fixed``, ``dense_variable``, ``sparse_fixed``,
    ``sparse_variable``, and ``attach``-ed axes, whose ``base`` is the re-parented axis)."""

    base: "Axis | None" = None

    def __init__(self, kind: str, fields: list[tuple[str, Any]], parent: "Axis | None",
                 name: str | None, idtype: str, sorted: bool):
        self.kind, self.fields, self.parent, self.name = kind, fields, parent, name
        if idtype not in ("int32", "int64"):
            raise ValueError(f"idtype must be int32 or int64, not {idtype!r}")
        self.idtype, self.sorted = idtype, sorted

    def _ron(self) -> str:
        fields = []
        if self.parent is not None:
            fields.append(f"parent: {_ron(self.parent.name)}")
        if self.base is not None:
            fields.append(f"base: {_ron(self.base.name)}")
        fields += [f"{k}: {_ron(v)}" for k, v in self.fields]
        extra = ""
        if self.idtype == "int64":
            extra += ", idtype: I64"
        if not self.sorted:
            extra += ", sorted: false"
        return f"(name: {_ron(self.name)}, kind: {self.kind}({', '.join(fields)}){extra})"

    def __repr__(self) -> str:
        return f"Axis({self.name!r}, {self.kind})"


_DTYPES = {"float32": "F32", "float64": "F64", "int8": "I8", "int32": "I32", "int64": "I64"}


class Buffer:
    """A sparse buffer over a list of axes. ``B[i, j]`` reads an element; assigning to it
    records a store in the innermost ``sp_iter``."""

    def __init__(self, builder: "KernelBuilder", axes: Sequence[Axis], dtype: Any, role: str | None,
                 name: str | None, encoding: str | None, default_value: float | None,
                 extra_storage: int, coordinates_of: "Axis | None" = None):
        self.builder = builder
        self.axes = list(axes)
        for a in self.axes:
            if not isinstance(a, Axis):
                raise TypeError(f"buffer axes must be Axis objects, not {a!r}")
        dt = np.dtype(dtype).name
        if dt not in _DTYPES:
            raise TypeError(f"buffer element type must be float32, float64, int8, int32 or int64, not {dt}")
        if role not in (None, "input", "output", "alloc"):
            raise ValueError(f"role must be 'input', 'output' or 'alloc', not {role!r}")
        self.dtype, self.role, self.name = dt, role, name
        self.encoding, self.default_value, self.extra_storage = encoding, default_value, extra_storage
        if coordinates_of is not None and not isinstance(coordinates_of, Axis):
            raise TypeError(f"coordinates_of must be an Axis, not {coordinates_of!r}")
        if coordinates_of is not None and not dt.startswith("int"):
            raise TypeError(f"coordinates_of needs an integer buffer, not {dt}")
        self.coordinates_of = coordinates_of
        self.written = False

    def _index(self, idx: Any) -> tuple:
        idx = idx if isinstance(idx, tuple) else (idx,)
        for i in idx:
            _text_check(i)
        return idx

    def __getitem__(self, idx: Any) -> Expr:
        return _Load(self, self._index(idx))

    def __setitem__(self, idx: Any, value: Any) -> None:
        _text_check(value)
        self.written = True
        self.builder._emit(_Store(self, self._index(idx), value))

    def _role(self) -> str:
        return self.role or ("output" if self.written else "input")

    def _ron(self) -> str:
        parts = [
            f"name: {_ron(self.name)}",
            f"axes: [{', '.join(_ron(a.name) for a in self.axes)}]",
            f"dtype: {_DTYPES[self.dtype]}",
        ]
        role = self._role()
        if role != "input":
            parts.append(f"role: {role.capitalize()}")
        if self.default_value is not None:
            parts.append(f"default_value: Some({_text(float(self.default_value))})")
        if self.extra_storage:
            parts.append(f"extra_storage: {int(self.extra_storage)}")
        if self.encoding is not None:
            parts.append(f"encoding: Some({_ron(self.encoding)})")
        if self.coordinates_of is not None:
            parts.append(f"coordinates_of: Some({_ron(self.coordinates_of.name)})")
        return f"({', '.join(parts)})"

    def __repr__(self) -> str:
        return f"Buffer({self.name!r}, {[a.name for a in self.axes]}, {self.dtype})"


class _Store:
    def __init__(self, buf: Buffer, idx: tuple, value: Any):
        self.buf, self.idx, self.value = buf, idx, value

    def _ron(self) -> str:
        target = f"{self.buf.name}[{', '.join(_text(i) for i in self.idx)}]"
        return f"Store({_ron(f'{target} = {_text(self.value)}')})"


class _Iter:
    def __init__(self, axes: Sequence[Axis], kinds: str, name: str | None, vars: Sequence[str] | None):
        self.axes, self.kinds, self.name = list(axes), kinds, name
        if len(kinds) != len(self.axes) or set(kinds) - {"S", "R"}:
            raise ValueError(f"kinds {kinds!r} must give one S or R per axis ({len(self.axes)})")
        if vars is not None and len(vars) != len(self.axes):
            raise ValueError("one variable name per axis")
        self.vars = [IterVar(a, None if vars is None else v) for a, v in zip(self.axes, vars or [None] * len(self.axes))]
        self.init: list = []
        self.body: list = []

    def _ron(self) -> str:
        def stmts(xs: list) -> str:
            return "[" + ", ".join(s._ron() for s in xs) + "]"

        init = f", init: {stmts(self.init)}" if self.init else ""
        return (
            f"Iter((name: {_ron(self.name)}, axes: [{', '.join(_ron(a.name) for a in self.axes)}], "
            f"kinds: {_ron(self.kinds)}, vars: [{', '.join(_ron(v.name) for v in self.vars)}]"
            f"{init}, body: {stmts(self.body)}))"
        )


class _Block:
    """The context manager of ``sp_iter`` and ``init``."""

    def __init__(self, builder: "KernelBuilder", target: list, value: Any):
        self.builder, self.target, self.value = builder, target, value

    def __enter__(self) -> Any:
        self.builder._blocks.append(self.target)
        return self.value

    def __exit__(self, *exc: Any) -> None:
        self.builder._blocks.pop()


class KernelBuilder:
    """Builds one kernel; ``with lacuna.script.kernel(name) as K:`` makes it current, and its
    methods are also available as module functions."""

    def __init__(self, name: str):
        self.name = name
        self.params: list[str] = []
        self.axes: list[Axis] = []
        self.buffers: list[Buffer] = []
        self.body: list = []
        self._blocks: list[list] = [self.body]
        self._iters: list[_Iter] = []
        self._kernel = None

    # Context -------------------------------------------------------------------------------
    def __enter__(self) -> "KernelBuilder":
        _local.stack = getattr(_local, "stack", []) + [self]
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        _local.stack = _local.stack[:-1]
        if exc_type is None:
            frame = inspect.currentframe()
            caller = frame.f_back if frame is not None else None
            self._name_from(caller.f_locals if caller is not None else {})
            self._kernel = None
            self.kernel  # noqa: B018 - parse and verify now, so errors point at the block

    def _name_from(self, scope: dict) -> None:
        """Names unnamed axes, buffers and iterator variables after the locals bound to them."""
        by_id = {id(v): k for k, v in scope.items() if isinstance(v, (Axis, Buffer, IterVar))}
        taken = {a.name for a in self.axes if a.name} | {b.name for b in self.buffers if b.name}
        for prefix, objs in (("ax", self.axes), ("buf", self.buffers)):
            for n, o in enumerate(objs):
                if o.name is None:
                    name = by_id.get(id(o))
                    if name is None or name in taken:
                        name = f"{prefix}{n}"
                    o.name = name
                    taken.add(name)
        for it in self._iters:
            for v in it.vars:
                if v.name is None:
                    v.name = by_id.get(id(v)) or v.axis.name.lower()

    def _param(self, name: str) -> None:
        if name not in self.params:
            self.params.append(name)

    def _emit(self, stmt: Any) -> None:
        if len(self._blocks) == 1:
            raise RuntimeError("stores go inside `with sp_iter(...)`")
        self._blocks[-1].append(stmt)

    # Declarations ----------------------------------------------------------------------------
    def param(self, name: str) -> Param:
        """Declares a symbolic size (sizes given as strings are declared on first use)."""
        self._param(name)
        return Param(name)

    def _axis(self, kind: str, fields: list, parent: Axis | None, name: str | None, idtype: str, sorted: bool) -> Axis:
        if parent is not None and not isinstance(parent, Axis):
            raise TypeError(f"the parent of an axis must be an Axis, not {parent!r}")
        a = Axis(kind, [(k, _size(self, v)) for k, v in fields], parent, name, idtype, sorted)
        self.axes.append(a)
        return a

    def dense_fixed(self, n: Any, *, name: str | None = None, idtype: str = "int32") -> Axis:
        """A dense axis of extent ``n``."""
        return self._axis("DenseFixed", [("n", n)], None, name, idtype, True)

    def dense_variable(self, parent: Axis, shape: tuple[Any, Any], *, name: str | None = None,
                       idtype: str = "int32") -> Axis:
        """A ragged axis under ``parent``: ``shape = (max_len, nnz)``; each segment stores
        coordinates ``0..len`` (lengths from an ``indptr``)."""
        max_len, nnz = shape
        return self._axis("DenseVariable", [("max_len", max_len), ("nnz", nnz)], parent, name, idtype, True)

    def sparse_fixed(self, parent: Axis, shape: tuple[Any, Any], *, name: str | None = None,
                     idtype: str = "int32", sorted: bool = True) -> Axis:
        """An ELL-like axis under ``parent``: ``shape = (n, nnz_cols)``, exactly ``nnz_cols``
        stored coordinates below ``n`` per segment."""
        n, nnz_cols = shape
        return self._axis("SparseFixed", [("n", n), ("nnz_cols", nnz_cols)], parent, name, idtype, sorted)

    def sparse_variable(self, parent: Axis, shape: tuple[Any, Any], *, name: str | None = None,
                        idtype: str = "int32", sorted: bool = True) -> Axis:
        """A CSR-like axis under ``parent``: ``shape = (n, nnz)``, coordinates below ``n``
        given by ``indptr``/``indices``."""
        n, nnz = shape
        return self._axis("SparseVariable", [("n", n), ("nnz", nnz)], parent, name, idtype, sorted)

    def attach(self, base: Axis, parent: Axis, *, name: str | None = None) -> Axis:
        """SparseTIR's ``attach(base, parent)``: ``base`` (whose parent is a detached
        ``dense_fixed`` axis) re-parented under ``parent``; under a point of ``parent`` it visits
        the fiber of ``base`` selected by the parent's coordinate. It owns no storage: declare
        buffers over ``base`` and iterate the attached axis."""
        if not isinstance(base, Axis) or not isinstance(parent, Axis):
            raise TypeError("attach(base, parent) takes two axes")
        if base.parent is None or base.base is not None:
            raise ValueError(f"attach: the base {base!r} must be an axis with a parent, not a root or attached axis")
        fields = dict(base.fields)
        n = fields.get("n", fields.get("max_len"))
        a = Axis("Attached", [("n", n)], parent, name, "int32", True)
        a.base = base
        self.axes.append(a)
        return a

    def match_sparse_buffer(self, *args: Any, name: str | None = None, role: str | None = None,
                            encoding: str | None = None, default_value: float | None = None,
                            extra_storage: int = 0, coordinates_of: Axis | None = None) -> Buffer:
        """A buffer bound to an argument: ``match_sparse_buffer([name,] axes, dtype="float64")``.
        With ``encoding`` (a preset such as ``"csr"`` or an MLIR encoding) the axes are its
        dense dimensions and the encoding says how it is stored. With ``coordinates_of=J`` an
        integer input holds coordinates of axis ``J``: each value is checked when bound
        (``BindError`` names the first outside), and ``x[idx[i]]`` over a dense axis of that
        extent then needs no range check in the kernel."""
        if args and isinstance(args[0], str):
            name, args = args[0], args[1:]
        if not args:
            raise TypeError("match_sparse_buffer needs the buffer's axes")
        axes, dtype = args[0], (args[1] if len(args) > 1 else "float64")
        b = Buffer(self, axes, dtype, role, name, encoding, default_value, extra_storage,
                   coordinates_of)
        self.buffers.append(b)
        return b

    def alloc_sparse_buffer(self, *args: Any, name: str | None = None, default_value: float | None = None,
                            extra_storage: int = 0) -> Buffer:
        """An intermediate buffer allocated by the kernel: ``alloc_sparse_buffer([name,] axes, dtype)``."""
        return self.match_sparse_buffer(*args, name=name, role="alloc", default_value=default_value,
                                        extra_storage=extra_storage)

    def sp_iter(self, axes: Sequence[Axis], kinds: str, name: str | None = None, *,
                vars: Sequence[str] | None = None) -> _Block:
        """A sparse iteration over ``axes``, each spatial (``S``) or reduction (``R``);
        ``with sp_iter(...) as [i, j, ...]:`` gives the iterator variables and records the body."""
        it = _Iter(axes, kinds, name or (self.name if not self._iters else f"{self.name}_{len(self._iters)}"), vars)
        self._iters.append(it)
        self._emit_iter(it)
        return _Block(self, it.body, list(it.vars))

    def _emit_iter(self, it: _Iter) -> None:
        if len(self._blocks) == 1:
            self.body.append(it)
        else:
            self._blocks[-1].append(it)

    def init(self) -> _Block:
        """``with init():`` records the init block of the innermost ``sp_iter`` (run once per
        spatial point, before the reduction)."""
        open_iters = [it for it in self._iters if it.body is self._blocks[-1]]
        if not open_iters:
            raise RuntimeError("init() goes directly inside `with sp_iter(...)`")
        return _Block(self, open_iters[-1].init, None)

    # Output ----------------------------------------------------------------------------------
    def to_ron(self) -> str:
        """The kernel in the RON kernel format."""
        lines = [
            "(",
            "    version: 1,",
            f"    name: {_ron(self.name)},",
            f"    params: [{', '.join(_ron(p) for p in self.params)}],",
            "    axes: [",
            *[f"        {a._ron()}," for a in self.axes],
            "    ],",
            "    buffers: [",
            *[f"        {b._ron()}," for b in self.buffers],
            "    ],",
            "    body: [",
            *[f"        {s._ron()}," for s in self.body],
            "    ],",
            ")",
        ]
        return "\n".join(lines) + "\n"

    @property
    def kernel(self):
        """The built :class:`lacuna.Kernel` (parsed and verified by the Rust front end)."""
        if self._kernel is None:
            from . import Kernel

            self._kernel = Kernel.from_ron_text(self.to_ron(), origin=f"<lacuna.script kernel {self.name!r}>")
        return self._kernel


def kernel(name: str) -> KernelBuilder:
    """Starts a kernel: ``with lacuna.script.kernel("spmm") as K: ...``; then ``K.kernel``."""
    return KernelBuilder(name)


def param(name: str) -> Param:
    """Declares a symbolic size of the current kernel."""
    return _current().param(name)


def dense_fixed(n: Any, **kw: Any) -> Axis:
    """A dense axis of extent ``n`` (see :meth:`KernelBuilder.dense_fixed`)."""
    return _current().dense_fixed(n, **kw)


def dense_variable(parent: Axis, shape: tuple[Any, Any], **kw: Any) -> Axis:
    """A ragged axis (see :meth:`KernelBuilder.dense_variable`)."""
    return _current().dense_variable(parent, shape, **kw)


def sparse_fixed(parent: Axis, shape: tuple[Any, Any], **kw: Any) -> Axis:
    """An ELL-like axis (see :meth:`KernelBuilder.sparse_fixed`)."""
    return _current().sparse_fixed(parent, shape, **kw)


def sparse_variable(parent: Axis, shape: tuple[Any, Any], **kw: Any) -> Axis:
    """A CSR-like axis (see :meth:`KernelBuilder.sparse_variable`)."""
    return _current().sparse_variable(parent, shape, **kw)


def attach(base: Axis, parent: Axis, **kw: Any) -> Axis:
    """An attached axis (see :meth:`KernelBuilder.attach`)."""
    return _current().attach(base, parent, **kw)


def match_sparse_buffer(*args: Any, **kw: Any) -> Buffer:
    """A buffer bound to an argument (see :meth:`KernelBuilder.match_sparse_buffer`)."""
    return _current().match_sparse_buffer(*args, **kw)


def alloc_sparse_buffer(*args: Any, **kw: Any) -> Buffer:
    """An intermediate buffer (see :meth:`KernelBuilder.alloc_sparse_buffer`)."""
    return _current().alloc_sparse_buffer(*args, **kw)


def sp_iter(axes: Sequence[Axis], kinds: str, name: str | None = None, **kw: Any) -> _Block:
    """A sparse iteration (see :meth:`KernelBuilder.sp_iter`)."""
    return _current().sp_iter(axes, kinds, name, **kw)


def init() -> _Block:
    """The init block of the innermost sparse iteration (see :meth:`KernelBuilder.init`)."""
    return _current().init()

