"""A fixed-lag smoother on gtsam's ``ISAM2`` that orders the Bayes tree: landmarks low, the newest state at the root.

gtsam's ``IncrementalFixedLagSmoother`` constrains the elimination order only when it
marginalises (the leaving keys first, the rest free); otherwise iSAM2 puts every key of the new
factors last, the ~60 landmarks the keyframe observes among them. Measured on the synthetic
sequence (2026-11-24): the root clique then held ~80 variables, most of them landmarks, the newest
pose sat below it, and its marginal covariance (the odometry's) needed the Bayes tree's shortcut
through landmark cliques: 6-9 ms per keyframe on the 2-core machine, more than the update itself.

:class:`RootedFixedLagSmoother` gives iSAM2 an order on every update, in groups: the leaving keys
(when some leave), the landmarks, the window's other states, the newest state (pose, velocity,
bias). Landmarks are eliminated before the states they link, as in bundle adjustment's Schur
order; the newest state forms the root clique, whose conditional has no parents, so its marginal
is read from the root alone (``marginalCovariance``: ~0.1 ms). Marginalisation is gtsam's: the
leaving keys must be leaves of the re-eliminated tree, so an update that marginalises re-eliminates
every key of the window (``extraReelimKeys``; gtsam's smoother re-eliminates the cliques between
the leaving keys and the leaves, which in a visual-inertial window is nearly all of them: the
keyframe's landmarks tie its poses together) and then calls ``ISAM2.marginalizeLeaves`` (with gtsam
4.3a1, which does not bind it, the same marginalisation through :func:`._gtsam.marginalize_leaves`). Only
the elimination order differs from gtsam's smoother: the same solution (test_covariance.py) and
the same time per update (bench/results/backend_changes.md).

The interface is the subset of ``IncrementalFixedLagSmoother`` the estimator uses: ``update``,
``calculateEstimate`` (and ``estimate``: read key by key), ``marginalCovariance``,
``setSmootherLag``, ``timestamps``, ``getFactors``, ``getLinearizationPoint``, ``getISAM2``.
"""
from __future__ import annotations

from . import _gtsam


class RootedFixedLagSmoother:
    """Fixed-lag smoother over ``ISAM2(params)`` with a lag in seconds; see the module docstring.

    ``update(graph, values, stamps, newest=())``: ``stamps`` {key: time [s]} for the new keys and
    for keys whose time is refreshed; ``newest``: the keys to keep in the root clique."""

    def __init__(self, lag: float, params):
        gtsam = _gtsam.load()
        self._g = gtsam
        self._isam = gtsam.ISAM2(params)
        self._lag = float(lag)
        self._stamps: dict[int, float] = {}
        self._newest: tuple = ()
        self._groups = None                 # the elimination groups, kept between marginalisations
        self._grouped: set = set()          # the keys in them
        self._landmark_chr = ord("l")
        self.last_result = None             # ISAM2Result of the last update (what it re-eliminated)
        self._fixed: set = set()            # keys never relinearised (:func:`._gtsam.marginalize_leaves`)

    def setSmootherLag(self, lag: float) -> None:  # noqa: N802 - gtsam's name
        self._lag = float(lag)

    def smootherLag(self) -> float:  # noqa: N802
        return self._lag

    def timestamps(self) -> dict:
        return dict(self._stamps)

    def update(self, graph=None, values=None, stamps: dict | None = None, newest=()) -> None:
        g = self._g
        graph = g.NonlinearFactorGraph() if graph is None else graph
        values = g.Values() if values is None else values
        stamps = stamps or {}
        st = self._stamps
        st.update(stamps)
        now = max(st.values()) if st else 0.0
        limit = now - self._lag
        leaving = [k for k, t in st.items() if t < limit]
        newest, previous = tuple(newest) or self._newest, self._newest
        self._newest = newest
        # elimination order: leaving keys, landmarks, the window's states, the newest state
        # (insert2 keeps a key's first group: the exceptions go in first)
        lm = self._landmark_chr
        if leaving or self._groups is None:
            groups = g.KeyGroupMap()
            base = 1 if leaving else 0
            for k in leaving:
                groups.insert2(k, 0)
            for k in newest:
                groups.insert2(k, base + 2)
            for k in st:
                groups.insert2(k, base if (k >> 56) == lm else base + 1)
            # kept for the updates until the next marginalisation, which changes the groups' numbers
            self._groups, self._grouped = (None, set()) if leaving else (groups, set(st))
        else:
            # between marginalisations the window only grows: the new keys join their group and
            # the previous newest state the window's states (the same map as built afresh, without
            # ~300 pybind calls per update)
            groups, grouped = self._groups, self._grouped
            for k in previous:
                if k not in newest and k in grouped:
                    groups.erase(k)
                    groups.insert2(k, 1)
            for k in newest:
                if k in grouped:
                    groups.erase(k)
                groups.insert2(k, 2)
                grouped.add(k)
            for k in stamps:
                if k not in grouped:
                    groups.insert2(k, 0 if (k >> 56) == lm else 1)
                    grouped.add(k)
        extra = None
        if leaving:
            extra = g.KeyList()
            for k in st:
                if k not in stamps:         # the new and refreshed keys are affected anyway
                    extra.push_back(k)
        self.last_result = _gtsam.isam2_update(self._isam, graph, values, groups, extra, self._fixed)
        if leaving:
            for k in leaving:
                del st[k]
            newest_set = set(newest)
            _gtsam.marginalize_leaves(self._isam, leaving,
                                      lambda k: 0 if (k >> 56) == lm else 2 if k in newest_set else 1, self._fixed)

    def calculateEstimate(self):  # noqa: N802
        return self._isam.calculateEstimate()

    def estimate(self) -> "KeyEstimate":
        """The estimate, read key by key (:class:`KeyEstimate`)."""
        return KeyEstimate(self._isam)

    def marginalCovariance(self, key: int):  # noqa: N802
        return self._isam.marginalCovariance(key)

    def getFactors(self):  # noqa: N802
        return self._isam.getFactorsUnsafe()

    def getLinearizationPoint(self):  # noqa: N802
        return self._isam.getLinearizationPoint()

    def getISAM2(self):  # noqa: N802
        return self._isam


class KeyEstimate:
    """The part of a ``gtsam.Values`` interface a keyframe reads (``exists``, ``atPose3``,
    ``atPoint3``, ``atVector``, ``atConstantBias``), each value computed on demand by
    ``ISAM2.calculateEstimate<T>(key)``: the same retraction of the same linearisation point by the
    same delta as ``calculateEstimate()`` (the same numbers to the last bit), without building the
    value of every variable in the window (a keyframe reads ~100 of ~170). The first read of a
    keyframe pays the delta's back-substitution, as ``calculateEstimate()`` does; the saving is
    small (estimate and reads 0.18-0.20 ms per keyframe either way on the 2-core machine)."""

    __slots__ = ("exists", "atPose3", "atPoint3", "atVector", "atConstantBias")

    def __init__(self, isam):
        self.exists = isam.valueExists
        self.atPose3 = isam.calculateEstimatePose3
        self.atPoint3 = isam.calculateEstimatePoint3
        self.atVector = isam.calculateEstimateVector
        self.atConstantBias = isam.calculateEstimateConstantBias
