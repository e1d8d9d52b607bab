"""The smoother of ``solver = 'isam2'`` (mono's default): gtsam's iSAM2 over the window, with gtsam's
visual factors.

:class:`Isam2Smoother` is what the estimator holds (the interface both smoothers share, see
:mod:`.smoother`): it builds the visual factors (``GenericStereoFactor3D`` with the normalised stereo
calibration ``Cal3_S2Stereo(1, 1, 0, 0, 0, baseline)``, or ``GenericProjectionFactorCal3_S2`` for a mono
observation or a right one of a pair that is not rectified; isotropic ``pixel_sigma / fx`` in
normalised coordinates, Huber ``huber_k``), keeps a new landmark's value and weak prior and every
observed landmark's stamp for the next update, and runs one of two fixed-lag smoothers on
``ISAM2`` (:func:`isam2_params`): :class:`RootedFixedLagSmoother` (``rooted_smoother``, the default)
or gtsam's ``IncrementalFixedLagSmoother``. The factors are never removed from the smoother
(removing factors while it marginalises is a known gtsam failure, borglab/gtsam#2479).

gtsam's ``IncrementalFixedLagSmoother`` constrains the elimination order only when it marginalises
(the leaving keys first, the rest free); otherwise iSAM2 puts every key of the new factors last, the
landmarks the keyframe observes among them: the root clique then holds mostly landmarks, the newest
pose sits below it, and its marginal covariance (the odometry's) needs the Bayes tree's shortcut
through landmark cliques, which costs more than the update itself.

:class:`RootedFixedLagSmoother` gives iSAM2 an order on every update, in groups: the leaving keys
(when some leave), the landmarks, the window's other states, the newest state (pose, velocity,
bias). Landmarks are eliminated before the states they link, as in bundle adjustment's Schur
order; the newest state forms the root clique, whose conditional has no parents, so its marginal
is read from the root alone (``marginalCovariance``). Marginalisation is gtsam's: the leaving keys
must be leaves of the re-eliminated tree, so an update that marginalises re-eliminates every key of
the window (``extraReelimKeys``; gtsam's smoother re-eliminates the cliques between the leaving keys
and the leaves, which in a visual-inertial window is nearly all of them: the keyframe's landmarks
tie its poses together) and then calls ``ISAM2.marginalizeLeaves`` (where gtsam does not bind it, the same
marginalisation through :func:`._gtsam.marginalize_leaves`). Only the elimination order
differs from gtsam's smoother: the same solution (test_covariance.py). Its interface is the subset of
``IncrementalFixedLagSmoother`` the estimator uses: ``update``, ``calculateEstimate`` (and
``estimate``: read key by key), ``marginalCovariance``, ``setSmootherLag``, ``timestamps``,
``getFactors``, ``getLinearizationPoint``, ``getISAM2``.
"""
from __future__ import annotations

import math

import numpy as np

from ._gtsam import isam2_update, load as load_gtsam, marginalize_leaves
from .config import BackendConfig
from .rig import CameraRig


def isam2_params(config: BackendConfig):
    """gtsam's ``ISAM2Params`` of the estimator: relinearisation thresholds per variable type (the key's
    character; landmarks have their own), ``relinearize_skip``, ``partial_relinearization_check``."""
    gtsam = load_gtsam()

    p = gtsam.ISAM2Params()
    th = gtsam.ISAM2ThresholdMap()
    for c, dim in (("x", 6), ("v", 3), ("b", 6)):
        th.insert((c, np.full(dim, config.relinearize_threshold)))
    th.insert(("l", np.full(3, config.relinearize_threshold_landmarks)))
    p.setRelinearizeThreshold(th)
    p.relinearizeSkip = config.relinearize_skip
    p.enablePartialRelinearizationCheck = config.partial_relinearization_check
    # the smoother removes the marginalised factors every keyframe: reuse their slots instead of
    # growing the factor list with empty ones (gtsam's advice for fixed-lag smoothing; the same results)
    p.findUnusedFactorSlots = True
    return p


class Isam2Smoother:
    """See the module docstring: the estimator's smoother interface (:mod:`.smoother`) on gtsam's iSAM2.
    ``fixed_lag``: the smoother it runs (:class:`RootedFixedLagSmoother` or gtsam's
    ``IncrementalFixedLagSmoother``); ``removed_landmarks`` stays empty (gtsam keeps a landmark whose
    states leave, coupled to the remaining ones)."""

    removed_landmarks: frozenset = frozenset()

    def __init__(self, lag: float, config: BackendConfig, rig: CameraRig):
        gtsam = load_gtsam()

        self._g = gtsam
        self.rooted = config.rooted_smoother
        params = isam2_params(config)
        self.fixed_lag = RootedFixedLagSmoother(lag, params) if self.rooted else \
            gtsam.IncrementalFixedLagSmoother(lag, params)
        huber = gtsam.noiseModel.mEstimator.Huber.Create(config.huber_k)
        self._noise_mono = gtsam.noiseModel.Robust.Create(huber, gtsam.noiseModel.Isotropic.Sigma(2, rig.sigma))
        self._noise_stereo = gtsam.noiseModel.Robust.Create(huber, gtsam.noiseModel.Isotropic.Sigma(3, rig.sigma))
        self._K_mono = gtsam.Cal3_S2(1.0, 1.0, 0.0, 0.0, 0.0)
        self._K_stereo = gtsam.Cal3_S2Stereo(1.0, 1.0, 0.0, 0.0, 0.0, rig.baseline) if rig.cam1 is not None else None
        self._pose_bs0 = gtsam.Pose3(rig.T_BS0)
        self._pose_bs1 = gtsam.Pose3(rig.T_BS1) if rig.cam1 is not None else None
        self._prior_noise: dict = {}                # prior sigma -> noise model
        self._graph = gtsam.NonlinearFactorGraph()  # the visual factors for the next update
        self._values = gtsam.Values()               # the new landmarks' values
        self._observed: dict = {}                   # the landmarks they observe, in order (stamped at the update)

    # ------------------------------------------------------------------ visual input
    def add_landmark(self, key: int, p, prior_sigma: float = 0.0) -> None:
        """A new landmark at ``p`` (world), with an isotropic prior there where ``prior_sigma`` > 0 (a weak
        prior keeps a landmark whose factors all drop out, behind a camera, from making the system
        indeterminate); it joins the smoother at the next :meth:`update`."""
        g = self._g
        pt = g.Point3(*p)
        self._values.insert(key, pt)
        self._observed[key] = None
        if prior_sigma > 0:
            noise = self._prior_noise.get(prior_sigma)
            if noise is None:
                noise = self._prior_noise[prior_sigma] = g.noiseModel.Isotropic.Sigma(3, prior_sigma)
            self._graph.add(g.PriorFactorPoint3(key, pt, noise))

    def obs_adder(self):
        """``add_obs(X, L, xy, xr_rect, xr_raw)``: one observation of landmark L from keyframe pose X: a
        stereo factor where the rectified right x is known, else a projection factor (and one for the
        raw right ray if given). The constructors, noise models and calibrations are bound once."""
        g = self._g
        add, isfinite, observed = self._graph.add, math.isfinite, self._observed
        Stereo, SP2, Proj = g.GenericStereoFactor3D, g.StereoPoint2, g.GenericProjectionFactorCal3_S2
        n_s, K_s, n_m, K_m, bs0, bs1 = self._noise_stereo, self._K_stereo, self._noise_mono, self._K_mono, \
            self._pose_bs0, self._pose_bs1

        def add_obs(X: int, L: int, xy, xr_rect, xr_raw) -> None:
            observed[L] = None
            if xr_rect is not None and isfinite(xr_rect):
                add(Stereo(SP2(xy[0], xr_rect, xy[1]), n_s, X, L, K_s, bs0))
                return
            add(Proj((xy[0], xy[1]), n_m, X, L, K_m, bs0))
            if xr_raw is not None and isfinite(xr_raw[0]):
                add(Proj((xr_raw[0], xr_raw[1]), n_m, X, L, K_m, bs1))

        return add_obs

    # ------------------------------------------------------------------ update, outputs
    def update(self, graph=None, values=None, stamps: dict | None = None, newest=()) -> None:
        """New state factors and values with their stamps [s] (``newest``: the new state's keys), and the
        visual input given since the last update, whose landmarks take the newest stamp; then the update
        (without arguments: one more iteration)."""
        if graph is None and values is None and not stamps and not self._observed:
            self.fixed_lag.update()
            return
        g = self._g
        graph = g.NonlinearFactorGraph() if graph is None else graph
        values = g.Values() if values is None else values
        stamps = dict(stamps or {})
        if self._observed:
            graph.push_back(self._graph)
            values.insert(self._values)
            now = max(stamps.values()) if stamps else max(self.timestamps().values())
            for key in self._observed:
                stamps[key] = now
            self._graph, self._values, self._observed = g.NonlinearFactorGraph(), g.Values(), {}
        if self.rooted:
            self.fixed_lag.update(graph, values, stamps, newest)
        else:
            self.fixed_lag.update(graph, values, stamps)

    def estimate(self) -> "KeyEstimate":
        return self.fixed_lag.estimate() if self.rooted else KeyEstimate.of_values(self.fixed_lag.calculateEstimate())

    def calculateEstimate(self):  # noqa: N802 - gtsam's name
        return self.fixed_lag.calculateEstimate()

    def setSmootherLag(self, lag: float) -> None:  # noqa: N802 - gtsam's name
        self.fixed_lag.setSmootherLag(lag)

    def marginalCovariance(self, key: int):  # noqa: N802
        return self.fixed_lag.marginalCovariance(key)

    def timestamps(self) -> dict:
        return dict(self.fixed_lag.timestamps())


class RootedFixedLagSmoother:
    """Fixed-lag smoother over ``ISAM2(params)`` with a lag in seconds; see the module docstring.

    ``update(graph, values, stamps, newest=())``: ``stamps`` {key: time [s]} for the new keys and
    for keys whose time is refreshed; ``newest``: the keys to keep in the root clique."""

    def __init__(self, lag: float, params):
        gtsam = load_gtsam()

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
            # a pybind call per key of the window)
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
        self.last_result = isam2_update(self._isam, graph, values, groups, extra, self._fixed)
        if leaving:
            for k in leaving:
                del st[k]
            newest_set = set(newest)
            marginalize_leaves(self._isam, leaving,
                                      lambda k: 0 if (k >> 56) == lm else 2 if k in newest_set else 1, self._fixed)

    def calculateEstimate(self):  # noqa: N802
        return self._isam.calculateEstimate()

    def estimate(self) -> "KeyEstimate":
        """The estimate, read key by key (:class:`KeyEstimate`)."""
        return KeyEstimate.of_isam(self._isam)

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
    ``atPoint3``, ``atVector``, ``atConstantBias``, and :meth:`points`). :meth:`of_isam`: each value
    computed on demand by ``ISAM2.calculateEstimate<T>(key)``: the same retraction of the same
    linearisation point by the same delta as ``calculateEstimate()`` (the same numbers to the last
    bit), without building the value of every variable in the window (a keyframe reads most, not
    all); :meth:`of_values`: read from a ``gtsam.Values``."""

    __slots__ = ("exists", "atPose3", "atPoint3", "atVector", "atConstantBias")

    def __init__(self, exists, at_pose3, at_point3, at_vector, at_constant_bias):
        self.exists, self.atPose3, self.atPoint3 = exists, at_pose3, at_point3
        self.atVector, self.atConstantBias = at_vector, at_constant_bias

    @classmethod
    def of_isam(cls, isam) -> "KeyEstimate":
        return cls(isam.valueExists, isam.calculateEstimatePose3, isam.calculateEstimatePoint3,
                   isam.calculateEstimateVector, isam.calculateEstimateConstantBias)

    @classmethod
    def of_values(cls, values) -> "KeyEstimate":
        return cls(values.exists, values.atPose3, values.atPoint3, values.atVector, values.atConstantBias)

    def points(self, keys: list) -> list:
        """:meth:`atPoint3` of each key, as arrays."""
        return [np.asarray(self.atPoint3(k)) for k in keys]
