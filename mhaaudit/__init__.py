"""mhaaudit: audit transformer features against the assumptions of the memorisation-capacity
theory of multi-head attention (Mahdavi, Liao, Thrampoulidis, ICLR 2024).

The public API is imported lazily so that ``import mhaaudit`` stays cheap.
"""

import importlib
import warnings

from ._version import __version__
from .notebook import quiet_tqdm_fallback as _quiet_tqdm_fallback

_quiet_tqdm_fallback()  # in a Jupyter kernel without ipywidgets only (mhaaudit.notebook)

_EXPORTS = {
    "audit": "mhaaudit.auditing",
    "AuditResult": "mhaaudit.auditing",
    "check_features": "mhaaudit.auditing",
    "capture_features": "mhaaudit.auditing",
    "plan_probes": "mhaaudit.auditing",
    "audit_series": "mhaaudit.series",
    "SeriesResult": "mhaaudit.series",
    "estimate_kruskal_rank": "mhaaudit.estimation",
    "KruskalResult": "mhaaudit.estimation",
    "ModelRequest": "mhaaudit.request",
    "DataRequest": "mhaaudit.request",
    "Settings": "mhaaudit.settings",
    "subset_test": "mhaaudit.kruskal",
    "kruskal_sweep": "mhaaudit.kruskal",
    "exact_kruskal_rank": "mhaaudit.kruskal",
    "babel_floor": "mhaaudit.kruskal",
    "set_stats": "mhaaudit.kruskal",
    "draw_decisions": "mhaaudit.kruskal",
    "RankRule": "mhaaudit.numerics",
    "svd_rank": "mhaaudit.numerics",
    "assumption_1": "mhaaudit.checks",
    "assumption_2": "mhaaudit.checks",
    "assumption_3": "mhaaudit.checks",
    "general_position": "mhaaudit.checks",
    "context_ranks": "mhaaudit.checks",
    "FeatureSet": "mhaaudit.features",
    "StreamingReducer": "mhaaudit.features",
    "reduce_tokens": "mhaaudit.features",
    "load_model": "mhaaudit.models",
    "RandomAttention": "mhaaudit.models",
    "image_source": "mhaaudit.sources",
    "text_source": "mhaaudit.sources",
    "theorem1_bound": "mhaaudit.capacity",
    "capacity_audit": "mhaaudit.capacity",
    "run_memorize_grid": "mhaaudit.memorize",
    "reproduce_paper": "mhaaudit.reproduce",
    "MhaauditError": "mhaaudit.errors",
}

# Names kept for one release after they left the public API: (module, what to use instead).
_DEPRECATED = {
    "memorization_certificate": ("mhaaudit.capacity.oracle", "mhaaudit.capacity.certify_head_prefixes"),
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        # Importing the submodule mhaaudit.audit binds the package's name ``audit`` to that module,
        # shadowing the function of the same name; bind the export itself, once.
        globals()[name] = value
        return value
    if name in _DEPRECATED:
        module, instead = _DEPRECATED[name]
        warnings.warn(
            f"mhaaudit.{name} is deprecated and will be removed in the next release; it is the reference "
            f"implementation the tests use ({module}.{name}); use {instead}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'mhaaudit' has no attribute {name!r}")
