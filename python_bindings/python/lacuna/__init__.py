"""Lacuna from Python: author sparse kernels, schedule them, compile them, run them on NumPy
arrays and SciPy sparse matrices.

>>> import lacuna
>>> k = lacuna.Kernel.from_ron("examples/spmv.ron")           # doctest: +SKIP
>>> f = lacuna.build(k)                                       # doctest: +SKIP
>>> f(A=scipy_csr, x=x)["y"]                                  # doctest: +SKIP

Kernels are written in RON files (``examples/*.ron``) or built in Python with
:mod:`lacuna.script` (``dense_fixed``, ``sparse_variable``, ``match_sparse_buffer``,
``sp_iter``, ...). A :class:`Schedule` applies primitives and records them in a trace that is
the same RON schedule file the ``lacuna`` command line reads. :func:`build` compiles a kernel or
a schedule and returns a :class:`Function`, which takes the inputs by buffer name and returns
the outputs by buffer name. NumPy arrays of the kernel's element type in C order and SciPy CSR
matrices with matching index types are passed to the machine code without copying.
"""

from __future__ import annotations

import os
from collections import namedtuple
from typing import Any, Mapping

import numpy as np

from . import _lacuna
from ._lacuna import (
    BindError,
    CompileError,
    DataFileError,
    ExecutionError,
    FormatError,
    Kernel,
    KernelError,
    LacunaError,
    ScheduleError,
    ShapeError,
    SparseTensor,
    TuneError,
    __version__,
)

__all__ = [
    "BindError",
    "CompileError",
    "CooTensor",
    "DataFileError",
    "ExecutionError",
    "FormatError",
    "Function",
    "Kernel",
    "KernelError",
    "LacunaError",
    "Schedule",
    "ScheduleError",
    "ShapeError",
    "SparseTensor",
    "TuneError",
    "assemble",
    "build",
    "convert",
    "disassemble",
    "tune",
    "lower",
    "script",
    "storage_layout",
]

CooTensor = namedtuple("CooTensor", ["coords", "values", "shape"])
CooTensor.__doc__ = """A sparse result of rank other than 2: ``coords[d][e]`` is the
coordinate of entry ``e`` in dimension ``d``, ``values[e]`` its value."""


class Schedule:
    """A kernel and the schedule primitives applied to it, in order.

    Every primitive checks that it is legal; when it is not, it raises :class:`ScheduleError`
    naming the primitive, its arguments and the violated condition, and the schedule is left
    unchanged. Stage-I primitives (``sparse_reorder``, ``sparse_fuse``,
    ``sparse_decompose_init``, ``decompose_format``, ``iso_values``,
    ``pos``, ``specialize``) come before stage-II ones (``split``, ``divide``, ``fuse``,
    ``reorder``, ``parallel``, ``vectorize``, ``bind``, ``unroll``). Loops are named by their
    iterator variable (``"k"``), or ``"BLOCK:k"`` for the ``k`` loop enclosing block ``BLOCK``.
    """

    def __init__(self, kernel: Kernel):
        self._s = _lacuna.Schedule(kernel)

    @classmethod
    def from_ron(cls, kernel: Kernel, text_or_path: str | os.PathLike) -> "Schedule":
        """Replays a schedule file (a path, or RON text) on ``kernel``."""
        text = os.fspath(text_or_path)
        if "(" not in text and os.path.exists(text):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        self = cls.__new__(cls)
        self._s = _lacuna.Schedule.from_ron_text(kernel, text)
        return self

    @property
    def kernel(self) -> Kernel:
        """The kernel being scheduled."""
        return self._s.kernel

    @property
    def trace(self) -> str:
        """The applied primitives as a RON schedule file (``lacuna run --schedule`` reads it)."""
        return self._s.trace

    def save(self, path: str | os.PathLike) -> None:
        """Writes :attr:`trace` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.trace)

    def primitives(self) -> list[str]:
        """The names of the applied primitives, in order."""
        return self._s.primitives()

    def __len__(self) -> int:
        return len(self._s)

    def copy(self) -> "Schedule":
        """An independent copy."""
        other = Schedule.__new__(Schedule)
        other._s = self._s.copy()
        return other

    def get_blocks(self) -> list[str]:
        """Names of the blocks (sparse iterations and their init blocks), in program order."""
        return self._s.get_blocks()

    def get_loops(self, block: str) -> list[str]:
        """Names of the loops enclosing ``block``, outermost first, as the primitives take them."""
        return self._s.get_loops(block)

    def lower(self, stage: int | str = 2) -> str:
        """The scheduled program as text at a stage, as ``lacuna lower --stage`` prints it:
        ``1`` (sparse iterations), ``2`` (loops), ``"flat"`` (1-D arrays) or ``"llvm"`` (the
        optimized LLVM IR for the host). Raises :class:`ScheduleError` or
        :class:`CompileError` when the program does not lower."""
        return self._s.lower(str(stage))

    # Stage I.
    def sparse_reorder(self, iter: str, axes: list[str]) -> None:
        """Iterates the axes of sparse iteration ``iter`` in the order ``axes`` (all of them).

        Parents must stay before their children."""
        self._s.sparse_reorder(iter, list(axes))

    def sparse_fuse(self, iter: str, axes: list[str]) -> None:
        """Iterates a dense axis and its variable child (``axes = [parent, child]``) of ``iter``
        as one flat loop over the child's positions; each position's parent is found by a
        binary search of the child's ``indptr``."""
        self._s.sparse_fuse(iter, list(axes))

    def sparse_decompose_init(self, iter: str) -> None:
        """Moves the init of reduction ``iter`` (e.g. ``y[i] = 0`` of SpMV) into its own
        iteration ``ITER_init`` before it, so that ``sparse_fuse`` can fuse the rows with their
        entries (nnz-split kernels: chunks of entries, with atomic sums for shared rows)."""
        self._s.sparse_decompose_init(iter)

    def decompose_format(self, buffer: str, into: str) -> None:
        """Stores CSR input ``buffer`` as a sum of parts given by a decomposition term, e.g.
        ``"(+ (bucket 1 5 (ell 4)) (split_rows 4))"`` or ``"(+ (bsr 2) remainder)"``; each part
        gets its own copy of the iterations reading the buffer. The conversion runs on every
        call of the built function (the arguments are then copied)."""
        self._s.decompose_format(buffer, into)

    def iso_values(self, buffer: str) -> None:
        """Stores the values of sparse input ``buffer``, all equal (an unweighted graph, a
        ``pattern`` file), once (GraphBLAS's iso-valued matrices): the kernel loads only the
        structure. Applies to the buffer as stored or after ``decompose_format`` into ``csr``,
        ``remainder``, ``rcm``, ``panels`` or ``sell`` parts. Each call checks the values
        equal bit for bit and raises :class:`FormatError` naming the first that is not."""
        self._s.iso_values(buffer)

    def pos(self, iter: str, axis: str, buffer: str) -> None:
        """Makes dense ``axis`` of ``iter`` iterate the stored positions of ``buffer`` (TACO's
        position space); legal only when absent entries contribute nothing."""
        self._s.pos(iter, axis, buffer)

    def specialize(self, param: str, value: int) -> None:
        """Binds the symbolic size ``param`` to the constant ``value``; inputs of another size
        are then rejected with :class:`ShapeError`."""
        self._s.specialize(param, int(value))

    # Stage II.
    def split(self, loop: str, factors: list[int | None]) -> None:
        """Splits ``loop`` into nested loops ``loop.0``, ``loop.1``, ... of the given extents,
        outermost first; one factor may be ``None`` (inferred). A tail that does not divide
        evenly is guarded."""
        self._s.split(loop, [None if f is None else int(f) for f in factors])

    def divide(self, loop: str, parts: int) -> None:
        """Divides ``loop`` into ``parts`` outer chunks of equal size (TACO's ``divide``)."""
        self._s.divide(loop, int(parts))

    def fuse(self, outer: str, inner: str) -> None:
        """Fuses two directly nested loops into one."""
        self._s.fuse(outer, inner)

    def reorder(self, loops: list[str]) -> None:
        """Permutes perfectly nested loops into the order ``loops``, outermost first."""
        self._s.reorder(list(loops))

    def parallel(self, loop: str) -> None:
        """Runs the iterations of ``loop`` in parallel; they must be independent."""
        self._s.parallel(loop)

    def vectorize(self, loop: str) -> None:
        """Executes an innermost loop's iterations as vector lanes (sum reductions may be
        reassociated)."""
        self._s.vectorize(loop)

    def bind(self, loop: str, thread: str) -> None:
        """Binds ``loop`` to a GPU thread dimension (``blockIdx.x``, ``threadIdx.y``, ...);
        its iterations must be independent. CPU code runs it serially."""
        self._s.bind(loop, thread)

    def unroll(self, loop: str) -> None:
        """Unrolls ``loop`` (fully, when its trip count is constant)."""
        self._s.unroll(loop)

    def rfactor(self, loop: str) -> None:
        """Factors the reduction loop ``loop`` (constant extent) into partial results and a
        final reduction loop ``loop + ".rf"``."""
        self._s.rfactor(loop)

    def annotate(self, loop: str, key: str, value: int = 0) -> None:
        """Annotates ``loop``: ``atomic``, ``pragma_unroll`` (count), ``prefetch`` (distance),
        ``masked`` (a vectorized loop's tail as masked lanes; vector registers per step),
        ``lanes`` (a vectorized loop's lanes per vector register) or ``launch`` (0: a GPU
        kernel launch starts at this top-level loop)."""
        self._s.annotate(loop, key, value)

    def unannotate(self, loop: str, key: str) -> None:
        """Removes the annotation ``key`` from ``loop``."""
        self._s.unannotate(loop, key)

    def cache_read(self, block: str, buffer: str, scope: str, at: str | None = None) -> None:
        """Stages the elements of ``buffer`` that ``block`` reads under loop ``at`` (default: the
        block's outermost loop) in a new ``local`` or ``shared`` cache ``BUFFER_SCOPE``, filled
        by a copy stage before the consumer; the cache is laid out like the buffer's region."""
        self._s.cache_read(block, buffer, scope, at)

    def cache_write(self, block: str, buffer: str, scope: str, at: str | None = None) -> None:
        """Stages the element ``block`` writes of ``buffer`` under loop ``at`` in a cache, loaded
        first when the block also reads it, and written back after the consumer."""
        self._s.cache_write(block, buffer, scope, at)

    def reverse_cache_read(self, block: str, buffer: str, scope: str, at: str | None = None) -> None:
        """Like ``cache_read``, but the cache is indexed by the consumer's loops and the (possibly
        indirect) index is applied in the copy stage: a gather."""
        self._s.reverse_cache_read(block, buffer, scope, at)

    def reverse_cache_write(self, block: str, buffer: str, scope: str, at: str | None = None) -> None:
        """Accumulates ``block``'s sum into ``buffer`` in a zeroed cache indexed by the consumer's
        loops, then adds it back (a scatter-add, atomic when the update was atomic)."""
        self._s.reverse_cache_write(block, buffer, scope, at)

    def set_scope(self, buffer: str, scope: str) -> None:
        """Changes the scope (``global``, ``shared``, ``local``) of a scratch buffer; ``shared``
        only where all its accesses happen inside one GPU block's threads."""
        self._s.set_scope(buffer, scope)

    def __repr__(self) -> str:
        return f"Schedule({self.kernel.name!r}, {self.primitives()})"


def _is_sparse(x: Any) -> bool:
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover - scipy is a dependency
        return False
    return sp.issparse(x)


def _argument(name: str, x: Any, copy: bool) -> Any:
    """A SciPy sparse matrix as ``("csr", shape, indptr, indices, data)``, anything else as is."""
    if isinstance(x, SparseTensor):
        if len(x.shape) != 2:
            raise BindError(f"argument `{name}`: only 2-D sparse tensors are accepted")
        import scipy.sparse as sp

        coords, values = x.to_coo()
        x = sp.coo_matrix((values, (coords[0], coords[1])), shape=tuple(x.shape))
    if _is_sparse(x):
        if x.ndim != 2:
            raise ShapeError(f"argument `{name}`: only 2-D sparse matrices are accepted")
        if x.format != "csr":
            if not copy:
                raise BindError(
                    f"argument `{name}` is a {x.format.upper()} matrix, which is converted to "
                    "CSR by copying, but copy=False"
                )
            x = x.tocsr(copy=True)
            x.sum_duplicates()
        return ("csr", tuple(int(s) for s in x.shape), x.indptr, x.indices, x.data)
    return x


def _result(value: Any) -> Any:
    if isinstance(value, tuple):
        import scipy.sparse as sp

        kind = value[0]
        if kind == "csr":
            _, shape, indptr, indices, data = value
            return sp.csr_matrix((data, indices, indptr), shape=tuple(shape), copy=False)
        if kind == "coo":
            _, shape, coords, values = value
            if len(shape) == 2:
                m = sp.coo_matrix((values, (coords[0], coords[1])), shape=tuple(shape))
                return m.tocsr()
            return CooTensor(coords, values, tuple(shape))
    return value


class Function:
    """A compiled kernel. Call it with the inputs by buffer name::

        outputs = f(A=csr_matrix, x=vector)              # {"y": ndarray}
        outputs = f(A=csr_matrix, x=vector, out={"y": y}) # writes into y

    Inputs are NumPy arrays (any array-like) and SciPy sparse matrices (CSR, CSC, COO, BSR, ...).
    On the ``cpu`` target, a NumPy array of the buffer's element type in C order and aligned,
    and a CSR matrix whose ``indptr``/``indices`` have the axis's index type (int32 unless the
    kernel says ``idtype: I64``) and whose ``data`` has the buffer's element type, are used
    without copying; they are validated first (lengths, monotone ``indptr``, indices in range,
    sorted and without duplicates where the axis is ``sorted``). Anything else is converted
    (same-kind casts only) and the conversions are listed in :attr:`last_copies`; with
    ``copy=False`` a needed conversion raises :class:`BindError` instead.

    Dense outputs are NumPy arrays the kernel wrote into (``out=`` arrays when given: they must
    be writeable, C-contiguous, of the element type and shape); sparse outputs over an input's
    pattern are ``scipy.sparse.csr_matrix`` sharing that input's ``indptr``/``indices``; sparse
    results of co-iteration kernels (SpAdd, SpGEMM) are ``csr_matrix`` (2-D) or
    :class:`CooTensor`. ``params`` binds sizes the inputs do not determine. The GIL is released
    while the kernel runs.
    """

    def __init__(self, exe: Any, kernel: Kernel, schedule: Schedule | None):
        self._exe = exe
        self.kernel = kernel
        self.schedule = schedule
        self.last_copies: list[str] = []

    @property
    def target(self) -> str:
        """The target it was built for."""
        return self._exe.target

    @property
    def inputs(self) -> list[str]:
        """The input buffers."""
        return self._exe.inputs

    @property
    def outputs(self) -> list[str]:
        """The output buffers."""
        return self._exe.outputs

    def __call__(
        self,
        /,
        params: Mapping[str, int] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
        copy: bool = True,
        threads: int | None = None,
        **inputs: Any,
    ) -> dict[str, Any]:
        return self.run(inputs, params=params, out=out, copy=copy, threads=threads)

    def run(
        self,
        inputs: Mapping[str, Any],
        params: Mapping[str, int] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
        copy: bool = True,
        threads: int | None = None,
    ) -> dict[str, Any]:
        """Like calling the function, with the inputs as a mapping (for buffers named
        ``params``, ``out``, ``copy`` or ``threads``). ``threads``: how many threads the
        kernel's parallel loops run on (default: ``RAYON_NUM_THREADS``, or one per core)."""
        args = {name: _argument(name, x, copy) for name, x in inputs.items()}
        outputs, copies = self._exe.run(
            args,
            None if params is None else {k: int(v) for k, v in params.items()},
            None if out is None else dict(out),
            copy,
            None if threads is None else int(threads),
        )
        self.last_copies = list(copies)
        return {name: _result(v) for name, v in outputs.items()}

    def __repr__(self) -> str:
        return f"Function({self.kernel.name!r}, target={self.target!r})"


def build(kernel_or_schedule: Kernel | Schedule, target: str = "cpu") -> Function:
    """Compiles a kernel, or a scheduled kernel, for ``target``: ``"cpu"`` (LLVM JIT for the
    host), ``"interp"`` (the stage-II interpreter), ``"interp-stage1"`` (the stage-I
    interpreter) or ``"interp-gpu"`` (GPU semantics, races reported). The GIL is released
    while compiling. Raises :class:`CompileError` when lowering or code generation fails."""
    if isinstance(kernel_or_schedule, Schedule):
        kernel = kernel_or_schedule.kernel
        exe = _lacuna.build(kernel, kernel_or_schedule._s, target)
        return Function(exe, kernel, kernel_or_schedule.copy())
    if isinstance(kernel_or_schedule, Kernel):
        return Function(_lacuna.build(kernel_or_schedule, None, target), kernel_or_schedule, None)
    raise TypeError(f"build takes a Kernel or a Schedule, not {type(kernel_or_schedule).__name__}")


def lower(kernel_or_schedule: Kernel | Schedule, stage: int | str = 2) -> str:
    """A kernel, or a scheduled kernel, as text at ``stage`` (see :meth:`Schedule.lower`)."""
    if isinstance(kernel_or_schedule, Kernel):
        kernel_or_schedule = Schedule(kernel_or_schedule)
    return kernel_or_schedule.lower(stage)


def convert(x: Any, to: str) -> SparseTensor:
    """Stores ``x`` (a SciPy sparse matrix, a dense array or a :class:`SparseTensor`) in the
    encoding ``to``: a preset (``"csr"``, ``"bsr(2,2)"``, ``"2:4"``, ...) or MLIR's syntax
    (``"map = (i, j) -> (j : dense, i : compressed)"``). Raises :class:`FormatError`."""
    if isinstance(x, SparseTensor):
        return x.convert(to)
    if _is_sparse(x):
        c = x.tocoo()
        return _lacuna.from_coo(
            [int(s) for s in c.shape],
            [np.asarray(c.row, dtype=np.int64).tolist(), np.asarray(c.col, dtype=np.int64).tolist()],
            c.data,
            to,
        )
    return _lacuna.from_dense(np.asarray(x), to)


def assemble(encoding: str, shape: list[int], buffers: list[Any], values: Any, validate: bool = True) -> SparseTensor:
    """A tensor from its index buffers in MLIR's storage-layout order (see
    :func:`storage_layout`) and its values, as MLIR's ``sparse_tensor.assemble``. With
    ``validate`` (default) positions, coordinates, order and uniqueness are checked; otherwise
    only counts, lengths and widths. Raises :class:`FormatError`."""
    return _lacuna.assemble(encoding, [int(s) for s in shape], list(buffers), values, validate)


def disassemble(t: SparseTensor) -> tuple[list[np.ndarray], np.ndarray]:
    """The index buffers (at their stored widths, in storage-layout order) and the values of
    ``t``, as MLIR's ``sparse_tensor.disassemble``."""
    return t.disassemble()


def storage_layout(encoding: str) -> list[str]:
    """The names of the index buffers an encoding stores, in order (``pos[1]``, ``crd[1]``,
    ...); the values come after them."""
    return _lacuna.storage_layout(encoding)



def tune(
    kernel: Kernel | str | os.PathLike,
    inputs: Mapping[str, Any],
    *,
    db: str | os.PathLike,
    budget: float = 60.0,
    strategy: str | None = None,
    trials: int | None = None,
    threads: int | None = None,
    resume: bool = False,
    report: str | os.PathLike | None = None,
    amortize: float | None = None,
    params: Mapping[str, int] | None = None,
    seed: int = 0,
    timeout: float = 30.0,
    min_seconds: float = 0.05,
    warm_start: bool = True,
    progress: bool = True,
    final_rounds: int = 3,
    finalists: int = 3,
) -> dict:
    """Searches schedules and format decompositions for ``kernel`` on ``inputs``, as
    ``lacuna tune`` does, and returns its summary (a dict: ``best`` with the decisions, the
    time, the speedup over the built-in schedule and the schedule as RON text, ``trials``,
    ``failed``, ``trials_to_95_percent``, ...).

    ``inputs`` maps buffer names to NumPy arrays, SciPy sparse matrices or file paths
    (``.mtx``, ``.tns``, ``.npy``). In-memory arguments are written to temporary files for the
    measurement workers, which run as separate processes (``python -m lacuna._tune_worker``):
    a candidate that crashes or hangs is recorded as failed and the search goes on. Every
    measurement is appended to the records database ``db`` (JSON Lines), shared with the
    command line: ``lacuna run KERNEL --tuned DB`` and ``lacuna tune apply-best`` use it, and
    ``resume=True`` continues the last run of this kernel and data. ``strategy`` is
    ``"exhaustive"``, ``"random"`` or ``"evolutionary"`` (default: exhaustive for small spaces).
    A progress bar is drawn on stderr when it is a terminal and ``progress`` is true.
    When the search stops, the ``finalists`` best candidates and the built-in schedule are
    measured again side by side ``final_rounds`` times, and the median of each one's rounds
    decides ``best`` (``final_rounds=0``: the search's single measurements decide).

    Raises ``TuneError`` for bad options, ``KernelError``/``BindError``/``DataFileError`` for
    a bad kernel or inputs, ``ExecutionError`` when the workers cannot run at all.
    """
    import json
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lacuna-tune-") as tmp:
        if isinstance(kernel, Kernel):
            kpath = os.path.join(tmp, "kernel.ron")
            with open(kpath, "w") as f:
                f.write(kernel.to_ron())
        else:
            kpath = os.fspath(kernel)
        files = []
        for name, x in inputs.items():
            if isinstance(x, (str, os.PathLike)):
                files.append((name, os.fspath(x)))
                continue
            if isinstance(x, SparseTensor):
                x = _argument(name, x, True)
                import scipy.sparse as sp

                _, shape, indptr, indices, data = x
                x = sp.csr_matrix((data, indices, indptr), shape=shape)
            if _is_sparse(x):
                import scipy.io

                path = os.path.join(tmp, f"{name}.mtx")
                scipy.io.mmwrite(path, x.tocoo(), symmetry="general", precision=17)
            else:
                path = os.path.join(tmp, f"{name}.npy")
                np.save(path, np.ascontiguousarray(np.asarray(x)))
            files.append((name, path))
        out = _lacuna.tune(
            kpath,
            files,
            os.fspath(db),
            [sys.executable, "-m", "lacuna._tune_worker"],
            budget=float(budget),
            strategy=strategy,
            trials=trials,
            threads=threads,
            resume=resume,
            report=None if report is None else os.fspath(report),
            amortize=amortize,
            params=None if params is None else {k: int(v) for k, v in params.items()},
            seed=seed,
            timeout=float(timeout),
            min_seconds=float(min_seconds),
            warm_start=warm_start,
            progress=progress,
            final_rounds=int(final_rounds),
            finalists=int(finalists),
        )
    return json.loads(out)


from . import script  # noqa: E402  (the builder uses Kernel)
