"""A constant-velocity Kalman filter over boxes in (centre x, centre y, aspect ratio, height).

State (8,): ``cx, cy, a, h`` and their velocities per frame; measurement (4,): ``cx, cy, a, h``
with ``a = w / h``. Noise scales with the box height, so a large, near object may move more
pixels per frame than a small, far one before a match looks unlikely. Every method works on a
batch of tracks at once: means ``(T, 8)``, covariances ``(T, 8, 8)``.

Example:
    >>> kf = KalmanBoxFilter()
    >>> mean, cov = kf.initiate(np.array([[10.0, 10.0, 1.0, 4.0]]))
    >>> for step in range(1, 6):  # the box moves 2 px right per frame
    ...     mean, cov = kf.predict(mean, cov)
    ...     mean, cov = kf.update(mean, cov, np.array([[10.0 + 2 * step, 10.0, 1.0, 4.0]]))
    >>> bool(1.0 < kf.predict(mean, cov)[0][0, 4] < 3.0)  # it has learnt a velocity near +2 px/frame
    True
"""

from __future__ import annotations

import numpy as np

# noise as a fraction of the box height (position per frame, velocity per frame)
POSITION_NOISE = 1.0 / 20.0
VELOCITY_NOISE = 1.0 / 160.0
ASPECT_NOISE = 1e-2
ASPECT_VELOCITY_NOISE = 1e-5


class KalmanBoxFilter:
    """Predict / correct box states (see the module docstring); stateless, arrays in and out."""

    def __init__(self) -> None:
        self.motion = np.eye(8)
        self.motion[:4, 4:] = np.eye(4)  # x_{t+1} = x_t + v_t
        self.observe = np.eye(4, 8)  # we measure the first four components

    @staticmethod
    def _stds(h: np.ndarray, pos: float, vel: float) -> tuple[np.ndarray, np.ndarray]:
        """(T, 4) position and velocity standard deviations for heights ``h`` (T,)."""
        p = np.stack([pos * h, pos * h, np.full_like(h, ASPECT_NOISE), pos * h], axis=1)
        v = np.stack([vel * h, vel * h, np.full_like(h, ASPECT_VELOCITY_NOISE), vel * h], axis=1)
        return p, v

    def initiate(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """New tracks from measurements ``z`` (T, 4): zero velocity, wide velocity uncertainty."""
        z = np.asarray(z, dtype=np.float64).reshape(-1, 4)
        mean = np.concatenate([z, np.zeros_like(z)], axis=1)  # (T, 8)
        p, v = self._stds(z[:, 3], 2 * POSITION_NOISE, 10 * VELOCITY_NOISE)
        var = np.concatenate([p, v], axis=1) ** 2
        return mean, np.einsum("ti,ij->tij", var, np.eye(8))

    def predict(self, mean: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One frame ahead for every track: (T, 8), (T, 8, 8)."""
        if len(mean) == 0:
            return mean, cov
        p, v = self._stds(mean[:, 3], POSITION_NOISE, VELOCITY_NOISE)
        q = np.einsum("ti,ij->tij", np.concatenate([p, v], axis=1) ** 2, np.eye(8))
        f = self.motion
        return mean @ f.T, f @ cov @ f.T + q

    def update(self, mean: np.ndarray, cov: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Correct tracks (T, 8), (T, 8, 8) with their matched measurements ``z`` (T, 4)."""
        if len(mean) == 0:
            return mean, cov
        z = np.asarray(z, dtype=np.float64).reshape(-1, 4)
        hm = self.observe
        p, _ = self._stds(mean[:, 3], POSITION_NOISE, VELOCITY_NOISE)
        r = np.einsum("ti,ij->tij", p**2, np.eye(4))
        s = hm @ cov @ hm.T + r  # (T, 4, 4) innovation covariance
        ph = cov @ hm.T  # (T, 8, 4)
        gain = np.linalg.solve(s, ph.transpose(0, 2, 1)).transpose(0, 2, 1)  # P H^T S^-1, S symmetric
        innovation = z - mean @ hm.T  # (T, 4)
        new_mean = mean + np.einsum("tij,tj->ti", gain, innovation)
        new_cov = cov - gain @ s @ gain.transpose(0, 2, 1)
        return new_mean, new_cov


def xyxy_to_xyah(xyxy: np.ndarray) -> np.ndarray:
    """(N, 4) corners -> (N, 4) centre x, centre y, width / height, height."""
    xyxy = np.asarray(xyxy, dtype=np.float64).reshape(-1, 4)
    w = xyxy[:, 2] - xyxy[:, 0]
    h = np.maximum(xyxy[:, 3] - xyxy[:, 1], 1e-6)
    return np.stack([xyxy[:, 0] + w / 2, xyxy[:, 1] + h / 2, w / h, h], axis=1)


def xyah_to_xyxy(xyah: np.ndarray) -> np.ndarray:
    """(N, 4) centre x, centre y, aspect, height -> (N, 4) corners."""
    xyah = np.asarray(xyah, dtype=np.float64).reshape(-1, 4)
    w = xyah[:, 2] * xyah[:, 3]
    return np.stack([xyah[:, 0] - w / 2, xyah[:, 1] - xyah[:, 3] / 2,
                     xyah[:, 0] + w / 2, xyah[:, 1] + xyah[:, 3] / 2], axis=1)
