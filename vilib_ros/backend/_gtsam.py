"""gtsam, imported in one place, and the calls whose Python bindings differ between the releases the backend runs on.

The backend needs ``gtsam >= 4.3a1``: 4.3 where it is built (CPython 3.11 and later), 4.3a1 where
nothing later is (CPython 3.10: a Jetson with JetPack 6, Ubuntu 22.04). Their C++ is the same where
the backend uses it; their bindings differ in:

* ``ISAM2.update``: 4.3 takes ``None`` for an absent key list, 4.3a1 only lists; an empty list means
  the same to gtsam (it loops over the keys given), so the backend passes empty lists (:func:`isam2_update`).
* ``ISAM2.marginalizeLeaves``: not bound in 4.3a1. :func:`marginalize_leaves` does the same
  marginalisation there through calls that are bound.
* ``IncrementalFixedLagSmoother.setSmootherLag``: not bound in 4.3a1 (:func:`has_set_smoother_lag`);
  the estimator's batch marginalisation needs it where ``rooted_smoother`` is off, and says so.

Everything else the backend, its tests and the evaluation call (``CombinedImuFactor``,
``PreintegrationCombinedParams``, ``GenericStereoFactor3D``, the noise models, ``ISAM2`` and its typed
``calculateEstimate*`` reads, ``IncrementalFixedLagSmoother`` in ``gtsam`` itself) is bound alike in both.
"""
from __future__ import annotations

from ..dependencies import require

_LANDMARK_CHR = ord("l")
_module = None


def load():
    """The gtsam module; :class:`vilib_ros.dependencies.MissingDependency` (one line naming the
    package and the extra) where it does not import."""
    global _module
    if _module is None:
        _module = require("gtsam", "the backend")
    return _module


def has_set_smoother_lag() -> bool:
    """Whether this gtsam binds ``IncrementalFixedLagSmoother.setSmootherLag`` (4.3 does, 4.3a1 does not)."""
    return hasattr(load().IncrementalFixedLagSmoother, "setSmootherLag")


def _key_list(g, keys):
    kl = g.KeyList()
    for k in keys:
        kl.push_back(k)
    return kl


def isam2_update(isam, graph, values, constrained, extra_reelim=None, fixed=()):
    """``isam.update(graph, values, [], constrained, noRelinKeys, extraReelimKeys, False)``; ``fixed``
    (:func:`marginalize_leaves`' keys, empty with gtsam 4.3) are the ``noRelinKeys``. An absent key list
    is an empty one (4.3a1 takes no ``None``; gtsam treats an empty list as none)."""
    g = load()
    return isam.update(graph, values, [], constrained, _key_list(g, fixed),
                       g.KeyList() if extra_reelim is None else extra_reelim, False)


def marginalize_leaves(isam, keys, group_of, fixed: set) -> None:
    """Marginalise ``keys`` out of ``isam``: ``ISAM2.marginalizeLeaves`` where gtsam binds it.

    Elsewhere (4.3a1) the same marginalisation in one ``update``, as ``marginalizeLeaves`` does it:
    the factors on ``keys`` are linearised at the linearisation point, ``keys`` eliminated from them
    (landmarks first), the marginal on the keys they share with the rest enters as a
    ``LinearContainerFactor`` without a linearisation point, the factors on ``keys`` leave, and iSAM2
    drops the keys no factor is left on; nothing is relinearised in that update. The marginal's keys
    join ``fixed``: never relinearised again (gtsam's ``fixedVariables``, which the bindings do not
    reach: :func:`isam2_update` passes them as ``noRelinKeys``). ``group_of(key)``: the elimination
    group of each remaining key in that update."""
    if hasattr(isam, "marginalizeLeaves"):
        isam.marginalizeLeaves(_key_list(load(), keys))
    else:
        marginalize_by_update(isam, keys, group_of, fixed)


def marginalize_by_update(isam, keys, group_of, fixed: set) -> None:
    """:func:`marginalize_leaves` without ``ISAM2.marginalizeLeaves`` (see there)."""
    g = load()
    leaving = set(keys)
    index = isam.getVariableIndex()
    slots = sorted({int(i) for k in leaving for i in index.at(k)})
    factors = isam.getFactorsUnsafe()
    theta = isam.getLinearizationPoint()
    linear = g.GaussianFactorGraph()
    for i in slots:
        linear.push_back(factors.at(i).linearize(theta))
    order = g.Ordering()
    for k in sorted(leaving, key=lambda k: (k >> 56) != _LANDMARK_CHR):
        order.push_back(k)
    _, marginal = linear.eliminatePartialSequential(order)
    new = g.NonlinearFactorGraph()
    for j in range(marginal.size()):
        f = marginal.at(j)
        if f is not None and f.size() > 0:
            new.push_back(g.LinearContainerFactor(f))
            fixed.update(f.keys())
    fixed -= leaving
    remaining = [k for k in theta.keys() if k not in leaving]
    groups = g.KeyGroupMap()
    for k in remaining:
        groups.insert2(k, group_of(k))
    isam.update(new, g.Values(), slots, groups, _key_list(g, remaining), g.KeyList(), False)
