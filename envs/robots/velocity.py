"""Velocity tracking on flat ground: the task that legged-robot learners train first (legged_gym, Isaac Lab, mjlab and
MuJoCo Playground are built around it), written once against a ``RobotConfig``.

``LeggedVelocityEnv(num_envs, device, seed, robot="quadruped", **settings)``; ``settings`` are the fields of
``VelocitySettings`` below, each documented there: ``rl_suite.make("QuadrupedVelocity-Flat-v0", push_velocity=1.0)``.

Each environment follows a commanded base velocity ``(v_x, v_y, yaw rate)``, drawn uniformly from the command ranges
every ``resampling_time_s`` and at reset (with probability ``standing_probability`` it is zero, so that the robot
learns to stand still; in heading mode the yaw rate follows a commanded heading). The policy acts at 50 Hz on a
200 Hz simulation (decimation 4): an action is a vector of joint position offsets, and joint ``j``'s target is
``default_joint_pos[j] + action_scale[j] * action[j]``, tracked by PD with torque limits at every physics step
(MuJoCo's position actuators, which ``config.build_model`` adds). The action space is a finite ``Box`` per joint: each
joint's range mapped through the default pose and the action scale, ``(range - default_joint_pos) / action_scale``
(``action_bounds``; ``[-clip_actions, clip_actions]`` where a joint has no range), so that no action asks for a target
beyond a joint's range; actions are clipped to it. Zero is the default pose: a Gaussian policy's output is the offset
itself (``action_bounds: clip`` in the on-policy agents' settings), a squashing policy spans the bounds.

Observation (the policy's), in this order, each term multiplied by its scale (legged_gym's ``obs_scales``); the
same list, with sizes, is ``observation_terms`` and goes into exported metadata:

    base_lin_vel        3   x 2      base linear velocity, body frame (m/s); only with ``observe_base_lin_vel``
    base_ang_vel        3   x 0.25   base angular velocity, body frame (rad/s)
    projected_gravity   3   x 1      the unit gravity vector in the body frame
    command             3   x (2, 2, 0.25)  (v_x, v_y, yaw rate) commanded
    joint_pos           J   x 1      joint positions minus the default pose (rad)
    joint_vel           J   x 0.05   joint velocities (rad/s)
    last_action         J   x 1      the previous action, after clipping
    height_scan         187 x 5      on rough terrain with ``observe_height_scan``: the base's height less 0.5 m less
                                     the ground's, clipped to [-1, 1] m, on a 17 x 11 grid 0.1 m apart around the
                                     base, turned with its yaw (legged_gym's height measurements; terrain.py)

Privileged critic observation (``info["critic_obs"]``, for an asymmetric critic): the policy's terms but the height
scan, without noise, then base_lin_vel (3, body frame, x 2), base_height (1, above the ground under the base),
foot_contact (F, 1 where a foot carries more than 1 N), the randomised parameters (friction, added base mass,
centre-of-mass offset (3), motor strength (J), Kp and Kd factors, latency in physics steps), and on rough terrain the
height scan (187, x 5), which the critic always sees, last: a flat-ground critic's inputs are the first columns of a
rough-terrain one's, as a flat-ground policy's are of a perceptive one's (``RunConfig.init_from``).

Reward: the weighted sum of the terms below, each weight a keyword (``<term>_weight``) and each term multiplied by
the control period, as legged_gym multiplies its scales by dt. The defaults (``reward_preset="suite"``) are the recipe
that learns here: Isaac Lab's Go1 flat-ground weights, not clipped, with a joint-limit penalty of -1.
``reward_preset="legged_gym"`` gives legged_gym's A1/Go1 set (``LEGGED_GYM_REWARDS``: clipped at zero from below,
``only_positive_rewards``, with the termination term added after the clip), and ``"isaaclab_g1"`` the humanoid's
(``HUMANOID_SETTINGS``); keywords override a preset. Per-term episode sums are reported in
``info["episode_metrics"]`` as ``reward_<term>``, and reach TensorBoard through the runner.

    tracking_lin_vel    exp(-|cmd_xy - v_xy|^2 / tracking_sigma)      body-frame planar velocity
    tracking_ang_vel    exp(-(cmd_yaw - w_z)^2 / tracking_sigma)
    lin_vel_z           v_z^2
    ang_vel_xy          |w_xy|^2                                     roll and pitch rates
    orientation         |g_xy|^2                                     projected gravity off vertical
    torques             |tau|^2
    dof_acc             |(q' - q'_prev) / dt|^2
    action_rate         |a - a_prev|^2
    dof_pos_limits      how far joints are beyond the soft limits (RobotConfig.soft_joint_limit of the range)
    feet_air_time       sum over feet touching down of (air time - feet_air_time_target), when |cmd_xy| > 0.1
    collision           how many penalised bodies (thighs, calves) touch anything with more than 0.1 N
    termination         1 on the step that ends an episode by termination (not by the time limit)

The biped terms (weight 0 by default; ``HumanoidVelocity-Flat-v0`` sets them), feet from ``RobotConfig.feet``:

    feet_air_time_biped min over feet of the time since the foot's last touch-down (those in contact) or lift-off
                        (those in the air), while exactly one foot is down, capped at feet_air_time_biped_threshold,
                        when |cmd_xy| > 0.1 (Isaac Lab's feet_air_time_positive_biped: one foot at a time, long steps)
    feet_slip           sum over feet in contact of the foot's planar speed (m/s) (Isaac Lab's feet_slide)
    feet_clearance      sum over feet of |foot height above the ground - feet_clearance_target| x the foot's planar
                        speed, when |cmd_xy| + |cmd_yaw| > 0.05 (mjlab's feet_clearance: swing feet lifted, not
                        dragged)
    joint_deviation     sum of |q - q_default| over joint_deviation_joints (Isaac Lab's joint_deviation_l1: hip yaw
                        and roll, waist, where a biped drifts without a cost)

Shaping terms from mjlab's velocity task (weight 0 by default), positive rewards that keep a posture:

    posture             exp(-mean over joints of (q - q_default)^2 / posture_std^2)
    upright             exp(-|g_xy|^2 / 0.2)                         projected gravity near vertical

Upright posture is the ``orientation`` term on the base (the pelvis), as Isaac Lab's ``flat_orientation_l2``.

Termination: a contact of more than 1 N on a ``termination_contacts`` body (the trunk), or roll or pitch beyond
``max_roll_pitch``, after the first ``fall_grace_s`` of the episode (0 by default). Time limits
(``episode_length_s``) are truncations.

Episode metrics (``info["episode_metrics"]``, ``[N]`` tensors valid where ``info["done"]``): ``tracking_error_lin``,
the RMS of |cmd_xy - v_xy| (m/s) over the episode's steps whose command speed is at most ``metric_max_speed`` (NaN
for an episode with no such step; averages skip it); ``tracking_error_yaw``, the RMS yaw-rate error (rad/s);
``fell``, 1 for an episode that terminated; the diagnostics of a failing gait (``DIAGNOSTICS``, per-step means:
``base_height`` above the ground, ``joint_limit_excess`` beyond the soft limits, ``actions_beyond_bounds``); and the
per-term reward sums.

The sim-to-real kit, every piece off by default and switched on by its keyword, drawn per environment at each reset
from the environment's own random stream (so seeded, independent of ``num_envs`` and resumable from a checkpoint):
``friction_range`` (the friction of every contact), ``added_mass_range`` (kg on the base), ``com_offset_range`` (m,
the base's centre of mass, per axis), ``motor_strength_range``, ``kp_range`` and ``kd_range`` (factors on each
joint's torque, gains), ``max_latency_steps`` (the new targets act after 0 to k physics steps, the previous ones until
then), ``obs_noise_level`` with ``obs_noise_scales`` (uniform noise per term, legged_gym's scales), pushes
(``push_velocity`` m/s added to the base's planar velocity every ``push_interval_s``), reset noise on the joints
and the base, and the command curriculum (``command_curriculum``: the v_x range widens by 0.5 m/s, up to
``max_command_curriculum``, whenever the episodes that ended over one episode length tracked v_x at more than 80% of
the tracking reward's maximum, as legged_gym's ``update_command_curriculum``).

Rough terrain (``terrain``: a dict of ``terrain.TerrainSettings`` fields, ``{}`` for their defaults; ``None``, the
default, is flat ground): a seeded grid of tiles (rough ground, slopes, stairs, obstacles) as one heightfield, on
both backends. Each environment keeps a column of the grid and starts each episode within 1 m of its tile's centre;
the level it starts on follows legged_gym's terrain curriculum (``terrain_curriculum``; terrain.TerrainPlacement):
up after walking more than half a tile, down after walking less than half the commanded distance, starting from a
level up to ``max_init_terrain_level``. ``terrain_level`` joins the episode metrics.

Physics: the CPU backend (MuJoCo's batch API, float64) or MuJoCo Warp (float32), as ``rl_suite.envs.mujoco`` has
them; the task's own tensors are float32 on ``device``.
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import torch

from rl_suite.env import Selection, VecEnv
from rl_suite.envs.mujoco.env import BACKENDS, PhysicsRendering
from rl_suite.envs.mujoco.reset_bank import ResetBank, attached, bank_checkpoint, restore_bank
from rl_suite.envs.robots.config import RobotConfig, bind, build_model, robot_config
from rl_suite.envs.robots.terrain import (
    HEIGHT_SCAN_BASE_OFFSET,
    HEIGHT_SCAN_SIZE,
    HEIGHT_SCAN_X,
    HEIGHT_SCAN_Y,
    SPAWN_SPREAD,
    Terrain,
    TerrainPlacement,
    TerrainSettings,
    check_collidable,
)
from rl_suite.registry import CONTRACT_OPTIONS, load_entry_point

REWARD_TERMS = (
    "tracking_lin_vel",
    "tracking_ang_vel",
    "lin_vel_z",
    "ang_vel_xy",
    "orientation",
    "torques",
    "dof_acc",
    "action_rate",
    "dof_pos_limits",
    "feet_air_time",
    "collision",
    "termination",
    "feet_air_time_biped",
    "feet_slip",
    "feet_clearance",
    "joint_deviation",
    "posture",
    "upright",
)

_TERMINATION, _JOINT_LIMITS = REWARD_TERMS.index("termination"), REWARD_TERMS.index("dof_pos_limits")
DIAGNOSTICS = ("base_height", "joint_limit_excess", "actions_beyond_bounds")
"""Episode metrics that show a failing gait early, each a per-step mean over the episode: the base's height above the
ground (m), the summed excess of the joints beyond their soft limits (rad; the ``dof_pos_limits`` term), and the
fraction of the policy's action entries beyond the action bounds (before clipping). A policy that sprawls onto its
joint limits shows a low base, a growing excess and actions beyond the bounds within minutes."""


@dataclasses.dataclass(frozen=True)
class VelocitySettings:
    """The task's settings, each an env keyword. Defaults are legged_gym's (``LeggedRobotCfg``) unless noted."""

    physics_dt: float = 0.005
    """Physics step (s): 200 Hz."""
    decimation: int = 4
    """Physics steps per policy step: 50 Hz control."""
    episode_length_s: float = 20.0
    """Episodes are truncated after this long (s)."""
    clip_actions: float = 100.0
    """The action bounds of a joint without a range (and the widest of any joint's): [-clip_actions, clip_actions]."""

    lin_vel_x_range: tuple[float, float] = (-1.0, 1.0)
    """Commanded forward velocity range (m/s)."""
    lin_vel_y_range: tuple[float, float] = (-1.0, 1.0)
    """Commanded sideways velocity range (m/s)."""
    ang_vel_yaw_range: tuple[float, float] = (-1.0, 1.0)
    """Commanded yaw rate range (rad/s); in heading mode, the yaw rate command is clipped to it."""
    heading_command: bool = False
    """Command a heading instead of a yaw rate: the yaw rate command is 0.5 x the heading error, clipped (legged_gym's
    heading mode, on there by default)."""
    heading_range: tuple[float, float] = (-math.pi, math.pi)
    """Commanded heading range (rad), in heading mode."""
    resampling_time_s: float = 10.0
    """Commands are drawn again this often (s), and at every reset."""
    standing_probability: float = 0.1
    """The probability that a drawn command is zero (Isaac Lab's ``rel_standing_envs``, 0.02 there)."""
    min_command_speed: float = 0.2
    """Planar commands slower than this (m/s) are set to zero, as legged_gym does."""
    command_curriculum: bool = False
    """Widen the v_x range as tracking improves (see the module docstring)."""
    max_command_curriculum: float = 2.0
    """The curriculum's widest v_x range is [-max, max] (m/s)."""

    tracking_sigma: float = 0.25
    """Width of the tracking rewards' exponential kernels ((m/s)^2, (rad/s)^2)."""
    feet_air_time_target: float = 0.5
    """The air time (s) above which a touch-down is rewarded."""
    tracking_lin_vel_weight: float = 1.5
    """Isaac Lab's Go1 (``UnitreeGo1RoughEnvCfg``); legged_gym: 1."""
    tracking_ang_vel_weight: float = 0.75
    """Isaac Lab's Go1; legged_gym: 0.5."""
    lin_vel_z_weight: float = -2.0
    ang_vel_xy_weight: float = -0.05
    orientation_weight: float = -2.5
    """Isaac Lab's Go1 flat config (``flat_orientation_l2``); legged_gym's base config has 0, its A1 and Go1 configs
    -1 (the ``legged_gym`` preset)."""
    torques_weight: float = -2e-4
    """Isaac Lab's Go1; legged_gym: -1e-5."""
    dof_acc_weight: float = -2.5e-7
    action_rate_weight: float = -0.01
    dof_pos_limits_weight: float = -1.0
    """MuJoCo Playground's Go1 joystick and mjlab's velocity task use -1 (legged_gym's A1 and Go1: -10; Isaac Lab's
    Go1: 0). Without it, some seeds sprawl onto the joint limits, where exploration noise costs nothing."""
    feet_air_time_weight: float = 0.25
    """Isaac Lab's Go1; legged_gym: 1."""
    collision_weight: float = 0.0
    """Thigh and calf contacts; Isaac Lab's Go1 drops the term, legged_gym weighs it -1."""
    termination_weight: float = 0.0
    """A penalty for ending the episode by falling (legged_gym's ``termination`` term, 0 in its base config). It is
    added after the clip at zero (``only_positive_rewards``), as legged_gym adds it, so that the clip cannot hide it."""
    feet_air_time_biped_weight: float = 0.0
    """Isaac Lab's biped gait term (``feet_air_time_positive_biped``; its G1 flat config: 0.75)."""
    feet_air_time_biped_threshold: float = 0.4
    """The biped term's cap (s)."""
    feet_slip_weight: float = 0.0
    """Feet sliding while they carry weight (Isaac Lab's ``feet_slide``; its G1 configs: -0.1)."""
    feet_clearance_weight: float = 0.0
    """Swing feet away from the clearance height, weighted by their speed (mjlab's ``feet_clearance``: -2)."""
    feet_clearance_target: float = 0.1
    """The height (m) above the ground that ``feet_clearance`` asks of each foot body's origin (mjlab: 0.1 m for a
    site on the sole; a foot body's origin sits above its sole, so a robot's setting adds that offset: 0.035 m on the
    humanoid)."""
    joint_deviation_weight: float = 0.0
    """Joints of ``joint_deviation_joints`` away from the default pose (Isaac Lab's ``joint_deviation_l1`` on G1's hip
    yaw, hip roll and torso joints: -0.1)."""
    joint_deviation_joints: tuple[str, ...] = ()
    """The joints ``joint_deviation`` counts (names of the robot's ``joints``)."""
    posture_weight: float = 0.0
    """A reward for holding the joints near the default pose (mjlab's ``pose`` term, weight 1 there): it keeps a policy
    off postures that exploration finds cheap, such as a sprawl on the joint limits or stiff, straight legs."""
    posture_std: float = 0.5
    """The posture kernel's width (rad): mjlab's Go1 uses 0.3 (hips and thighs) and 0.6 (calves) while walking."""
    upright_weight: float = 0.0
    """A reward for a level base (mjlab's ``upright`` term, weight 1 there), a gain where ``orientation`` is a cost."""
    only_positive_rewards: bool = False
    """Clip each step's total reward (all terms but ``termination``) at zero from below, as legged_gym does by default
    (the ``legged_gym`` preset), so that early on the penalties do not teach the robot to end its episodes (the
    per-term sums keep the unclipped terms). Isaac Lab does not clip."""

    observe_base_lin_vel: bool = True
    """Give the policy the base's linear velocity (first in its observation), as legged_gym and Isaac Lab do. Off, the
    policy is blind to it (the critic always sees it), so a robot needs no velocity estimator to run it; blind
    policies have not learned to walk here yet."""

    terrain: dict | None = None
    """Rough terrain: a dict of ``terrain.TerrainSettings`` fields (``{}`` for legged_gym's layout), or ``None`` for
    flat ground."""
    terrain_curriculum: bool = True
    """On rough terrain, move each environment's level with how far it walked (legged_gym's terrain curriculum)."""
    max_init_terrain_level: int = 5
    """On rough terrain, environments start on a level drawn from 0 to this (legged_gym: 5)."""
    observe_height_scan: bool = False
    """On rough terrain, give the policy the height scan (last in its observation): the perceptive policy. Off, it
    walks blind; the critic always sees the scan."""

    reset_bank: str | None = None
    """A reset bank's file (``rl_suite.envs.mujoco.reset_bank``): episodes start from its states with probability
    ``reset_bank_fraction``, the rest from the task's own reset; ``use_reset_bank`` attaches a bank in code."""
    reset_bank_fraction: float = 0.5

    max_roll_pitch: float = 1.0
    """Episodes terminate when roll or pitch exceeds this (rad)."""
    fall_grace_s: float = 0.0
    """For this long after an episode starts (s), trunk contact and tilt do not end it: the time a robot started
    from a fallen pose (a reset bank of ``recovery.fallen_states``) has to get up."""
    metric_max_speed: float = 1.0
    """``tracking_error_lin`` counts the steps whose command speed |cmd_xy| is at most this (m/s)."""

    reset_joint_pos_noise: float = 0.1
    """Joint positions at reset: the default pose plus uniform noise of this half-width (rad)."""
    reset_joint_vel_noise: float = 0.0
    """Joint velocities at reset: uniform of this half-width (rad/s)."""
    reset_base_vel_noise: float = 0.0
    """Base linear and angular velocities at reset: uniform of this half-width (m/s, rad/s); legged_gym uses 0.5."""

    friction_range: tuple[float, float] | None = None
    """Friction coefficient of every contact, uniform in this range per environment; None keeps the model's
    (legged_gym: 0.5 to 1.25)."""
    added_mass_range: tuple[float, float] = (0.0, 0.0)
    """Mass added to the base (kg), uniform (legged_gym: -1 to 1). The base's inertia scales with its mass."""
    com_offset_range: tuple[float, float] = (0.0, 0.0)
    """Offset of the base's centre of mass, uniform per axis (m)."""
    motor_strength_range: tuple[float, float] = (1.0, 1.0)
    """Factor on each joint's PD torque, uniform per joint (walk-these-ways: 0.9 to 1.1)."""
    kp_range: tuple[float, float] = (1.0, 1.0)
    """Factor on every Kp of an environment, uniform (walk-these-ways: 0.8 to 1.3)."""
    kd_range: tuple[float, float] = (1.0, 1.0)
    """Factor on every Kd of an environment, uniform (walk-these-ways: 0.5 to 1.5)."""
    max_latency_steps: int = 0
    """Action latency: each environment draws a delay of 0 to this many physics steps at reset."""
    obs_noise_level: float = 0.0
    """Multiplies ``obs_noise_scales``; 0 for no noise (legged_gym: 1)."""
    obs_noise_scales: dict | None = None
    """Half-widths of the uniform noise per observation term, in the term's units before scaling; None for
    legged_gym's: base_lin_vel 0.1, base_ang_vel 0.2, projected_gravity 0.05, joint_pos 0.01, joint_vel 1.5,
    height_scan 0.1, others 0."""
    push_velocity: float = 0.0
    """Pushes: a uniform kick of up to this much (m/s) on the base's planar velocity (legged_gym: 1.0)."""
    push_interval_s: float = 15.0
    """How often each environment is pushed (s)."""

    def __post_init__(self):
        for name in (
            "lin_vel_x_range",
            "lin_vel_y_range",
            "ang_vel_yaw_range",
            "heading_range",
            "added_mass_range",
            "com_offset_range",
            "motor_strength_range",
            "kp_range",
            "kd_range",
            "friction_range",
        ):
            value = getattr(self, name)
            if value is None and name == "friction_range":
                continue
            if len(value) != 2 or not all(math.isfinite(v) for v in value):
                raise ValueError(f"{name} must be a (low, high) pair of finite numbers, got {value!r}")
            if value[0] > value[1]:
                raise ValueError(f"{name} is inverted: low {value[0]} > high {value[1]}")
            object.__setattr__(self, name, (float(value[0]), float(value[1])))
        for name in ("motor_strength_range", "kp_range", "kd_range", "friction_range"):
            value = getattr(self, name)
            if value is not None and value[0] < 0:
                raise ValueError(f"{name} must not be negative, got {value!r}")
        object.__setattr__(self, "joint_deviation_joints", tuple(self.joint_deviation_joints))
        if not self.feet_air_time_biped_threshold > 0:
            raise ValueError(
                f"feet_air_time_biped_threshold must be positive (s), got {self.feet_air_time_biped_threshold!r}"
            )
        if not self.posture_std > 0:
            raise ValueError(f"posture_std must be positive (rad), got {self.posture_std!r}")
        if not math.isfinite(self.feet_clearance_target):
            raise ValueError(f"feet_clearance_target must be a finite height (m), got {self.feet_clearance_target!r}")
        if not self.fall_grace_s >= 0:
            raise ValueError(f"fall_grace_s must be at least 0 (s), got {self.fall_grace_s!r}")
        if self.decimation < 1 or self.physics_dt <= 0 or self.episode_length_s <= 0:
            raise ValueError("decimation must be >= 1, physics_dt and episode_length_s positive")
        if not 0.0 <= self.standing_probability <= 1.0:
            raise ValueError(f"standing_probability must be in [0, 1], got {self.standing_probability}")
        if not 0 <= self.max_latency_steps <= self.decimation:
            raise ValueError(
                f"max_latency_steps must be in [0, decimation={self.decimation}], got {self.max_latency_steps}"
            )
        unknown = sorted(set(self.obs_noise_scales or {}) - set(POLICY_TERMS))
        if unknown:
            raise ValueError(f"obs_noise_scales names unknown terms {unknown}; the terms are {list(POLICY_TERMS)}")
        if self.terrain is None:
            if self.observe_height_scan:
                raise ValueError("observe_height_scan needs rough terrain: set terrain (a dict, {} for the defaults)")
        else:
            levels = self.terrain_settings().levels
            if not 0 <= self.max_init_terrain_level < levels:
                raise ValueError(
                    f"max_init_terrain_level must be in [0, {levels - 1}] (the terrain's levels - 1), got "
                    f"{self.max_init_terrain_level}"
                )

    def terrain_settings(self) -> TerrainSettings | None:
        """``terrain`` as ``TerrainSettings`` (``None`` on flat ground)."""
        if self.terrain is None:
            return None
        if not isinstance(self.terrain, dict):
            raise ValueError(f"terrain must be a dict of TerrainSettings fields or None, got {self.terrain!r}")
        fields = {f.name for f in dataclasses.fields(TerrainSettings)}
        unknown = sorted(set(self.terrain) - fields)
        if unknown:
            raise ValueError(f"terrain has unknown settings {unknown}; it takes {sorted(fields)}")
        return TerrainSettings(**self.terrain)


POLICY_TERMS = (
    "base_lin_vel",
    "base_ang_vel",
    "projected_gravity",
    "command",
    "joint_pos",
    "joint_vel",
    "last_action",
    "height_scan",
)
_OBS_SCALES = {
    "base_lin_vel": 2.0,
    "base_ang_vel": 0.25,
    "projected_gravity": 1.0,
    "command": (2.0, 2.0, 0.25),
    "joint_pos": 1.0,
    "joint_vel": 0.05,
    "last_action": 1.0,
    "height_scan": 5.0,
}
_NOISE_SCALES = {
    "base_lin_vel": 0.1,
    "base_ang_vel": 0.2,
    "projected_gravity": 0.05,
    "joint_pos": 0.01,
    "joint_vel": 1.5,
    "height_scan": 0.1,
}


def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``v`` (world frame, ``[N, 3]``) in the frame of the unit quaternions ``q`` (``[N, 4]``, MuJoCo's w, x, y, z)."""
    w, u = q[:, :1], q[:, 1:]
    return v * (2.0 * w * w - 1.0) - torch.cross(u, v, dim=1) * (2.0 * w) + u * (2.0 * (u * v).sum(1, keepdim=True))


def yaw_of(q: torch.Tensor) -> torch.Tensor:
    w, x, y, z = q.unbind(1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def wrap_angle(angle: torch.Tensor) -> torch.Tensor:
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


def single_stance_time(
    contact: torch.Tensor, contact_time: torch.Tensor, air_time: torch.Tensor, cap: float
) -> torch.Tensor:
    """Isaac Lab's ``feet_air_time_positive_biped`` for feet ``[N, F]``: while exactly one foot is down, the least
    over the feet of how long each has been in its mode (down: ``contact_time``; up: ``air_time``), capped at
    ``cap``; zero in double support and in flight."""
    in_mode = torch.where(contact, contact_time, air_time)
    single_stance = contact.sum(1) == 1
    return torch.where(single_stance, in_mode.amin(1), 0.0).clamp(max=cap)


def action_bounds(robot: RobotConfig, joint_range: np.ndarray, clip_actions: float) -> tuple[np.ndarray, np.ndarray]:
    """The action ``Box``'s bounds ``(low [J], high [J])``, float32, in action units: each joint's range mapped through
    the default pose and the action scale, ``(range - default_joint_pos) / action_scale``, so that no action asks
    for a target beyond a joint's range; ``[-clip_actions, clip_actions]`` where a joint has no range (and where that
    is narrower). Raises where the default pose lies outside a joint's range."""
    default, scale = robot.per_joint("default_joint_pos"), robot.per_joint("action_scale")
    if np.any(scale <= 0):
        raise ValueError(f"robot {robot.name!r}: action_scale must be above 0, got {scale.tolist()}")
    low, high = np.asarray(joint_range, dtype=np.float64).T
    outside = [
        f"{name} ({pose:g} rad, range [{lo:g}, {hi:g}])"
        for name, pose, lo, hi in zip(robot.joints, default, low, high, strict=True)
        if not lo <= pose <= hi
    ]
    if outside:
        raise ValueError(
            f"robot {robot.name!r}: the joint ranges exclude the default pose of {', '.join(outside)}; "
            "default_joint_pos must lie within each joint's range"
        )
    with np.errstate(invalid="ignore"):  # an unlimited joint's inf - default stays inf
        low, high = (low - default) / scale, (high - default) / scale
    low, high = np.maximum(low, -clip_actions), np.minimum(high, clip_actions)
    return low.astype(np.float32), high.astype(np.float32)


class LeggedVelocityEnv(PhysicsRendering, VecEnv):
    """``num_envs`` copies of the velocity-tracking task for ``robot`` (a built-in robot's name, a dict of
    ``RobotConfig`` fields, or a ``RobotConfig``). See the module docstring; ``settings`` are ``VelocitySettings``.

    Args:
        backend: ``"cpu"`` or ``"warp"``; ``None`` picks by device, as ``MujocoVecEnv`` does.
        nthread: native threads of the CPU backend; 0 uses every core.
        physics_options: keyword arguments for the backend's constructor (Warp's ``nconmax``, ``njmax``).
    """

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        robot: str | dict | RobotConfig = "quadruped",
        backend: str | None = None,
        nthread: int = 0,
        physics_options: dict | None = None,
        check_values: bool | None = None,
        masked_resets: bool | None = None,
        reward_preset: str = "suite",
        **settings,
    ):
        if reward_preset not in REWARD_PRESETS:
            raise ValueError(f"reward_preset {reward_preset!r} does not exist; the presets are {list(REWARD_PRESETS)}")
        fields = {f.name for f in dataclasses.fields(VelocitySettings)}
        unknown = sorted(set(settings) - fields)
        weights = [name for name in unknown if name.endswith("_weight")]
        if weights:
            raise TypeError(
                f"LeggedVelocityEnv got reward weights of terms that do not exist: {weights}; the reward terms are "
                f"{list(REWARD_TERMS)} (each weighted by <term>_weight)"
            )
        if unknown:
            raise TypeError(f"LeggedVelocityEnv got unknown settings {unknown}; it takes {sorted(fields)}")
        self.reward_preset = reward_preset
        self.settings = s = VelocitySettings(**{**REWARD_PRESETS[reward_preset], **settings})
        self.robot = robot = robot_config(robot)
        terrain_settings = s.terrain_settings()
        self.terrain = Terrain(terrain_settings) if terrain_settings is not None else None
        self.model = model = build_model(robot, s.physics_dt, terrain=self.terrain)
        self.bound = bound = bind(robot, model)
        self.dt = s.physics_dt * s.decimation
        action_low, action_high = action_bounds(robot, bound.joint_range, s.clip_actions)
        joints, feet = len(robot.joints), len(robot.feet)
        self.observation_terms = [("base_lin_vel", 3)] if s.observe_base_lin_vel else []
        self.observation_terms += [
            ("base_ang_vel", 3),
            ("projected_gravity", 3),
            ("command", 3),
            ("joint_pos", joints),
            ("joint_vel", joints),
            ("last_action", joints),
        ]
        self.observation_terms += [("height_scan", HEIGHT_SCAN_SIZE)] if s.observe_height_scan else []
        obs_size = sum(size for _, size in self.observation_terms)
        super().__init__(
            num_envs,
            device,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_size,), np.float32),
            action_space=gym.spaces.Box(action_low, action_high, (joints,), np.float32),
            max_episode_steps=max(1, round(s.episode_length_s / self.dt)),
            seed=seed,
            check_values=check_values,
            masked_resets=masked_resets,
        )
        self.param_names = (
            ["friction", "added_mass", "com_x", "com_y", "com_z"]
            + [f"motor_strength_{j}" for j in robot.joints]
            + ["kp_factor", "kd_factor", "latency_steps"]
        )
        # the critic sees the policy's terms but the scan, its privileged terms, then on rough terrain the scan, last
        # whether the policy sees it or not: a critic of flat ground extends to rough terrain by new inputs at the end
        self._proprio_size = obs_size - HEIGHT_SCAN_SIZE * s.observe_height_scan
        critic_scan = HEIGHT_SCAN_SIZE * (self.terrain is not None)
        critic_size = self._proprio_size + 3 + 1 + feet + len(self.param_names) + critic_scan
        self.offer_critic_observation(gym.spaces.Box(-np.inf, np.inf, (critic_size,), np.float32))

        if backend is None:
            backend = "cpu" if self.device.type == "cpu" else "warp"
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {tuple(BACKENDS)} or None, got {backend!r}")
        if self.terrain is not None:
            check_collidable(model, backend)
        options = {"nthread": nthread} if backend == "cpu" else {}
        options.update(physics_options or {})
        physics_class = load_entry_point(BACKENDS[backend])  # a key of the table, never a name from a file
        # the feet's positions and velocities, for the biped terms that read them
        self._feet_kinematics = bool(s.feet_slip_weight or s.feet_clearance_weight)
        fields = ("cfrc_ext", "actuator_force") + ("xpos", "cvel", "subtree_com") * self._feet_kinematics
        self.physics = physics_class(model, self.num_envs, fields, device=self.device, **options)
        self.backend = backend
        self._bind_tensors(model, bound)
        self._bind_randomized_fields(model)
        self.reset_bank, self.reset_bank_fraction = None, 0.0
        if s.reset_bank is not None:
            self.use_reset_bank(ResetBank.load(s.reset_bank, model), s.reset_bank_fraction)

    def use_reset_bank(self, bank: ResetBank | None, fraction: float = 0.5) -> None:
        """Start each episode from one of ``bank``'s states with probability ``fraction`` (``None``: no bank),
        as ``MujocoVecEnv.use_reset_bank`` does. A bank state's base position is relative to the episode's start
        point (the origin on flat ground, the tile's start on rough terrain), its height above the ground there."""
        self.reset_bank, self.reset_bank_fraction = attached(bank, fraction, self.model, self.physics)

    @classmethod
    def accepted_keywords(cls, **registered) -> list[str]:
        """The keywords ``make`` passes on (for ``rl_suite.registry.accepted_keywords``): the constructor's and every
        ``VelocitySettings`` field."""
        names = ["robot", "backend", "nthread", "physics_options", "reward_preset", *CONTRACT_OPTIONS]
        return names + [f.name for f in dataclasses.fields(VelocitySettings)]

    def robot_metadata(self) -> dict:
        """What a robot programmer needs to run a policy trained here, as plain data: the ``robot`` entry of an
        exported file's metadata (rl_suite/deploy/export.py). The exported policy returns ``joint_pos_offset``: joint
        ``j``'s target is ``default_joint_pos[j] + output[j]``, tracked by PD (``kp``, ``kd``, torques clipped to
        ``torque_limit``) every ``physics_dt``, with a new output every ``1 / control_hz`` s. The observation is the
        concatenation of ``observation``'s terms in order, each the raw quantity (units in velocity.py's docstring)
        times its ``scale``, element by element. ``mjcf`` resolves with ``rl_suite.envs.robots.mjcf_path``."""
        robot, s = self.robot, self.settings

        def floats(values) -> list[float | None]:
            return [float(v) if math.isfinite(v) else None for v in np.asarray(values, dtype=np.float64).ravel()]

        scales = self._obs_scale.tolist()
        observation, start = [], 0
        for name, size in self.observation_terms:
            observation.append({"name": name, "size": size, "scale": scales[start : start + size]})
            start += size
        entry = {
            "name": robot.name,
            "mjcf": robot.mjcf,
            "joint_names": list(robot.joints),
            **{field: floats(robot.per_joint(field)) for field in ("default_joint_pos", "action_scale", "kp", "kd")},
            "torque_limit": floats(robot.per_joint("torque_limit")),
            "velocity_limit": floats(robot.per_joint("velocity_limit")),
            "clip_actions": float(s.clip_actions),
            # the action bounds, in action units (offset / action_scale): each joint's range about the default pose
            "action_low": floats(self.action_space.low),
            "action_high": floats(self.action_space.high),
            "physics_dt": float(s.physics_dt),
            "decimation": int(s.decimation),
            "control_hz": 1.0 / self.dt,
            "base_body": robot.base_body,
            "feet": list(robot.feet),
            "init_base_height": float(robot.init_base_height),
            "output": "joint_pos_offset",
            "observation": observation,
            "commands": {
                "lin_vel_x": list(s.lin_vel_x_range),
                "lin_vel_y": list(s.lin_vel_y_range),
                "ang_vel_yaw": list(s.ang_vel_yaw_range),
            },
        }
        if s.observe_height_scan:  # where the scan's points lie, in the order the observation lists them
            entry["height_scan"] = {
                "x": HEIGHT_SCAN_X.round(6).tolist(),
                "y": HEIGHT_SCAN_Y.round(6).tolist(),
                "order": "x-major: the point (x[i], y[j]) is entry i * len(y) + j",
                "frame": "m from the base, in the horizontal frame turned with the base's yaw",
                "value": f"base height - {HEIGHT_SCAN_BASE_OFFSET} m - ground height, clipped to [-1, 1] m",
            }
        return entry

    # -- set-up ---------------------------------------------------------------------------------------------

    def _bind_tensors(self, model, bound) -> None:
        s, robot, n, dev = self.settings, self.robot, self.num_envs, self.device
        f32 = dict(device=dev, dtype=torch.float32)
        sim = dict(device=self.physics.device, dtype=self.physics.dtype)
        self._qpos_ids = torch.as_tensor(bound.joint_qpos, device=self.physics.device)
        self._dof_ids = torch.as_tensor(bound.joint_dof, device=self.physics.device)
        self._feet = torch.as_tensor(bound.feet, device=self.physics.device)
        self._termination = torch.as_tensor(bound.termination, device=self.physics.device)
        self._penalized = torch.as_tensor(bound.penalized, device=self.physics.device)
        self._contact_bodies = torch.cat([self._feet, self._termination, self._penalized])
        self._default_pos = torch.as_tensor(robot.per_joint("default_joint_pos"), **f32)
        unknown = sorted(set(s.joint_deviation_joints) - set(robot.joints))
        if unknown:
            raise ValueError(
                f"joint_deviation_joints names {unknown}, which are not joints of robot {robot.name!r}; its joints "
                f"are {list(robot.joints)}"
            )
        self._deviation_mask = torch.tensor([name in s.joint_deviation_joints for name in robot.joints], **f32)
        # MuJoCo's cvel is about the subtree centre of mass of each body's tree root (the base)
        self._feet_root = torch.as_tensor(model.body_rootid[bound.feet], device=self.physics.device)
        self._default_pos_sim = self._default_pos.to(**sim)
        self._action_scale = torch.as_tensor(robot.per_joint("action_scale"), **f32)
        self._action_low = torch.as_tensor(self.action_space.low, **f32)
        self._action_high = torch.as_tensor(self.action_space.high, **f32)
        low, high = torch.as_tensor(bound.joint_range, **f32).unbind(1)
        middle, half = (low + high) / 2, (high - low) / 2 * robot.soft_joint_limit
        # relative to the default pose, as the observed joint positions are
        self._soft_low, self._soft_high = middle - half - self._default_pos, middle + half - self._default_pos
        scales = [torch.as_tensor(_OBS_SCALES[name], **f32).expand(size) for name, size in self.observation_terms]
        self._obs_scale = torch.cat(scales)
        noise = {**_NOISE_SCALES, **(s.obs_noise_scales or {})} if s.obs_noise_level else {}
        noise_rows = [torch.full((size,), float(noise.get(name, 0.0))) for name, size in self.observation_terms]
        self._noise_half_width = (torch.cat(noise_rows).to(dev) * s.obs_noise_level) * self._obs_scale
        self._noisy = bool(s.obs_noise_level) and bool(self._noise_half_width.any())
        self._gravity = torch.tensor([[0.0, 0.0, -1.0]], **f32).expand(n, 3)
        self._every_env = torch.ones(n, dtype=torch.bool, device=dev)  # the noise's draw mask, every step
        self._no_term = torch.zeros(n, **f32)  # a reward term whose weight is zero
        self._resample_steps = max(1, round(s.resampling_time_s / self.dt))
        self._push_steps = max(1, round(s.push_interval_s / self.dt))

        joints, feet = len(robot.joints), len(robot.feet)
        # Task state: every tensor here decides what comes next, and state_dict holds them all.
        self._task_state = {
            "commands": torch.zeros(n, 3, **f32),
            "heading": torch.zeros(n, **f32),
            "last_actions": torch.zeros(n, joints, **f32),
            "last_joint_vel": torch.zeros(n, joints, **f32),
            "air_time": torch.zeros(n, feet, **f32),
            "last_contacts": torch.zeros(n, feet, dtype=torch.bool, device=dev),
            "targets": torch.zeros(n, joints, **sim),  # the joint targets acting now (the previous ones under latency)
            "latency": torch.zeros(n, dtype=torch.long, device=dev),
            "noise": torch.zeros(n, self.observation_space.shape[0], **f32),
            "params": torch.zeros(n, len(self.param_names), **f32),
            "term_sums": torch.zeros(n, len(REWARD_TERMS), **f32),
            "error_sums": torch.zeros(n, 3, **f32),  # squared planar error, steps counted for it, squared yaw error
            "diagnostic_sums": torch.zeros(n, len(DIAGNOSTICS), **f32),  # per-step sums of DIAGNOSTICS' quantities
            # [low, high] x (v_x, v_y, yaw rate): the curriculum widens v_x's
            "command_ranges": torch.tensor(
                [s.lin_vel_x_range, s.lin_vel_y_range, s.ang_vel_yaw_range], **f32
            ).T.contiguous(),
            "curriculum_sums": torch.zeros(2, **f32),  # tracking sums of the episodes ended in this window, their count
        }
        if s.feet_air_time_biped_weight:
            self._task_state["contact_time"] = torch.zeros(n, feet, **f32)
        self._placement = None
        if self.terrain is not None:
            self._placement = TerrainPlacement(self.terrain, n, dev, s.max_init_terrain_level, s.terrain_curriculum)
            self._task_state["terrain_levels"] = self._placement.levels
        self._starting = False  # True during reset(): the first episodes draw their terrain levels
        for name, value in self._task_state.items():
            setattr(self, f"_{name}", value)
        self._params[:, 0] = 1.0  # the nominal parameters: friction, motor strengths and gain factors 1, the rest 0
        self._params[:, 5 : 7 + joints] = 1.0
        self._steps_in_window = 0
        self._weights = torch.tensor([getattr(s, f"{term}_weight") for term in REWARD_TERMS], **f32) * self.dt
        metric_names = ["tracking_error_lin", "tracking_error_yaw", "fell", *DIAGNOSTICS]
        metric_names += [f"reward_{t}" for t in REWARD_TERMS]
        metric_names += ["terrain_level"] if self.terrain is not None else []
        self._final_metrics = {name: torch.zeros(n, **f32) for name in metric_names}
        self.episode_metric_names = tuple(self._final_metrics)

    def _bind_randomized_fields(self, model) -> None:
        """Per-environment copies of the model fields the sim-to-real kit writes, with their nominal values."""
        s, physics, base = self.settings, self.physics, self.bound.base
        names = []
        if s.friction_range is not None:
            names.append("geom_friction")
        if s.added_mass_range != (0.0, 0.0):
            names += ["body_mass", "body_inertia"]
        if s.com_offset_range != (0.0, 0.0):
            names.append("body_ipos")
        if (s.motor_strength_range, s.kp_range, s.kd_range) != ((1.0, 1.0),) * 3:
            names += ["actuator_gainprm", "actuator_biasprm"]
        sim = dict(device=physics.device, dtype=physics.dtype)
        self._randomized = {
            name: (physics.model_field(name), torch.as_tensor(getattr(model, name), **sim)) for name in names
        }
        self._base_mass = float(model.body_mass[base])

    # -- the contract's hooks ---------------------------------------------------------------------------------

    def _advance(self, actions):
        s, physics = self.settings, self.physics
        sim = physics.device, physics.dtype
        beyond = ((actions < self._action_low) | (actions > self._action_high)).float().mean(1)
        actions = actions.clamp(self._action_low, self._action_high)
        step_number = self._running[1] + 1  # this step's index in its episode, from 1
        if s.push_velocity:
            due = torch.remainder(step_number, self._push_steps) == 0
            kick = Selection(mask=due).uniform(self.rng, -s.push_velocity, s.push_velocity, 2, torch.float32)
            push = torch.where(due[:, None], kick, 0.0).to(*sim)
            physics.qvel[:, :2] += push
        targets = (self._default_pos + self._action_scale * actions).to(*sim)
        if s.max_latency_steps:
            latency = self._latency.to(physics.device)[:, None]
            for substep in range(s.decimation):
                physics.ctrl.copy_(torch.where(latency > substep, self._targets, targets))
                physics.step(1)
        else:
            physics.ctrl.copy_(targets)
            physics.step(s.decimation)
        self._targets.copy_(targets)

        state = self._read_state()
        commands = self._commands
        if s.heading_command:
            low, high = s.ang_vel_yaw_range
            commands[:, 2] = (0.5 * wrap_angle(self._heading - state["yaw"])).clamp(low, high)
        forces = state["forces"]
        gravity = state["gravity"]
        roll = torch.atan2(gravity[:, 1].abs(), -gravity[:, 2])
        pitch = torch.asin(gravity[:, 0].abs().clamp(max=1.0))
        trunk_contact = (forces[:, self._termination_rows].norm(dim=2) > 1.0).any(1)
        fallen = trunk_contact | (roll > s.max_roll_pitch) | (pitch > s.max_roll_pitch)
        if s.fall_grace_s:  # a robot started on its back has this long to get up
            fallen &= step_number * self.dt > s.fall_grace_s
        self._terminated.copy_(fallen)
        contact = forces[:, self._feet_rows, 2] > 1.0
        first_contact = (self._air_time > 0) & (contact | self._last_contacts)
        self._air_time += self.dt
        moving = commands[:, :2].norm(dim=1) > 0.1
        lin_error = (commands[:, :2] - state["lin_vel"][:, :2]).square().sum(1)
        yaw_error = (commands[:, 2] - state["ang_vel"][:, 2]).square()
        joint_pos, joint_vel = state["joint_pos"], state["joint_vel"]
        biped_terms = self._biped_terms(state, contact, moving)
        terms = torch.stack(
            [
                torch.exp(-lin_error / s.tracking_sigma),
                torch.exp(-yaw_error / s.tracking_sigma),
                state["lin_vel"][:, 2].square(),
                state["ang_vel"][:, :2].square().sum(1),
                state["gravity"][:, :2].square().sum(1),
                state["torques"].square().sum(1),
                ((joint_vel - self._last_joint_vel) / self.dt).square().sum(1),
                (actions - self._last_actions).square().sum(1),
                ((self._soft_low - joint_pos).clamp_min(0) + (joint_pos - self._soft_high).clamp_min(0)).sum(1),
                ((self._air_time - s.feet_air_time_target) * first_contact).sum(1) * moving,
                (forces[:, self._penalized_rows].norm(dim=2) > 0.1).sum(1).float(),
                self._terminated.float(),
                *biped_terms,
                (joint_pos.abs() * self._deviation_mask).sum(1),
                torch.exp(-joint_pos.square().mean(1) / s.posture_std**2) if s.posture_weight else self._no_term,
                torch.exp(-state["gravity"][:, :2].square().sum(1) / 0.2) if s.upright_weight else self._no_term,
            ],
            dim=1,
        )
        self._air_time *= ~(contact | self._last_contacts)
        self._last_contacts.copy_(contact)
        weighted = terms * self._weights
        self._term_sums += weighted
        if s.only_positive_rewards:  # termination after the clip, as legged_gym adds it, so the clip cannot hide it
            termination = weighted[:, _TERMINATION]
            self._reward.copy_((weighted.sum(1) - termination).clamp_min(0.0) + termination)
        else:
            self._reward.copy_(weighted.sum(1))
        self._diagnostic_sums += torch.stack([state["height"], terms[:, _JOINT_LIMITS], beyond], dim=1)
        counted = commands[:, :2].norm(dim=1) <= s.metric_max_speed
        self._error_sums += torch.stack([lin_error * counted, counted.float(), yaw_error], dim=1)
        self._last_actions.copy_(actions)
        self._last_joint_vel.copy_(joint_vel)

        resample = torch.remainder(step_number, self._resample_steps) == 0
        self._draw_commands(Selection(mask=resample))
        if self._noisy:
            noise = self.rng.uniform(-1.0, 1.0, self._noise.shape[1], mask=self._every_env, dtype=torch.float32)
            self._noise.copy_(noise * self._noise_half_width)
        self._step_state = state
        return self._reward, self._terminated

    def _biped_terms(self, state, contact: torch.Tensor, moving: torch.Tensor) -> list[torch.Tensor]:
        """``feet_air_time_biped``, ``feet_slip`` and ``feet_clearance`` (module docstring), zero where their weights
        are: the quadruped's step reads no foot kinematics."""
        s = self.settings
        biped = slip = clearance = self._no_term
        if s.feet_air_time_biped_weight:
            self._contact_time.add_(self.dt).mul_(contact)
            biped = single_stance_time(contact, self._contact_time, self._air_time, s.feet_air_time_biped_threshold)
            biped = biped * moving
        if self._feet_kinematics:
            speed = state["feet_vel"][..., :2].norm(dim=-1)
            slip = (speed * contact).sum(1)
            height = state["feet_pos"][..., 2]
            if self.terrain is not None:
                height = height - self.terrain.heights_at(state["feet_pos"][..., :2])
            commands = self._commands
            active = commands[:, :2].norm(dim=1) + commands[:, 2].abs() > 0.05
            clearance = ((height - s.feet_clearance_target).abs() * speed).sum(1) * active
        return [biped, slip, clearance]

    def _read_state(self, env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The quantities the task reads, as float32 on ``device``: of every environment, or of ``env_ids``."""
        physics, dev = self.physics, self.device
        sim_ids = None if env_ids is None else env_ids.to(physics.device)

        def rows(field: torch.Tensor) -> torch.Tensor:
            return field if sim_ids is None else field.index_select(0, sim_ids)

        qpos = rows(physics.qpos).to(dev, torch.float32)
        qvel = rows(physics.qvel).to(dev, torch.float32)
        quat = qpos[:, 3:7]
        quat = quat / quat.norm(dim=1, keepdim=True)
        forces = rows(physics.derived["cfrc_ext"]).index_select(1, self._contact_bodies)[..., 3:].to(dev, torch.float32)
        gravity = self._gravity if sim_ids is None else self._gravity[: len(sim_ids)]
        height = qpos[:, 2]
        if self.terrain is not None:  # above the ground under the base, read once for the reward and the critic
            height = height - self.terrain.heights_at(qpos[:, :2])
        return {
            "position": qpos[:, :3],
            "height": height,
            "yaw": yaw_of(quat),
            "lin_vel": quat_rotate_inverse(quat, qvel[:, :3]),
            "ang_vel": qvel[:, 3:6],  # a free joint's angular velocity is in the body frame
            "gravity": quat_rotate_inverse(quat, gravity),
            "joint_pos": qpos.index_select(1, self._qpos_ids.to(dev)) - self._default_pos,
            "joint_vel": qvel.index_select(1, self._dof_ids.to(dev)),
            "torques": rows(physics.derived["actuator_force"]).to(dev, torch.float32),
            "forces": forces,  # [N, feet + termination + penalised bodies, 3], world frame
            **(self._read_feet(rows) if self._feet_kinematics else {}),
        }

    def _read_feet(self, rows) -> dict[str, torch.Tensor]:
        """The feet's positions and linear velocities ``[N, F, 3]`` (world frame, of their bodies' origins). MuJoCo's
        ``cvel`` is ``(angular, linear)`` at the tree root's subtree centre of mass ``c``, so
        ``v(p) = v_c + w x (p - c)``."""
        derived, dev = self.physics.derived, self.device
        position = rows(derived["xpos"]).index_select(1, self._feet)
        spatial = rows(derived["cvel"]).index_select(1, self._feet)
        centre = rows(derived["subtree_com"]).index_select(1, self._feet_root)
        velocity = spatial[..., 3:] + torch.cross(spatial[..., :3], position - centre, dim=-1)
        return {"feet_pos": position.to(dev, torch.float32), "feet_vel": velocity.to(dev, torch.float32)}

    @property
    def _feet_rows(self) -> slice:
        return slice(0, len(self._feet))

    @property
    def _termination_rows(self) -> slice:
        return slice(len(self._feet), len(self._feet) + len(self._termination))

    @property
    def _penalized_rows(self) -> slice:
        start = len(self._feet) + len(self._termination)
        return slice(start, start + len(self._penalized))

    def _observations(
        self, state: dict[str, torch.Tensor], env_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(policy observation with noise, critic observation)`` of every environment, or of ``env_ids`` (``state``
        then being ``_read_state(env_ids)``)."""

        def rows(task_state: torch.Tensor) -> torch.Tensor:
            return task_state if env_ids is None else task_state.index_select(0, env_ids)

        s = self.settings
        lin_vel = [state["lin_vel"]] if s.observe_base_lin_vel else []
        scan = self._placement.scan(state["position"], state["yaw"]) if self._placement is not None else None
        clean = torch.cat(
            [
                *lin_vel,
                state["ang_vel"],
                state["gravity"],
                rows(self._commands),
                state["joint_pos"],
                state["joint_vel"],
                rows(self._last_actions),
                *([scan] if s.observe_height_scan else []),
            ],
            dim=1,
        ).mul_(self._obs_scale)
        contact = (state["forces"][:, self._feet_rows, 2] > 1.0).float()
        height = state["height"]
        critic = torch.cat(
            [
                clean[:, : self._proprio_size],
                state["lin_vel"] * _OBS_SCALES["base_lin_vel"],
                height[:, None],
                contact,
                rows(self._params),
                *([scan * _OBS_SCALES["height_scan"]] if scan is not None else []),
            ],
            dim=1,
        )
        return (clean + rows(self._noise) if self._noisy else clean), critic

    def _observe_final(self) -> None:
        obs, critic = self._observations(self._step_state)
        self._final_obs.copy_(obs)
        self._final_critic_obs.copy_(critic)

    def _observe_current(self, env_ids: torch.Tensor | None = None) -> None:
        if env_ids is not None:
            self._obs.copy_(self._final_obs)
            self._critic_obs.copy_(self._final_critic_obs)
            if not env_ids.numel():
                return
        obs, critic = self._observations(self._read_state(env_ids), env_ids)  # the reset rows only, by index
        if env_ids is None:
            self._obs.copy_(obs)
            self._critic_obs.copy_(critic)
        else:
            self._obs.index_copy_(0, env_ids, obs)
            self._critic_obs.index_copy_(0, env_ids, critic)

    def _close_episodes(self, done: torch.Tensor) -> None:
        super()._close_episodes(done)
        s = self.settings
        ended = done.float()
        sums, errors = self._term_sums * ended[:, None], self._error_sums * ended[:, None]
        self._term_sums -= sums
        self._error_sums -= errors
        metrics = self._final_metrics
        # NaN for an episode with no step slow enough to count (averages skip it)
        metrics["tracking_error_lin"].copy_(errors[:, 0].div(errors[:, 1]).sqrt_())
        metrics["tracking_error_yaw"].copy_(errors[:, 2].div(self._final[1].clamp_min(1.0)).sqrt_())
        metrics["fell"].copy_(self._terminated.float() * ended)
        diagnostics = self._diagnostic_sums * ended[:, None]
        self._diagnostic_sums -= diagnostics
        diagnostics /= self._final[1].clamp_min(1.0)[:, None]  # per-step means over the episode
        for i, name in enumerate(DIAGNOSTICS):
            metrics[name].copy_(diagnostics[:, i])
        for i, term in enumerate(REWARD_TERMS):
            metrics[f"reward_{term}"].copy_(sums[:, i])
        if self._placement is not None:
            metrics["terrain_level"].copy_(self._placement.levels.float())
        if s.command_curriculum:
            self._curriculum_sums += torch.stack([sums[:, 0].sum(), ended.sum()])
            self._steps_in_window += 1
            if self._steps_in_window >= self.max_episode_steps:
                self._update_curriculum()

    def _update_curriculum(self) -> None:
        """legged_gym's command curriculum, with no host sync: widen the v_x range when the episodes ended in the
        last episode length tracked v_x at more than 80% of the reward's maximum (per step, over a full episode)."""
        s = self.settings
        total, count = self._curriculum_sums.unbind()
        best = self._weights[0] * self.max_episode_steps  # the tracking reward's episode sum at perfect tracking
        good = (count > 0) & (total / count.clamp_min(1.0) > 0.8 * best)
        vx_range = self._command_ranges[:, 0]
        widened = (vx_range + torch.tensor([-0.5, 0.5], device=self.device)).clamp(
            -s.max_command_curriculum, s.max_command_curriculum
        )
        vx_range.copy_(torch.where(good, widened, vx_range))
        self._curriculum_sums.zero_()
        self._steps_in_window = 0

    def _step_info(self) -> dict[str, torch.Tensor]:
        info = super()._step_info()
        info["episode_metrics"] = self._final_metrics
        return info

    # -- resets ---------------------------------------------------------------------------------------------

    def _draw_commands(self, selection: Selection) -> None:
        s = self.settings
        low, high = self._command_ranges
        draws = selection.uniform(self.rng, 0.0, 1.0, 5, torch.float32)
        commands = low + (high - low) * draws[:, :3]
        commands[:, :2] *= commands[:, :2].norm(dim=1, keepdim=True) >= s.min_command_speed
        commands *= draws[:, 3:4] >= s.standing_probability
        heading = s.heading_range[0] + (s.heading_range[1] - s.heading_range[0]) * draws[:, 4]
        selection.write(self._commands, commands)
        selection.write(self._heading, heading)

    def _reset_envs(self, selection: Selection):
        s, physics, robot = self.settings, self.physics, self.robot
        sim = dict(device=physics.device, dtype=physics.dtype)
        f32 = torch.float32
        rng = self.rng
        joints = len(robot.joints)
        if selection.ids is not None:
            ids = selection.ids.to(physics.device)
        else:
            ids = selection.mask.to(physics.device).nonzero().squeeze(1)
        if self._randomized or s.max_latency_steps:
            self._randomize(selection, ids)
        if self._placement is not None:
            start = self._place_on_terrain(selection)  # before physics.reset: how far each robot walked
        physics.reset(ids)
        draws = selection.uniform(rng, -1.0, 1.0, 2 * joints + 6, f32)
        qpos = torch.as_tensor(self.model.qpos0, **sim).expand(draws.shape[0], -1).clone()
        qpos[:, 2] = robot.init_base_height
        qpos[:, self._qpos_ids] = (self._default_pos + s.reset_joint_pos_noise * draws[:, :joints]).to(**sim)
        qvel = torch.zeros(draws.shape[0], self.model.nv, **sim)
        qvel[:, :6] = (s.reset_base_vel_noise * draws[:, 2 * joints :]).to(**sim)
        qvel[:, self._dof_ids] = (s.reset_joint_vel_noise * draws[:, joints : 2 * joints]).to(**sim)
        if self.reset_bank is not None:  # a bank state's base position is relative to the start point, as ours
            qpos, qvel = self.reset_bank.mix(selection, rng, qpos, qvel, self.reset_bank_fraction)
        if self._placement is not None:
            qpos[:, :3] += start.to(**sim)
        targets = self._default_pos_sim.expand(draws.shape[0], -1)
        if selection.ids is not None:
            physics.qpos.index_copy_(0, ids, qpos)
            physics.qvel.index_copy_(0, ids, qvel)
            physics.ctrl.index_copy_(0, ids, targets)
        else:
            mask = selection.mask.to(physics.device)[:, None]
            physics.qpos.copy_(torch.where(mask, qpos, physics.qpos))
            physics.qvel.copy_(torch.where(mask, qvel, physics.qvel))
            physics.ctrl.copy_(torch.where(mask, targets, physics.ctrl))
        physics.forward(ids)
        selection.write(self._targets, targets)
        rows = draws.shape[0]  # the selected environments (by index), or all of them (by mask)
        for name in ("last_actions", "last_joint_vel", "air_time", "last_contacts", "contact_time"):
            if name not in self._task_state:  # contact_time: only with the biped gait term
                continue
            state = self._task_state[name]
            selection.write(state, torch.zeros((rows, *state.shape[1:]), dtype=state.dtype, device=state.device))
        self._draw_commands(selection)
        if self._noisy:
            noise = selection.uniform(rng, -1.0, 1.0, self._noise.shape[1], f32) * self._noise_half_width
            selection.write(self._noise, noise)

    def _place_on_terrain(self, selection: Selection) -> torch.Tensor:
        """The selected environments' start points on the terrain ``[rows, 3]``: their tile's centre (after the
        terrain curriculum moved their levels), plus a uniform offset of up to ``SPAWN_SPREAD`` m in x and y
        (legged_gym's). How far a robot walked is measured from its tile's centre, as legged_gym measures it."""
        placement = self._placement
        draws = selection.uniform(self.rng, 0.0, 1.0, 3, torch.float32)
        position = selection.read(self.physics.qpos)[:, :2].to(self.device, torch.float32)
        origin = placement.origins[selection.read(placement.levels), selection.read(placement.columns)]
        walked = (position - origin[:, :2]).norm(dim=1)
        commanded = selection.read(self._commands)[:, :2].norm(dim=1) * self.settings.episode_length_s
        start = placement.place(selection, draws[:, 0], walked, commanded, self._starting).clone()
        start[:, :2] += SPAWN_SPREAD * (2 * draws[:, 1:] - 1)
        return start

    def reset(self, seed: int | None = None) -> torch.Tensor:
        self._starting = True  # the first episodes draw their terrain levels
        # episodes cut short by reset() (an evaluation env's next evaluation) leave running sums that ending ones
        # give back in _close_episodes: start every episode's from zero
        for sums in (self._term_sums, self._error_sums, self._diagnostic_sums):
            sums.zero_()
        try:
            return super().reset(seed)
        finally:
            self._starting = False

    def _randomize(self, selection: Selection, ids: torch.Tensor) -> None:
        """Draw the sim-to-real kit's per-environment parameters for the selected environments."""
        s, physics, base = self.settings, self.physics, self.bound.base
        rng, f32 = self.rng, torch.float32
        joints = len(self.robot.joints)
        sim = dict(device=physics.device, dtype=physics.dtype)
        fields = self._randomized
        unit = selection.uniform(rng, 0.0, 1.0, 8 + joints, f32)

        def between(bounds, u):
            return bounds[0] + (bounds[1] - bounds[0]) * u

        params = torch.zeros(unit.shape[0], len(self.param_names), device=self.device)
        params[:, 0] = 1.0 if s.friction_range is None else between(s.friction_range, unit[:, 0])
        params[:, 1] = between(s.added_mass_range, unit[:, 1])
        params[:, 2:5] = between(s.com_offset_range, unit[:, 2:5])
        params[:, 5 : 5 + joints] = between(s.motor_strength_range, unit[:, 8:])
        params[:, 5 + joints] = between(s.kp_range, unit[:, 5])
        params[:, 6 + joints] = between(s.kd_range, unit[:, 6])
        latency = (unit[:, 7] * (s.max_latency_steps + 1)).floor().clamp_max(s.max_latency_steps)
        params[:, 7 + joints] = latency
        selection.write(self._latency, latency.long())
        selection.write(self._params, params)
        p = params.to(**sim)

        def write(name, values):
            field = fields[name][0]
            if selection.ids is not None:
                field.index_copy_(0, ids, values)
            else:
                mask = selection.mask.to(field.device).view(-1, *[1] * (field.dim() - 1))
                field.copy_(torch.where(mask, values, field))

        if "geom_friction" in fields:
            friction = fields["geom_friction"][1].expand(len(p), -1, -1).clone()
            friction[..., 0] = p[:, :1]
            write("geom_friction", friction)
        if "body_mass" in fields:
            mass = fields["body_mass"][1].expand(len(p), -1).clone()
            ratio = (self._base_mass + p[:, 1]) / self._base_mass
            mass[:, base] *= ratio
            inertia = fields["body_inertia"][1].expand(len(p), -1, -1).clone()
            inertia[:, base] *= ratio[:, None]
            write("body_mass", mass)
            write("body_inertia", inertia)
        if "body_ipos" in fields:
            ipos = fields["body_ipos"][1].expand(len(p), -1, -1).clone()
            ipos[:, base] += p[:, 2:5]
            write("body_ipos", ipos)
        if "actuator_gainprm" in fields:
            strength = p[:, 5 : 5 + joints]
            kp_factor, kd_factor = p[:, 5 + joints, None], p[:, 6 + joints, None]
            gain = fields["actuator_gainprm"][1].expand(len(p), -1, -1).clone()
            bias = fields["actuator_biasprm"][1].expand(len(p), -1, -1).clone()
            gain[..., 0] *= strength * kp_factor
            bias[..., 1] *= strength * kp_factor
            bias[..., 2] *= strength * kd_factor
            write("actuator_gainprm", gain)
            write("actuator_biasprm", bias)
        if "body_mass" in fields or "body_ipos" in fields:
            physics.set_const(ids)  # before the state is written: mj_setConst clobbers it

    # -- state ----------------------------------------------------------------------------------------------

    def get_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of ``(qpos [N, nq], qvel [N, nv])`` in the backend's precision."""
        return self.physics.qpos.clone(), self.physics.qvel.clone()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "physics": self.physics.state.clone(),
            **{f"task.{name}": value.clone() for name, value in self._task_state.items()},
            "task.steps_in_window": torch.tensor(self._steps_in_window),
            **{f"model.{name}": field.clone() for name, (field, _) in self._randomized.items()},
            "critic_obs": self._critic_obs.clone(),
            **bank_checkpoint(self.reset_bank),
            **self._episode_state_dict(),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if self._randomized:
            for name, (field, _) in self._randomized.items():
                field.copy_(state[f"model.{name}"])
            if "body_mass" in self._randomized or "body_ipos" in self._randomized:
                self.physics.set_const()
        self.physics.state.copy_(state["physics"])
        for name, value in self._task_state.items():
            value.copy_(state[f"task.{name}"])
        self._steps_in_window = int(state["task.steps_in_window"])
        self._critic_obs.copy_(state["critic_obs"])
        restore_bank(self.reset_bank, state)
        self._load_episode_state_dict(state)


# Isaac Lab's G1 flat-ground recipe (isaaclab_tasks locomotion/velocity/config/g1: G1RoughEnvCfg's rewards with
# G1FlatEnvCfg's changes, over LocomotionVelocityRoughEnvCfg): the biped terms, a termination penalty of -200, no
# clip at zero. Isaac Lab counts torques and joint accelerations on the hips and knees only and joint limits on the
# ankles only; here they count on every joint. feet_clearance (mjlab's) stays off: it is not part of this recipe.
HUMANOID_SETTINGS = {
    "lin_vel_x_range": (-1.0, 1.0),
    "lin_vel_y_range": (-0.5, 0.5),
    "ang_vel_yaw_range": (-1.0, 1.0),
    "tracking_lin_vel_weight": 1.0,
    "tracking_ang_vel_weight": 1.0,
    "lin_vel_z_weight": -0.2,
    "ang_vel_xy_weight": -0.05,
    "orientation_weight": -1.0,
    "torques_weight": -2.0e-6,
    "dof_acc_weight": -1.0e-7,
    "action_rate_weight": -0.005,
    "dof_pos_limits_weight": -1.0,
    "feet_air_time_weight": 0.0,
    "collision_weight": 0.0,
    "termination_weight": -200.0,
    "feet_air_time_biped_weight": 0.75,
    "feet_air_time_biped_threshold": 0.4,
    "feet_slip_weight": -0.1,
    "joint_deviation_weight": -0.1,
    "joint_deviation_joints": (
        "left_hip_yaw_joint",
        "left_hip_roll_joint",
        "right_hip_yaw_joint",
        "right_hip_roll_joint",
        "waist_yaw_joint",
    ),
    "only_positive_rewards": False,
    "reset_joint_pos_noise": 0.0,  # Isaac Lab's G1 resets its joints to the default pose exactly
}
"""``HumanoidVelocity-Flat-v0``'s task settings (its ``isaaclab_g1`` preset), over ``VelocitySettings``' defaults."""

LEGGED_GYM_REWARDS = {
    "tracking_lin_vel_weight": 1.0,
    "tracking_ang_vel_weight": 0.5,
    "orientation_weight": -1.0,
    "torques_weight": -1e-5,
    "dof_pos_limits_weight": -10.0,
    "feet_air_time_weight": 1.0,
    "collision_weight": -1.0,
    "only_positive_rewards": True,
}
"""legged_gym's reward set for its A1 and Go1 (``LeggedRobotCfg.rewards`` with their configs' scales), where it
differs from ``VelocitySettings``' defaults: clipped at zero, with a heavy joint-limit penalty and thigh and calf
contacts penalised. It never learned to walk here in 15-minute probes on 2 CPU cores (agents/hyperparams/ppo.yaml)."""

REWARD_PRESETS = {"suite": {}, "legged_gym": LEGGED_GYM_REWARDS, "isaaclab_g1": HUMANOID_SETTINGS}
"""The named starting points of the reward (``reward_preset``), each a dict of settings over ``VelocitySettings``'
defaults; keywords override them. ``suite``, the defaults, is the recipe that learns the quadruped here: Isaac Lab's
Go1 flat-ground rewards, unclipped, with a joint-limit penalty of -1."""


class HumanoidVelocityEnv(LeggedVelocityEnv):
    """The velocity task on the G1-class humanoid (``config.HUMANOID``) with the ``isaaclab_g1`` preset
    (``HUMANOID_SETTINGS``) as its default: the same task code, the biped reward terms switched on. Every keyword
    overrides them."""

    def __init__(self, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None, **kwargs):
        kwargs.setdefault("robot", "humanoid")
        kwargs.setdefault("reward_preset", "isaaclab_g1")
        super().__init__(num_envs, device, seed, **kwargs)
