"""Simulated robots for the deployment runtime, built from nothing but an exported policy's ``robot`` entry.

``MujocoRobot(entry)`` honours ``rl_suite.deploy.runtime.Robot``: a plain ``mujoco.MjData`` of the entry's model (the
same ``build_model`` as the training task: the file's MJCF, one PD position actuator per joint with the entry's gains
and torque limits, a ground plane), driven the way a robot programmer would drive the real one from the entry alone:

- ``read_observation()`` concatenates the entry's ``observation`` terms in order, each the raw quantity times its
  scales: base linear velocity (body frame; only if the entry lists it), base angular velocity (body frame),
  projected gravity, the command (``set_command``), joint positions minus the default pose, joint velocities, and the
  last action (the last offsets divided by the action scale);
- ``apply_action(offsets)`` sets each joint's PD target to ``default_joint_pos + offsets`` and advances the physics by
  ``decimation`` steps of ``physics_dt``: in simulation, applying an action is what moves time on, one control
  period per call.

It also keeps what a sim-to-sim benchmark reports: ``planar_velocity()`` (body frame) and ``fallen()`` (trunk
tilted beyond ``max_roll_pitch`` or base below ``min_height``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rl_suite.deploy.inference import actions_from_offsets
from rl_suite.envs.robots.config import RobotConfig, bind, build_model
from rl_suite.video import check_video_path, has_display, write_video

_TERMS = ("base_lin_vel", "base_ang_vel", "projected_gravity", "command", "joint_pos", "joint_vel", "last_action")


def config_from_entry(entry: dict) -> RobotConfig:
    """The ``RobotConfig`` an exported file's robot entry describes (for building its model)."""
    return RobotConfig(
        name=entry.get("name", "robot"),
        mjcf=entry["mjcf"],
        joints=tuple(entry["joint_names"]),
        default_joint_pos=tuple(entry["default_joint_pos"]),
        kp=tuple(entry["kp"]),
        kd=tuple(entry["kd"]),
        action_scale=tuple(entry["action_scale"]),
        torque_limit=tuple(entry["torque_limit"]),
        base_body=entry["base_body"],
        feet=tuple(entry["feet"]),
        termination_contacts=(entry["base_body"],),
        init_base_height=float(entry["init_base_height"]),
    )


class EntryRobot:
    """What a simulated robot driven from a robot entry shares, whatever simulates it: the command, the observation
    built from the entry's terms, the last action, and the fall check. A simulator's robot sets ``entry``,
    ``default`` and ``action_scale`` (``_setup``) and provides ``_joints()`` (positions and velocities, in action
    order), ``_base()`` (base linear and angular velocity and gravity direction, in the base's frame, and the base's
    height), ``apply_action`` and ``reset``."""

    def _setup(self, entry: dict, command, max_roll_pitch: float, min_height: float) -> None:
        unknown = [term["name"] for term in entry["observation"] if term["name"] not in _TERMS]
        if unknown:
            raise ValueError(
                f"the robot entry's observation has terms {unknown} that {type(self).__name__} cannot build"
            )
        self.entry, self.config = entry, config_from_entry(entry)
        self.default = np.asarray(entry["default_joint_pos"], dtype=np.float64)
        self.action_scale = np.asarray(entry["action_scale"], dtype=np.float64)
        self.max_roll_pitch, self.min_height = max_roll_pitch, min_height
        self.command = np.zeros(3)
        self.set_command(*command)

    def set_command(self, lin_vel_x: float, lin_vel_y: float, ang_vel_yaw: float) -> None:
        self.command[:] = (lin_vel_x, lin_vel_y, ang_vel_yaw)

    def read_observation(self) -> np.ndarray:
        q, qd = self._joints()
        lin_vel, ang_vel, gravity, _ = self._base()
        raw = {
            "base_lin_vel": lin_vel,  # what a real robot's state estimator would give
            "base_ang_vel": ang_vel,
            "projected_gravity": gravity,
            "command": self.command,
            "joint_pos": q - self.default,
            "joint_vel": qd,
            "last_action": self.last_action,
        }
        parts = [np.asarray(raw[term["name"]]) * np.asarray(term["scale"]) for term in self.entry["observation"]]
        return np.concatenate(parts).astype(np.float32)

    def _record_action(self, offsets: np.ndarray) -> None:
        """The last action, as the task observes it: the offsets divided by the action scale."""
        self.last_action = actions_from_offsets(offsets, self.action_scale)

    def planar_velocity(self) -> np.ndarray:
        """The base's (v_x, v_y) in its own frame, and its yaw rate."""
        lin_vel, ang_vel, _, _ = self._base()
        return np.array([lin_vel[0], lin_vel[1], ang_vel[2]])

    def height(self) -> float:
        return self._base()[3]

    def fallen(self) -> bool:
        """Roll or pitch beyond ``max_roll_pitch``, or the base below ``min_height``."""
        _, _, gravity, height = self._base()
        roll = np.arctan2(abs(gravity[1]), -gravity[2])
        pitch = np.arcsin(min(abs(gravity[0]), 1.0))
        return bool(max(roll, pitch) > self.max_roll_pitch or height < self.min_height)


class MujocoRobot(EntryRobot):
    """One simulated legged robot, driven from an exported policy's robot entry (see the module docstring)."""

    def __init__(self, entry: dict, command=(0.0, 0.0, 0.0), max_roll_pitch: float = 1.0, min_height: float = 0.1):
        import mujoco

        self._mujoco = mujoco
        self._setup(entry, command, max_roll_pitch, min_height)
        self.model = build_model(self.config, float(entry["physics_dt"]))
        self.bound = bind(self.config, self.model)
        self.data = mujoco.MjData(self.model)
        self.decimation = int(entry["decimation"])
        self.reset()

    def reset(self) -> None:
        """The task's reset without noise: the base at its initial height, the joints at the default pose."""
        mujoco, data = self._mujoco, self.data
        mujoco.mj_resetData(self.model, data)
        data.qpos[2] = self.config.init_base_height
        data.qpos[self.bound.joint_qpos] = self.default
        data.ctrl[:] = self.default
        mujoco.mj_forward(self.model, data)
        self.last_action = np.zeros(len(self.default))

    def _joints(self) -> tuple[np.ndarray, np.ndarray]:
        return self.data.qpos[self.bound.joint_qpos], self.data.qvel[self.bound.joint_dof]

    def _base(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        mujoco, data = self._mujoco, self.data
        quat = data.qpos[3:7] / np.linalg.norm(data.qpos[3:7])
        inverse = quat * np.array([1.0, -1.0, -1.0, -1.0])
        lin_vel, gravity = np.zeros(3), np.zeros(3)
        mujoco.mju_rotVecQuat(lin_vel, data.qvel[:3], inverse)
        mujoco.mju_rotVecQuat(gravity, np.array([0.0, 0.0, -1.0]), inverse)
        return lin_vel, data.qvel[3:6].copy(), gravity, float(data.qpos[2])

    def apply_action(self, offsets) -> None:
        offsets = np.asarray(offsets, dtype=np.float64)
        self.data.ctrl[:] = self.default + offsets
        self._mujoco.mj_step(self.model, self.data, self.decimation)
        self._record_action(offsets)


SHIPPED_POLICIES = Path(__file__).parent / "policies"
"""Trained policies shipped with the suite (``quadruped_flat.onnx``, ``humanoid_flat.onnx``; see
docs/reference/tasks.md, Legged robots)."""
SHIPPED_ROBOTS = ("quadruped", "humanoid")
"""The robots with a shipped flat-ground policy, ``SHIPPED_POLICIES / f"{robot}_flat.onnx"``."""


def play(
    policy_path: str | None = None,
    command=(0.5, 0.0, 0.0),
    seconds: float = 10.0,
    video: str | None = None,
    viewer: bool | None = None,
    width: int = 640,
    height: int = 480,
    robot: str = "quadruped",
) -> dict:
    """Run an exported legged policy (default: the shipped flat-ground policy of ``robot``, one of
    ``SHIPPED_ROBOTS``) on ``MujocoRobot`` for ``seconds`` at the file's control rate, with a constant ``command``
    (v_x, v_y, yaw rate). ``video``: write the run to this file (``.gif``, or ``.mp4`` with imageio-ffmpeg
    installed), from the model's ``track`` camera where it has one. ``viewer``: show it in MuJoCo's viewer, in real
    time (``None``: when a display exists and no video is asked for). Returns what happened: the RMS planar tracking
    error (m/s), the mean velocities, and whether the robot fell."""
    import time

    from rl_suite.deploy.runtime import load_policy

    if video is not None:
        check_video_path(Path(video))  # before the episode is run, not after
    if policy_path is None and robot not in SHIPPED_ROBOTS:
        raise ValueError(f"robot must be one of {', '.join(SHIPPED_ROBOTS)} (a shipped policy), got {robot!r}")
    path = Path(policy_path) if policy_path is not None else SHIPPED_POLICIES / f"{robot}_flat.onnx"
    if policy_path is None and not path.is_file():
        raise ValueError(
            f"no trained policy is shipped yet ({path} does not exist): give an exported file, rl-suite play FILE "
            "(from rl-suite export RUN_DIR of a legged task)"
        )
    policy = load_policy(path, robot=True)
    walker = MujocoRobot(policy.robot, command=command)
    steps = max(1, round(seconds * float(policy.robot["control_hz"])))
    if viewer is None:
        viewer = video is None and has_display()
    frames, renderer, window = [], None, None
    if video is not None:
        from rl_suite.envs.mujoco.env import OffscreenRenderer

        renderer = OffscreenRenderer(walker.model)
        camera = (
            "track" if walker._mujoco.mj_name2id(walker.model, walker._mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0 else -1
        )
    if viewer:
        import mujoco.viewer

        window = mujoco.viewer.launch_passive(walker.model, walker.data)
    velocities, fell = [], False
    period = 1.0 / float(policy.robot["control_hz"])
    try:
        for _ in range(steps):
            started = time.perf_counter()
            walker.apply_action(policy(walker.read_observation()))
            velocities.append(walker.planar_velocity())
            fell = fell or walker.fallen()
            if renderer is not None:
                frames.append(renderer.render(walker.data, width, height, camera))
            if window is not None:
                if not window.is_running():
                    break
                window.sync()
                time.sleep(max(0.0, period - (time.perf_counter() - started)))
    finally:
        if window is not None:
            window.close()
        if renderer is not None:
            renderer.close()
    if video is not None:
        write_video(Path(video), np.stack(frames), fps=1.0 / period)
    velocities = np.asarray(velocities)
    error = velocities[:, :2] - np.asarray(command[:2])
    return {
        "policy": str(path),
        "command": list(map(float, command)),
        "seconds": len(velocities) * period,
        "tracking_error_lin": float(np.sqrt(np.mean(np.sum(error**2, axis=1)))),
        "mean_velocity": velocities.mean(axis=0).tolist(),
        "fell": fell,
        "video": video,
    }
