"""The rank rule (which singular values count as non-zero) and the setting rank computations run in.

The rule is part of every result. The default is the paper's convention, the one
``torch.linalg.matrix_rank`` uses: singular values above ``sigma_max * max(rows, cols) * eps``
count, with ``eps`` the machine epsilon of the features' *own* dtype (float32 for model
activations). Every rank computation runs in float64, never in TF32 or reduced precision.

``numerics`` is the setting those computations run in: subnormals flushed to zero, TF32 off for
every matrix product and convolution (``tf32_off``), and, optionally, fewer threads. Nothing here is an estimate; this
module only states the rule.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass

import torch

from .. import validate
from ..errors import InputError, Param
from .convert import torch_dtype_of
from .pow2 import ldexp
from .subnormals import _flushing, subnormals_kept
from .threads import intra_op_threads

__all__ = ["RankRule", "numerics", "subnormals_kept", "tf32_is_off", "tf32_off", "with_numerics"]

_STATE = threading.local()  # how deep each thread is inside ``numerics`` (flushing is per thread)


def _depth() -> int:
    return getattr(_STATE, "depth", 0)


@contextlib.contextmanager
def numerics(threads: int | None = None):
    """The setting for rank computations: subnormals flushed to zero, optionally fewer threads.

    Eigen- and singular-value routines on nearly rank-deficient matrices (T copies of one [CLS]
    vector, say) can spend most of their time in subnormal arithmetic; values below 2.2e-308 lie
    far below any rank tolerance once the data are rescaled (``numerics.scale``, which runs with
    ``subnormals_kept``), so no decision changes. On shared cores, multi-threaded LAPACK calls on mid-sized matrices
    can be
    erratic; ``threads=1`` avoids that where it does not cost. Flushing is a per-thread CPU
    setting: worker threads enter this context themselves. On exit every setting is what it was on
    entry (a thread that flushed before still does). Full float32 precision
    (:func:`tf32_off`) is a process-wide setting, made once at a computation's entry point
    (:func:`with_numerics`), not here where threads would save and restore it concurrently.
    """
    depth = _depth()
    # turned off after only if it was off before: a caller's own flushing is left as it was
    flushed = depth == 0 and not _flushing() and torch.set_flush_denormal(True)
    _STATE.depth = depth + 1
    try:
        with intra_op_threads(threads):
            yield
    finally:
        _STATE.depth = depth
        if flushed:
            torch.set_flush_denormal(False)


# Where torch has the per-backend precision settings (2.9 and later), they are the ones to set:
# reading a legacy flag after one of them was set raises, and cuDNN convolutions (ViT's patch
# embedding) default to TF32 there.
_FP32_PRECISION = (
    ("cuda", "matmul"),
    ("cudnn", "conv"),
    ("cudnn", "rnn"),
    ("mkldnn", "matmul"),
    ("mkldnn", "conv"),
    ("mkldnn", "rnn"),
)


def _precision_settings() -> list:
    found = []
    for backend, op in _FP32_PRECISION:
        obj = getattr(getattr(torch.backends, backend, None), op, None)
        if obj is not None and isinstance(getattr(obj, "fp32_precision", None), str):
            found.append(obj)
    return found


@contextlib.contextmanager
def tf32_off():
    """Float32 arithmetic at full precision inside, on every backend, and the settings restored
    after (a process-wide setting): no TF32 in CUDA matmuls and cuDNN convolutions, no bf16/TF32
    in oneDNN, ``torch.get_float32_matmul_precision() == "highest"``. A rank decision, and the
    forward pass that feeds one, never runs in reduced precision. Harmless without a GPU."""
    settings = _precision_settings()
    saved = (_matmul_precision(), [obj.fp32_precision for obj in settings])
    legacy = None if settings else [(f, f.allow_tf32) for f in (torch.backends.cuda.matmul, torch.backends.cudnn)]
    try:
        torch.set_float32_matmul_precision("highest")
        for obj in settings:
            obj.fp32_precision = "ieee"
        for f, _ in legacy or ():  # pragma: no cover - torch < 2.9
            f.allow_tf32 = False
        yield
    finally:
        if saved[0] is not None:
            torch.set_float32_matmul_precision(saved[0])
        for obj, old in zip(settings, saved[1], strict=False):
            obj.fp32_precision = old
        for f, old in legacy or ():  # pragma: no cover
            f.allow_tf32 = old


def _matmul_precision() -> str | None:
    """``torch.get_float32_matmul_precision()``, or None where it has none to give: torch 2.9 and
    later raise when the per-backend settings were set to differing values (a caller's
    ``torch.backends.cuda.matmul.fp32_precision = "tf32"``); those settings are then what
    :func:`tf32_off` saves and restores."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


def tf32_is_off() -> bool:
    """Whether float32 matrix products run at full precision now (what :func:`tf32_off` sets)."""
    settings = _precision_settings()
    if settings:
        return _matmul_precision() == "highest" and all(obj.fp32_precision == "ieee" for obj in settings)
    return not torch.backends.cuda.matmul.allow_tf32  # pragma: no cover - torch < 2.9


def with_numerics(threads: int | None = None):
    """Decorator form of ``numerics`` for a rank computation's entry point, which also runs it at
    full float32 precision (:func:`tf32_off`)."""

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with tf32_off(), numerics(threads):
                return fn(*args, **kwargs)

        return inner

    return wrap


@dataclass(frozen=True)
class RankRule:
    """Which singular values count as non-zero.

    ``tol = max(atol, rtol * sigma_max)``; with neither given, ``rtol = max(rows, cols) * eps``
    (``eps`` of the features' dtype) and ``atol = 0``; with only ``atol > 0`` given, ``rtol = 0``.
    These are ``torch.linalg.matrix_rank``'s semantics. :meth:`for_dtype` builds the rule for a dtype.

    Raises:
        InputError: when ``rtol`` or ``atol`` is negative or not a number, ``rtol`` is infinite, or ``eps`` is not
            a finite number > 0 (:meth:`for_dtype` also refuses an infinite ``atol``).
    """

    rtol: float | None = None
    atol: float | None = None
    eps: float = float(torch.finfo(torch.float32).eps)
    dtype: str = "float32"

    def __post_init__(self):
        # a negative or NaN tolerance would count every singular value, or none, as non-zero without a word;
        # an infinite atol stays possible (in_units of a huge atol: tol = inf means what it says), an infinite rtol
        # not (rtol * sigma_max = inf * 0 is NaN for a zero matrix)
        object.__setattr__(self, "rtol", validate.tolerance(Param("rtol"), self.rtol))
        object.__setattr__(self, "atol", validate.tolerance(Param("atol"), self.atol, infinite=True))
        eps = validate.tolerance(Param("eps"), self.eps)
        if not eps:  # None or 0
            raise InputError(Param("eps") + f" must be a finite number > 0, got {self.eps!r}", value=self.eps)
        object.__setattr__(self, "eps", eps)

    @classmethod
    def for_dtype(cls, dtype, rtol: float | None = None, atol: float | None = None) -> RankRule:
        """The rule for features of ``dtype`` (its eps; float64's for a non-floating dtype), with ``rtol`` /
        ``atol`` when given.

        Args:
            dtype (torch.dtype | numpy.dtype | str): the features' dtype: a torch or NumPy dtype or type, or its
                name (``"float32"``).
            rtol: the relative tolerance (None: the paper's, ``max(rows, cols) * eps``).
            atol: the absolute tolerance (None: none).

        Raises:
            InputError: when ``dtype`` names no dtype, or ``rtol`` or ``atol`` is not a finite number >= 0.
        """
        atol = validate.tolerance(Param("atol"), atol)  # finite here; the constructor checks the rest
        dt = _torch_dtype(dtype)
        if not dt.is_floating_point:
            dt = torch.float64
        return cls(rtol=rtol, atol=atol, eps=float(torch.finfo(dt).eps), dtype=str(dt).replace("torch.", ""))

    @staticmethod
    def checked(rule) -> RankRule:
        """``rule`` when it is a RankRule.

        Raises:
            InputError: when it is not (None is the paper's rule only where a caller says so: :meth:`given`).
        """
        if not isinstance(rule, RankRule):
            raise InputError(
                Param("rule")
                + f" {rule!r}: not a RankRule (give RankRule.for_dtype(...), or None for the paper's rule)"
            )
        return rule

    @classmethod
    def given(cls, rule, dtype) -> RankRule:
        """``rule`` as a caller gave it: a RankRule as it is, None as :meth:`for_dtype` of ``dtype`` (the paper's).

        Raises:
            InputError: when ``rule`` is neither.
        """
        return cls.for_dtype(dtype) if rule is None else cls.checked(rule)

    def rtol_for(self, rows: int, cols: int) -> float:
        """The relative tolerance for a rows x cols matrix: ``rtol``, else 0 when only ``atol > 0`` was given,
        else ``max(rows, cols) * eps``."""
        if self.rtol is not None:
            return float(self.rtol)
        if self.atol is not None and self.atol > 0:
            return 0.0
        return max(rows, cols) * self.eps

    @property
    def atol_value(self) -> float:
        """The absolute tolerance, in the data's units (0 when none was given)."""
        return float(self.atol or 0.0)

    def tol(self, sigma_max: torch.Tensor | float, rows: int, cols: int):
        """The tolerance for a rows x cols matrix with largest singular value ``sigma_max``."""
        r = self.rtol_for(rows, cols)
        if isinstance(sigma_max, torch.Tensor):
            return torch.clamp(sigma_max * r, min=self.atol_value)
        return max(self.atol_value, r * float(sigma_max))

    def in_units(self, exponent: int) -> RankRule:
        """The same rule for data divided by ``2**exponent``: the absolute tolerance is divided with
        them (``rtol`` stays 0 where only ``atol`` was given, even if the quotient underflows)."""
        if not exponent or not self.atol:
            return self
        rtol = 0.0 if self.rtol is None else self.rtol
        return RankRule(rtol=rtol, atol=ldexp(float(self.atol), -exponent), eps=self.eps, dtype=self.dtype)

    def describe(self) -> str:
        """The rule in one line for reports, e.g. ``sigma > max(atol = 0, rtol = 1e-06 * sigma_max), ...``."""
        if self.rtol is None and not (self.atol and self.atol > 0):
            return (
                f"sigma > sigma_max * max(rows, cols) * eps({self.dtype}) with eps = {self.eps:.3g} "
                "(torch.linalg.matrix_rank's default), computed in float64"
            )
        return (
            f"sigma > max(atol = {self.atol_value:.3g}, rtol = {self.rtol_for(1, 1):.3g} * sigma_max), "
            "computed in float64"
        )

    def as_dict(self) -> dict:
        """``rtol``, ``atol``, ``eps``, ``dtype`` and the ``rule`` in words, for the JSON ``meta``."""
        return {"rtol": self.rtol, "atol": self.atol, "eps": self.eps, "dtype": self.dtype, "rule": self.describe()}


def _torch_dtype(dtype) -> torch.dtype:
    """The torch dtype of a torch dtype, a torch dtype's name (``"bfloat16"``), or a NumPy dtype, type or name.

    Raises:
        InputError: when ``dtype`` is none of them.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and isinstance(named := getattr(torch, dtype, None), torch.dtype):
        return named
    if dtype is not None:  # (NumPy reads None as float64)
        with contextlib.suppress(TypeError):
            return torch_dtype_of(dtype)
    raise InputError(
        Param("dtype") + f" {dtype!r}: not a dtype (give a torch or NumPy dtype, or a name such as 'float32')"
    )
