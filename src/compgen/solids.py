"""Shaded 3D solids for the shapes data, compgen's reading of Paper A's images: Paper A renders single objects with
Blender on a blank 28 x 28 background (Okawa et al. 2023, Appendix A.1, Fig. 11; its public code's
``properties_single-body_2d_3classes.json`` names the objects Sphere, Cone and Cube) and states no camera, light or
position, and its code holds no renderer. The camera, the light and the centring below are compgen's choices.

A sphere (concept value ``circle``), an upright cone (``triangle``) and a cube (``square``) stand in front of a fixed
orthographic camera that looks down at :data:`CAMERA_ELEVATION_DEG`, lit by one directional light from the upper
left (:data:`LIGHT_DIRECTION`) plus ambient light. Every object keeps one orientation: the cone's apex points up,
the cube faces the camera. Each pixel is ray-cast at :data:`SUBSAMPLES` x :data:`SUBSAMPLES` points; its coverage is
the share of points that hit the object and its shade the mean Lambert term over the hits, so edges are
anti-aliased and faces shaded smoothly.

The solids are sized so that their silhouettes have the area of the flat renderer's shapes at the same scale (a
sphere's outline is the flat circle; the cone's is the flat upright triangle with a slightly rounded base), so a
size value means the same apparent size in both styles. Only IEEE add, multiply, divide and sqrt touch pixels, and
subsamples are accumulated in a fixed order, so the same parameters give the same bytes on any machine.
"""

from __future__ import annotations

import numpy as np

CAMERA_ELEVATION_DEG = 15.0
"""How far the camera looks down on the objects, in degrees (the cone's base and the cube's top show a little)."""

_ELEVATION = np.deg2rad(CAMERA_ELEVATION_DEG)
_SIN_E = float(np.round(np.sin(_ELEVATION), 6))
_COS_E = float(np.round(np.cos(_ELEVATION), 6))

LIGHT_DIRECTION = (-0.5, 0.7, 0.5)
"""Towards the light in camera coordinates (right, up, towards the viewer), before normalisation."""
_LIGHT = np.round(np.asarray(LIGHT_DIRECTION) / np.linalg.norm(LIGHT_DIRECTION), 6).astype(np.float32)

AMBIENT = 0.45
"""Shade of a face turned away from the light; a face turned to it has shade 1 (no specular highlight)."""

SUBSAMPLES = 4
"""Ray-cast points per pixel along each axis."""

# Silhouette sizes in units of the scale length L = scale * image_size / 10, matched to the flat shapes' areas.
SPHERE_RADIUS = 0.80
"""The flat circle's radius."""
CONE_BASE_RADIUS = 0.78
"""With the silhouette height below: the flat upright triangle's outline area (its rounded base included)."""
CONE_SILHOUETTE_HEIGHT = 1.35
"""Apex to base centre on screen, in L."""
CUBE_SIDE = 1.12
"""Gives the cube's outline (front face and a sliver of top) the flat square's area."""

SOLIDS = {"circle": "sphere", "triangle": "cone", "square": "cube"}
"""The solid drawn for each shape value."""


def shaded_coverage(
    shape: str, position: np.ndarray, unit: np.ndarray, image_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Coverage and shade ``(n, s, s)`` (both float32 in [0, 1]) of ``n`` solids of one ``shape``.

    ``position`` ``(n, 2)`` is the centre of each silhouette's bounding box in pixels (x right, y down) and ``unit``
    ``(n,)`` the scale length L in pixels. Pixels the object does not touch have shade 1.
    """
    if shape not in SOLIDS:
        raise ValueError(f"no solid for shape {shape!r}; shapes are {sorted(SOLIDS)}")
    n, s = len(position), image_size
    hits = np.zeros((n, s, s), dtype=np.float32)
    shade_sum = np.zeros((n, s, s), dtype=np.float32)
    unit = unit.astype(np.float32)[:, None, None]
    # Screen coordinates relative to the object's anchor, in units of L, with y pointing up.
    offsets = (np.arange(SUBSAMPLES, dtype=np.float32) + np.float32(0.5)) / np.float32(SUBSAMPLES)
    pixels = np.arange(s, dtype=np.float32)
    cx = position[:, 0].astype(np.float32)[:, None, None]
    cy = position[:, 1].astype(np.float32)[:, None, None]
    draw = {"sphere": _sphere, "cone": _cone, "cube": _cube}[SOLIDS[shape]]
    for oy in offsets:
        row = (cy - (pixels + oy)[None, :, None]) / unit  # (n, s, 1): up is positive
        for ox in offsets:
            column = ((pixels + ox)[None, None, :] - cx) / unit  # (n, 1, s)
            hit, shade = draw(column, row)
            np.add(hits, hit, out=hits)
            np.add(shade_sum, np.where(hit, shade, np.float32(0.0)), out=shade_sum)
    count = np.float32(SUBSAMPLES * SUBSAMPLES)
    coverage = hits / count
    shade = np.where(hits > 0, shade_sum / np.maximum(hits, np.float32(1.0)), np.float32(1.0))
    return coverage.astype(np.float32), shade.astype(np.float32)


def _lambert(nx: np.ndarray, ny: np.ndarray, nz: np.ndarray) -> np.ndarray:
    """Ambient plus diffuse shade of unit normals (camera coordinates)."""
    cosine = nx * _LIGHT[0] + ny * _LIGHT[1] + nz * _LIGHT[2]
    return np.float32(AMBIENT) + np.float32(1.0 - AMBIENT) * np.maximum(cosine, np.float32(0.0))


def _sphere(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sphere centred on the anchor: the outline is a circle; the normal is read off the visible hemisphere."""
    radius = np.float32(SPHERE_RADIUS)
    rho2 = x * x + y * y
    hit = rho2 <= radius * radius
    z = np.sqrt(np.maximum(radius * radius - rho2, np.float32(0.0)))
    return hit, _lambert(x / radius, y / radius, z / radius)


def _cone(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An upright cone whose silhouette spans the anchor's bounding box; rays hit its lateral surface only (the base
    faces away from a camera that looks down).

    In camera coordinates the cone's axis points up and towards the viewer, ``a = (0, cos e, sin e)``. A ray
    ``(x, y, z)`` (z free) meets the surface where ``(w . a)^2 = cos^2(alpha) |w|^2`` with ``w`` the point minus
    the apex; the nearer root (larger z) on the part between apex and base is the visible point.
    """
    base = np.float32(CONE_BASE_RADIUS)
    height = np.float32(CONE_SILHOUETTE_HEIGHT / _COS_E)  # true height: its projection is the silhouette height
    sin_e, cos_e = np.float32(_SIN_E), np.float32(_COS_E)
    # Anchor the bounding box: top at the apex, bottom at the front of the base ellipse.
    top = np.float32(0.5) * (height * cos_e + base * sin_e)
    apex_y = top
    cos2 = height * height / (height * height + base * base)  # cos^2 of the half angle
    wx = x
    wy = y - apex_y
    # Point on the ray: (wx, wy, wz) with wz = z - apex_z free. Axis pointing from the apex into the cone is -a.
    # (w . -a)^2 = cos2 |w|^2  ->  (wy cos e + wz sin e)^2 = cos2 (wx^2 + wy^2 + wz^2), a quadratic in wz.
    qa = sin_e * sin_e - cos2
    qb = np.float32(2.0) * wy * cos_e * sin_e
    qc = wy * wy * cos_e * cos_e - cos2 * (wx * wx + wy * wy)
    disc = qb * qb - np.float32(4.0) * qa * qc
    root = np.sqrt(np.maximum(disc, np.float32(0.0)))
    # qa < 0, so (-qb - root) / (2 qa) is the root nearer the viewer (larger z). It may lie on the cone's mirror
    # image above the apex; the visible point is the nearest root on the solid (0 <= along <= height).
    near = (-qb - root) / (np.float32(2.0) * qa)
    far = (-qb + root) / (np.float32(2.0) * qa)
    along_near = -(wy * cos_e + near * sin_e)  # distance from the apex along the axis, into the cone
    along_far = -(wy * cos_e + far * sin_e)
    near_ok = (along_near >= 0) & (along_near <= height)
    far_ok = (along_far >= 0) & (along_far <= height)
    hit = (disc >= 0) & (near_ok | far_ok)
    wz = np.where(near_ok, near, far)
    # Outward normal: the radial direction tilted up by the half angle.
    ax, ay, az = np.float32(0.0), cos_e, sin_e  # unit axis pointing up (apex side)
    axial = wx * ax + wy * ay + wz * az
    rx, ry, rz = wx - axial * ax, wy - axial * ay, wz - axial * az
    norm_r = np.sqrt(rx * rx + ry * ry + rz * rz) + np.float32(1e-12)
    cos_half = np.float32(np.sqrt(cos2))
    sin_half = np.float32(np.sqrt(1.0 - cos2))
    nx = cos_half * rx / norm_r + sin_half * ax
    ny = cos_half * ry / norm_r + sin_half * ay
    nz = cos_half * rz / norm_r + sin_half * az
    return hit, _lambert(nx, ny, nz)


def _cube(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A cube facing the camera: its front face and, above it, a sliver of its top (the camera looks down)."""
    side = np.float32(CUBE_SIDE)
    sin_e, cos_e = np.float32(_SIN_E), np.float32(_COS_E)
    front_height = side * cos_e
    top_height = side * sin_e
    bottom = np.float32(-0.5) * (front_height + top_height)
    inside_x = np.abs(x) <= side * np.float32(0.5)
    front = inside_x & (y >= bottom) & (y <= bottom + front_height)
    top = inside_x & (y > bottom + front_height) & (y <= bottom + front_height + top_height)
    # Front face normal (0, -sin e, cos e) turned from the up axis; top face normal (0, cos e, sin e).
    front_shade = _lambert(np.float32(0.0), -sin_e, cos_e)
    top_shade = _lambert(np.float32(0.0), cos_e, sin_e)
    shade = np.where(top, top_shade, front_shade).astype(np.float32)
    return front | top, shade
