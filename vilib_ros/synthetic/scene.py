"""A textured room with boxes, rendered with exact perspective and bilinear texture sampling.

The scene is a set of textured rectangles (``Quad``): the 6 faces of a room (default 8 x 6 x 3 m,
world z up, floor at z = 0, centred on x = y = 0) and the faces of a few boxes on the floor.

Rendering (``render``), per visible quad:

* back-face culling (walls face inwards, box faces outwards);
* the quad is clipped against the near plane in camera space only to find its screen bounding
  box; inside it every pixel gets the exact ray/plane intersection (the inverse of the
  plane-induced homography): texture coordinates ``(s, t)`` and camera depth ``z``, which is an
  affine function of the pixel in inverse form (``1/z = a u + b v + c``). Pixels whose ray meets
  the plane behind the near plane or outside the rectangle are masked, so planes that cross the
  camera plane never produce garbage;
* the texture is sampled with ``cv2.warpPerspective`` (INTER_LINEAR, i.e. bilinear) through the
  plane-induced homography, from a mip level chosen so that one texel is about one pixel;
* composition with a z-buffer.

Through a lens (``render_rays``): every output pixel has its own viewing ray (a :class:`RayGrid`,
the camera model's undistortion of the pixel grid), and the same exact ray/plane intersection gives
its texture coordinates and depth; the texture is sampled bilinearly at them (``cv2.remap``). No
pinhole image is rendered and warped: a distorted image is as sharp as the texture where the lens
compresses the view.

``raycast`` is an independent per-ray reference (ray/rectangle intersection in the world frame)
used for exact depth of arbitrary (sub-pixel) points and for ground-truth flow.

Textures are natural images from ``skimage.data`` (bundled with scikit-image, no download).
Without scikit-image, procedural textures are used: fractal value noise plus random rectangles
and disks (plenty of corners), generated from the seed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import cv2
import numpy as np

log = logging.getLogger(__name__)

NEAR = 0.02  # metres
TEXEL = 0.005  # metres per texel of the room textures (about one pixel at 2.3 m)
MIP_LEVELS = 4

_SKIMAGE_NAMES = ("camera", "astronaut", "brick", "coffee", "chelsea", "coins", "grass", "gravel", "moon",
                  "hubble_deep_field", "immunohistochemistry", "retina", "rocket", "cell", "page")


@dataclass
class Quad:
    """Rectangle ``X(s, t) = origin + s * U + t * V``, ``s, t`` in [0, 1]; visible from ``normal``'s side."""

    origin: np.ndarray
    U: np.ndarray
    V: np.ndarray
    texture: np.ndarray  # uint8 (Ht, Wt); texel (a, b) centre at s = (a + .5) / Wt, t = (b + .5) / Ht
    name: str = ""
    mips: list = field(default_factory=list)

    def __post_init__(self):
        self.origin = np.asarray(self.origin, float)
        self.U = np.asarray(self.U, float)
        self.V = np.asarray(self.V, float)
        n = np.cross(self.U, self.V)
        self.normal = n / np.linalg.norm(n)
        self.mips = [self.texture]
        for _ in range(MIP_LEVELS - 1):
            t = self.mips[-1]
            if min(t.shape) < 16:
                break
            self.mips.append(cv2.pyrDown(t))

    @property
    def corners(self) -> np.ndarray:
        o, U, V = self.origin, self.U, self.V
        return np.array([o, o + U, o + U + V, o + V])


# ----------------------------------------------------------------------------- textures


def _normalise(img: np.ndarray, lo: float = 25.0, hi: float = 230.0) -> np.ndarray:
    """Stretch to [lo, hi] (1st/99th percentile) so gain/offset changes stay within uint8."""
    f = img.astype(np.float32)
    p1, p99 = np.percentile(f, (1, 99))
    f = (f - p1) / max(p99 - p1, 1.0)
    return np.clip(lo + f * (hi - lo), 0, 255).astype(np.uint8)


def load_source_images(rng: np.random.Generator, use_skimage: bool = True) -> list[np.ndarray]:
    imgs: list[np.ndarray] = []
    if use_skimage:
        try:
            import skimage.data as skd

            for n in _SKIMAGE_NAMES:
                try:
                    im = np.asarray(getattr(skd, n)())
                except Exception:  # dataset needs a download or is missing: skip
                    continue
                if im.ndim == 3:
                    im = cv2.cvtColor(im[..., :3].astype(np.uint8), cv2.COLOR_RGB2GRAY)
                imgs.append(_normalise(im))
        except ImportError:
            log.warning("scikit-image not installed: synthetic scenes use procedural textures")
    if len(imgs) < 4:
        imgs = [procedural_texture(rng, 512, 512) for _ in range(12)]
    return imgs


def procedural_texture(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Fractal value noise plus random rectangles and disks (corners for the detector)."""
    acc = np.zeros((h, w), np.float32)
    amp, cell = 1.0, 64
    while cell >= 2:
        small = rng.random((h // cell + 2, w // cell + 2)).astype(np.float32)
        acc += amp * cv2.resize(small, (w + 2 * cell, h + 2 * cell), interpolation=cv2.INTER_CUBIC)[cell:cell + h, cell:cell + w]
        amp *= 0.6
        cell //= 2
    img = (acc - acc.min()) / max(float(np.ptp(acc)), 1e-6) * 255
    img = img.astype(np.uint8)
    for _ in range(40):
        c = int(rng.integers(0, 256))
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            cv2.rectangle(img, (x0, y0), (x0 + int(rng.integers(8, 80)), y0 + int(rng.integers(8, 80))), c, -1)
        else:
            cv2.circle(img, (x0, y0), int(rng.integers(4, 40)), c, -1)
    return _normalise(img)


def _augment(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    k = int(rng.integers(0, 4))
    img = np.rot90(img, k)
    if rng.random() < 0.5:
        img = img[:, ::-1]
    return np.ascontiguousarray(img)


class _Deck:
    """Draws source images in shuffled rounds, so one view rarely shows the same image twice."""

    def __init__(self, sources: list[np.ndarray], rng: np.random.Generator):
        self.sources, self.rng, self.order = sources, rng, []

    def draw(self) -> np.ndarray:
        if not self.order:
            self.order = list(self.rng.permutation(len(self.sources)))
        return self.sources[int(self.order.pop())]


def mosaic(sources, rng: np.random.Generator, width_m: float, height_m: float,
           texel: float, tile_m: float) -> np.ndarray:
    """A texture of ``width_m x height_m`` metres: a grid of natural images, each ~``tile_m`` wide."""
    wt = int(round(width_m / texel / 16)) * 16
    ht = int(round(height_m / texel / 16)) * 16
    nx = max(1, int(round(width_m / tile_m)))
    ny = max(1, int(round(height_m / tile_m)))
    xs = np.linspace(0, wt, nx + 1).astype(int)
    ys = np.linspace(0, ht, ny + 1).astype(int)
    out = np.empty((ht, wt), np.uint8)
    for i in range(ny):
        for j in range(nx):
            src = _augment(sources.draw() if isinstance(sources, _Deck) else sources[int(rng.integers(0, len(sources)))], rng)
            th, tw = ys[i + 1] - ys[i], xs[j + 1] - xs[j]
            # crop to the tile's aspect ratio, then resize
            sh, sw = src.shape
            ar = tw / th
            if sw / sh > ar:
                cw = int(sh * ar)
                x0 = int(rng.integers(0, sw - cw + 1))
                src = src[:, x0:x0 + cw]
            else:
                ch = int(sw / ar)
                y0 = int(rng.integers(0, sh - ch + 1))
                src = src[y0:y0 + ch, :]
            interp = cv2.INTER_AREA if src.shape[1] > tw else cv2.INTER_CUBIC
            out[ys[i]:ys[i + 1], xs[j]:xs[j + 1]] = cv2.resize(src, (int(tw), int(th)), interpolation=interp)
    return out


# ----------------------------------------------------------------------------- scene


def _seen_on_plane(g, su, tv, s0, t0, x, y, zroi):
    """A quad's plane seen through image coordinates ``(x, y)`` (a pinhole's pixels, or a lens's
    undistorted normalised coordinates): inverse depth ``g . [x y 1]``, texture coordinates
    ``s = (su . [x y 1]) z + s0`` and ``t`` likewise. Returns (camera depth z float32, inf behind; s; t;
    the mask of what lies inside the quad, beyond the near plane and nearer than the depth ``zroi``)."""
    inv_z = (g[0] * x + g[1] * y + g[2]).astype(np.float32)
    valid = inv_z > (1.0 / 1e4)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(valid, 1.0 / inv_z, np.inf).astype(np.float32)
        s = (su[0] * x + su[1] * y + su[2]) * z + s0
        t = (tv[0] * x + tv[1] * y + tv[2]) * z + t0
    eps = 2e-4
    mask = valid & (z > NEAR) & (s >= -eps) & (s <= 1 + eps) & (t >= -eps) & (t <= 1 + eps)
    mask &= z < zroi
    return z, s, t, mask


class Scene:
    def __init__(self, quads: list[Quad], room_size: tuple[float, float, float],
                 boxes: list[tuple[np.ndarray, np.ndarray]]):
        self.quads = quads
        self.room_size = room_size
        self.boxes = boxes  # (min corner, max corner) per box
        self._o = np.array([q.origin for q in quads])
        self._U = np.array([q.U for q in quads])
        self._V = np.array([q.V for q in quads])
        self._n = np.array([q.normal for q in quads])

    # -------------------------------------------------------------- reference ray caster
    def raycast(self, c_w: np.ndarray, d_w: np.ndarray):
        """Rays ``c_w + lam * d_w`` (d_w (N,3), not normalised) -> (lam (N,), quad index (N,)).

        Nearest hit with ``lam > 0``; ``inf`` / -1 where nothing is hit. With ``d_w = R_WC K^-1 [u,v,1]``,
        ``lam`` is the camera depth z.
        """
        d = np.asarray(d_w, float).reshape(-1, 3)
        c = np.asarray(c_w, float).reshape(3)
        nd = d @ self._n.T                                   # (N,Q)
        num = np.sum(self._n * (self._o - c), axis=1)        # (Q,)
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = num[None, :] / nd
            X = c[None, None, :] + lam[..., None] * d[:, None, :]  # (N,Q,3)
            rel = X - self._o[None]
            s = np.einsum("nqk,qk->nq", rel, self._U) / np.sum(self._U ** 2, axis=1)
            t = np.einsum("nqk,qk->nq", rel, self._V) / np.sum(self._V ** 2, axis=1)
        eps = 1e-9
        ok = (lam > 1e-9) & (s >= -eps) & (s <= 1 + eps) & (t >= -eps) & (t <= 1 + eps) & np.isfinite(lam)
        lam = np.where(ok, lam, np.inf)
        idx = np.argmin(lam, axis=1)
        best = lam[np.arange(lam.shape[0]), idx]
        idx = np.where(np.isfinite(best), idx, -1)
        return best, idx

    def min_distance(self, p: np.ndarray) -> np.ndarray:
        """Distance from points (N,3) to the nearest room wall or box (boxes as solids)."""
        p = np.atleast_2d(p)
        L, W, H = self.room_size
        d = np.min(np.stack([p[:, 0] + L / 2, L / 2 - p[:, 0], p[:, 1] + W / 2, W / 2 - p[:, 1],
                             p[:, 2], H - p[:, 2]], 1), axis=1)
        for lo, hi in self.boxes:
            q = np.maximum(np.maximum(lo - p, p - hi), 0)
            inside = np.all((p > lo) & (p < hi), axis=1)
            d = np.minimum(d, np.where(inside, 0.0, np.linalg.norm(q, axis=1)))
        return d

    # -------------------------------------------------------------- rasteriser
    def render(self, K: np.ndarray, R_WC: np.ndarray, c_w: np.ndarray, width: int, height: int,
               want_depth: bool = True):
        """Render a pinhole view: (image float32 HxW, depth float32 HxW metres, inf where empty)."""
        R_CW = R_WC.T
        t_CW = -R_CW @ c_w
        Kinv = np.linalg.inv(K)
        img = np.zeros((height, width), np.float32)
        zbuf = np.full((height, width), np.inf, np.float32)
        for q in self.quads:
            if q.normal @ (c_w - q.origin) <= 1e-9:
                continue  # back face (or edge-on)
            roi = self._screen_roi(q, R_CW, t_CW, K, width, height)
            if roi is None:
                continue
            x0, y0, x1, y1 = roi
            # Plane in the camera frame: n_c . X = d_c; X = z Kinv [u v 1] -> 1/z = n_c.Kinv[u v 1] / d_c.
            n_c = R_CW @ q.normal
            d_c = n_c @ (R_CW @ q.origin + t_CW)  # > 0 for a front face
            g = (n_c @ Kinv) / d_c                 # inverse depth = g . [u v 1]
            # Texture coords (s, t) of pixel: X_w = c + z R_WC Kinv [u v 1]; s = (X_w - o).U / |U|^2
            M = R_WC @ Kinv
            co = c_w - q.origin
            U2, V2 = q.U @ q.U, q.V @ q.V
            su = (q.U @ M) / U2   # s = su . [u v 1] * z + s0
            tv = (q.V @ M) / V2
            s0, t0 = (co @ q.U) / U2, (co @ q.V) / V2
            us = np.arange(x0, x1, dtype=np.float32)[None, :]
            vs = np.arange(y0, y1, dtype=np.float32)[:, None]
            zroi = zbuf[y0:y1, x0:x1]
            z, _, _, mask = _seen_on_plane(g, su, tv, s0, t0, us, vs, zroi)
            if not mask.any():
                continue
            tex = self._pick_mip(q, K, R_CW, t_CW, roi)
            Ht, Wt = tex.shape
            # texture (a, b) -> pixel: X = o + s U + t V, s = (a + .5)/Wt, t = (b + .5)/Ht
            A = np.array([[1.0 / Wt, 0, 0.5 / Wt], [0, 1.0 / Ht, 0.5 / Ht], [0, 0, 1]])
            P = K @ np.column_stack([R_CW @ q.U, R_CW @ q.V, R_CW @ q.origin + t_CW])
            Hm = np.array([[1, 0, -x0], [0, 1, -y0], [0, 0, 1.0]]) @ P @ A
            warped = cv2.warpPerspective(tex, Hm, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR,
                                         borderMode=cv2.BORDER_REPLICATE)
            np.copyto(img[y0:y1, x0:x1], warped, where=mask, casting="unsafe")
            np.copyto(zroi, z, where=mask)
        return img, zbuf

    def render_rays(self, rays: "RayGrid", R_WC: np.ndarray, c_w: np.ndarray):
        """Render through a lens: pixel ``(u, v)`` sees along the ray ``R_WC [x, y, 1]`` with ``(x, y)``
        the ``rays`` grid's undistorted normalised coordinates there. Returns (image float32 HxW, camera
        depth z float32 HxW metres, inf where empty), as :meth:`render` does for a pinhole camera."""
        height, width = rays.height, rays.width
        R_CW = R_WC.T
        t_CW = -R_CW @ c_w
        img = np.zeros((height, width), np.float32)
        zbuf = np.full((height, width), np.inf, np.float32)
        for q in self.quads:
            if q.normal @ (c_w - q.origin) <= 1e-9:
                continue  # back face (or edge-on)
            roi = self._ray_roi(q, R_CW, t_CW, rays)
            if roi is None:
                continue
            x0, y0, x1, y1 = roi
            xs, ys = rays.x[y0:y1, x0:x1], rays.y[y0:y1, x0:x1]
            # Plane in the camera frame: n_c . X = d_c; X = z [x y 1] -> 1/z = n_c . [x y 1] / d_c.
            n_c = R_CW @ q.normal
            d_c = n_c @ (R_CW @ q.origin + t_CW)
            g = n_c / d_c
            co = c_w - q.origin
            U2, V2 = q.U @ q.U, q.V @ q.V
            su, tv = (q.U @ R_WC) / U2, (q.V @ R_WC) / V2
            s0, t0 = (co @ q.U) / U2, (co @ q.V) / V2
            zroi = zbuf[y0:y1, x0:x1]
            z, s, tt, mask = _seen_on_plane(g, su, tv, s0, t0, xs, ys, zroi)
            if not mask.any():
                continue
            tex = self._pick_mip_rays(q, rays, n_c, d_c, roi)
            Ht, Wt = tex.shape
            # texel (a, b) has its centre at s = (a + .5) / Wt, t = (b + .5) / Ht
            a = np.where(mask, s * Wt - 0.5, 0.0).astype(np.float32)
            b = np.where(mask, tt * Ht - 0.5, 0.0).astype(np.float32)
            sampled = cv2.remap(tex, a, b, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            np.copyto(img[y0:y1, x0:x1], sampled, where=mask, casting="unsafe")
            np.copyto(zroi, z, where=mask)
        return img, zbuf

    @staticmethod
    def _ray_roi(q: Quad, R_CW, t_CW, rays: "RayGrid"):
        """Pixel bounding box (x0, y0, x1, y1) that holds every pixel whose ray can meet the quad:
        the rows and columns whose rays reach the quad's bounding box in normalised coordinates
        (its projection, clipped at the near plane, is a convex polygon: its corners bound it)."""
        P = _clip_near(q.corners @ R_CW.T + t_CW)
        if P is None:
            return None
        xn, yn = P[:, 0] / P[:, 2], P[:, 1] / P[:, 2]
        rows = np.flatnonzero((rays.row_max_y >= yn.min()) & (rays.row_min_y <= yn.max()))
        cols = np.flatnonzero((rays.col_max_x >= xn.min()) & (rays.col_min_x <= xn.max()))
        if not rows.size or not cols.size:
            return None
        return (max(int(cols[0]) - 1, 0), max(int(rows[0]) - 1, 0), min(int(cols[-1]) + 2, rays.width),
                min(int(rows[-1]) + 2, rays.height))

    @staticmethod
    def _pick_mip_rays(q: Quad, rays: "RayGrid", n_c, d_c, roi) -> np.ndarray:
        """:meth:`_pick_mip` through a lens: the pixel's footprint from the ray grid's local scale."""
        x0, y0, x1, y1 = roi
        uc, vc = (x0 + x1) // 2, (y0 + y1) // 2
        ray = np.array([rays.x[vc, uc], rays.y[vc, uc], 1.0])
        denom = n_c @ ray
        if denom <= 1e-9:
            return q.mips[0]
        z = d_c / denom
        m_per_px = z * float(rays.scale[vc, uc]) * np.linalg.norm(ray)
        texel = np.linalg.norm(q.U) / q.texture.shape[1]
        level = int(np.floor(np.log2(max(m_per_px / texel, 1.0))))
        return q.mips[min(level, len(q.mips) - 1)]

    @staticmethod
    def _screen_roi(q: Quad, R_CW, t_CW, K, width, height):
        P = _clip_near(q.corners @ R_CW.T + t_CW)
        if P is None:
            return None
        uv = (P[:, :2] / P[:, 2:3]) * [K[0, 0], K[1, 1]] + [K[0, 2], K[1, 2]]
        x0 = max(int(np.floor(uv[:, 0].min())) - 1, 0)
        y0 = max(int(np.floor(uv[:, 1].min())) - 1, 0)
        x1 = min(int(np.ceil(uv[:, 0].max())) + 2, width)
        y1 = min(int(np.ceil(uv[:, 1].max())) + 2, height)
        if x1 <= x0 or y1 <= y0:
            return None
        return x0, y0, x1, y1

    @staticmethod
    def _pick_mip(q: Quad, K, R_CW, t_CW, roi) -> np.ndarray:
        """Mip level with about one texel per pixel at the distance of the nearest visible corner
        of the region (conservative: never blurrier than needed in the near part)."""
        x0, y0, x1, y1 = roi
        n_c = R_CW @ q.normal
        d_c = n_c @ (R_CW @ q.origin + t_CW)
        Kinv = np.linalg.inv(K)
        uc, vc = 0.5 * (x0 + x1), 0.5 * (y0 + y1)
        ray = Kinv @ np.array([uc, vc, 1.0])
        denom = n_c @ ray
        if denom <= 1e-9:
            return q.mips[0]
        z = d_c / denom
        # metres per pixel on the plane along the ray (foreshortening ignored: errs sharp)
        m_per_px = z / K[0, 0] * np.linalg.norm(ray)
        texel = np.linalg.norm(q.U) / q.texture.shape[1]
        level = int(np.floor(np.log2(max(m_per_px / texel, 1.0))))
        return q.mips[min(level, len(q.mips) - 1)]


def _clip_near(Xc: np.ndarray) -> np.ndarray | None:
    """The polygon ``Xc`` (camera frame, (N, 3)) clipped against ``z >= NEAR`` (Sutherland-Hodgman);
    None where less than a triangle is left."""
    poly = []
    n = len(Xc)
    for i in range(n):
        a, b = Xc[i], Xc[(i + 1) % n]
        ina, inb = a[2] >= NEAR, b[2] >= NEAR
        if ina:
            poly.append(a)
        if ina != inb:
            r = (NEAR - a[2]) / (b[2] - a[2])
            poly.append(a + r * (b - a))
    return np.array(poly) if len(poly) >= 3 else None


class RayGrid:
    """The viewing rays of a camera's pixels: ``x``, ``y`` (H, W) float32, the undistorted normalised
    coordinates of each pixel centre (the ray is ``[x, y, 1]`` in the camera frame), from ``xy``
    (H, W, 2), e.g. :meth:`vilib_ros.camera.CameraModel.undistort` of the pixel grid. Kept with them:
    each row's range of ``y`` and each column's range of ``x`` (to bound a quad's pixels) and each
    pixel's size in normalised units (``scale``, to pick a texture's mip level)."""

    def __init__(self, xy: np.ndarray):
        xy = np.asarray(xy, np.float64)
        if xy.ndim != 3 or xy.shape[2] != 2:
            raise ValueError(f"RayGrid needs (H, W, 2) normalised coordinates, got shape {xy.shape}")
        self.height, self.width = xy.shape[:2]
        self.x = np.ascontiguousarray(xy[..., 0], np.float32)
        self.y = np.ascontiguousarray(xy[..., 1], np.float32)
        self.row_min_y, self.row_max_y = xy[..., 1].min(1), xy[..., 1].max(1)
        self.col_min_x, self.col_max_x = xy[..., 0].min(0), xy[..., 0].max(0)
        dx = np.abs(np.gradient(xy[..., 0], axis=1))
        dy = np.abs(np.gradient(xy[..., 1], axis=0))
        self.scale = np.sqrt(dx * dy)

    @classmethod
    def of_camera(cls, camera) -> "RayGrid":
        """The rays of ``camera`` (a :class:`vilib_ros.camera.CameraModel`): its undistortion of every pixel."""
        u, v = np.meshgrid(np.arange(camera.width, dtype=np.float64), np.arange(camera.height, dtype=np.float64))
        xy = camera.undistort(np.column_stack([u.ravel(), v.ravel()]))
        return cls(xy.reshape(camera.height, camera.width, 2))


def build_room(rng: np.random.Generator, room_size=(8.0, 6.0, 3.0), n_boxes: int = 6,
               use_skimage: bool = True, keep_out=(2.1, 1.6)) -> Scene:
    """Room centred at x = y = 0 (floor z = 0) with ``n_boxes`` boxes outside ``|x|<keep_out[0], |y|<keep_out[1]``."""
    L, W, H = room_size
    src = _Deck(load_source_images(rng, use_skimage), rng)
    quads: list[Quad] = []
    x0, x1, y0, y1 = -L / 2, L / 2, -W / 2, W / 2
    # Walls face inwards: normal = U x V points into the room.
    spec = [
        ("wall_x+", [x1, y1, 0], [0, -W, 0], [0, 0, H]),
        ("wall_x-", [x0, y0, 0], [0, W, 0], [0, 0, H]),
        ("wall_y+", [x0, y1, 0], [L, 0, 0], [0, 0, H]),
        ("wall_y-", [x1, y0, 0], [-L, 0, 0], [0, 0, H]),
        ("floor", [x0, y0, 0], [L, 0, 0], [0, W, 0]),
        ("ceiling", [x0, y0, H], [0, W, 0], [L, 0, 0]),
    ]
    for name, o, U, V in spec:
        wm, hm = np.linalg.norm(U), np.linalg.norm(V)
        tex = mosaic(src, rng, wm, hm, TEXEL, tile_m=1.6)
        # texture rows follow V (t), columns follow U (s); walls: flip so "up" in the image is up
        quads.append(Quad(np.array(o, float), np.array(U, float), np.array(V, float),
                          np.ascontiguousarray(tex[::-1]) if name.startswith("wall") else tex, name))
    boxes = []
    tries = 0
    while len(boxes) < n_boxes and tries < 200:
        tries += 1
        sx, sy, sz = rng.uniform(0.35, 0.9), rng.uniform(0.35, 0.9), rng.uniform(0.3, 1.4)
        cx = rng.uniform(x0 + 0.2 + sx / 2, x1 - 0.2 - sx / 2)
        cy = rng.uniform(y0 + 0.2 + sy / 2, y1 - 0.2 - sy / 2)
        lo = np.array([cx - sx / 2, cy - sy / 2, 0.0])
        hi = np.array([cx + sx / 2, cy + sy / 2, sz])
        if hi[0] > -keep_out[0] and lo[0] < keep_out[0] and hi[1] > -keep_out[1] and lo[1] < keep_out[1]:
            continue
        if any(np.all(lo < b_hi + 0.1) and np.all(hi > b_lo - 0.1) for b_lo, b_hi in boxes):
            continue
        boxes.append((lo, hi))
        dx, dy, dz = hi - lo
        faces = [  # outward normals (U x V)
            ("x+", [hi[0], lo[1], 0], [0, dy, 0], [0, 0, dz]),
            ("x-", [lo[0], hi[1], 0], [0, -dy, 0], [0, 0, dz]),
            ("y+", [hi[0], hi[1], 0], [-dx, 0, 0], [0, 0, dz]),
            ("y-", [lo[0], lo[1], 0], [dx, 0, 0], [0, 0, dz]),
            ("top", [lo[0], lo[1], dz], [dx, 0, 0], [0, dy, 0]),
        ]
        for name, o, U, V in faces:
            wm, hm = np.linalg.norm(U), np.linalg.norm(V)
            tex = mosaic(src, rng, wm, hm, 0.004, tile_m=max(wm, hm))
            quads.append(Quad(np.array(o, float), np.array(U, float), np.array(V, float),
                              np.ascontiguousarray(tex[::-1]), f"box{len(boxes) - 1}_{name}"))
    return Scene(quads, room_size, boxes)
