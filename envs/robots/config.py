"""The robot description layer: a robot is data, a ``RobotConfig``, and tasks are written against it.

A config names the MJCF file, the actuated joints in action order, the default pose, the PD gains, action scale and
torque limits per joint, the base body, the feet and the bodies whose contact with the ground ends an episode.
Nothing else in the suite names a robot: ``QuadrupedVelocity-Flat-v0`` and ``AntVelocity-Flat-v0`` are one task
over two configs, and a user's own robot is one more config plus its MJCF file on disk:

    from rl_suite.envs.robots import RobotConfig
    go2 = RobotConfig(name="go2", mjcf="/home/me/mujoco_menagerie/unitree_go2/go2.xml", joints=(...), ...)
    env = rl_suite.make("QuadrupedVelocity-Flat-v0", robot=go2)

``build_model`` turns a config into the simulated model with ``mujoco.MjSpec``: the file's actuators and its world
geoms (a floor) are replaced by one position actuator per joint (PD with the config's gains and torque limits,
which MuJoCo evaluates at every physics step) and the task's ground. ``bind`` checks the config against the model
and returns the indices a task reads (``BoundRobot``); every mismatch is an error that names it.

Where a config is data (a registration's ``robot=``: a built-in robot's name, or a dict of the fields below), it is
plain: ``robot_config`` turns it into a ``RobotConfig``, and no field names code to import. The registered ids fix
their robot, so a run directory's env_kwargs cannot swap it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

MODELS = Path(__file__).parent / "models"
"""Where the model files shipped with the suite lie (``quadruped.xml``, ``humanoid.xml``)."""

PerJoint = float | Sequence[float]
"""One value for every joint, or one per joint in action order."""


@dataclasses.dataclass(frozen=True)
class RobotConfig:
    """A robot, as the legged tasks need it. Per-joint fields take one value for all joints or one per joint, in the
    order of ``joints``; ``per_joint`` expands them."""

    name: str
    """A short name, used in ids and exported metadata."""
    mjcf: str
    """The model file: the name of a file shipped in ``rl_suite/envs/robots/models``, ``gymnasium/<name>`` for one
    of gymnasium's MuJoCo assets, or a path on disk (``mjcf_path`` resolves it)."""
    joints: tuple[str, ...]
    """The actuated joints (hinge or slide), in action order."""
    default_joint_pos: PerJoint
    """The default pose (rad or m): the target of a zero action."""
    kp: PerJoint
    """Proportional gains of the PD controllers (N m/rad)."""
    kd: PerJoint
    """Derivative gains (N m s/rad)."""
    action_scale: PerJoint
    """Joint target = default_joint_pos + action_scale * action."""
    torque_limit: PerJoint
    """The PD torque is clipped to [-torque_limit, torque_limit] (N m)."""
    base_body: str
    """The floating base: the body with the free joint."""
    feet: tuple[str, ...]
    """The feet, as body names or as geom names (a geom stands for the body it belongs to)."""
    termination_contacts: tuple[str, ...]
    """Bodies (or geoms) whose contact with the ground ends an episode (the trunk)."""
    penalized_contacts: tuple[str, ...] = ()
    """Bodies (or geoms) whose contacts are penalised but do not end an episode (thighs, calves)."""
    init_base_height: float = 0.35
    """Height of the base at reset (m), a little above the standing height so that the robot drops onto its feet."""
    velocity_limit: PerJoint = math.inf
    """Joint speed limits (rad/s), for the exported metadata; the simulation does not enforce them."""
    soft_joint_limit: float = 0.9
    """The fraction of each joint's range, around its middle, beyond which the joint-limit penalty starts."""

    def __post_init__(self):
        object.__setattr__(self, "joints", tuple(self.joints))
        object.__setattr__(self, "feet", tuple(self.feet))
        object.__setattr__(self, "termination_contacts", tuple(self.termination_contacts))
        object.__setattr__(self, "penalized_contacts", tuple(self.penalized_contacts))
        if not self.joints:
            raise ValueError(f"robot {self.name!r}: joints is empty; name the actuated joints in action order")
        if len(set(self.joints)) != len(self.joints):
            raise ValueError(f"robot {self.name!r}: joints names a joint twice: {list(self.joints)}")
        for field in ("default_joint_pos", "kp", "kd", "action_scale", "torque_limit", "velocity_limit"):
            values = self.per_joint(field)  # checks the length
            if not np.all(np.isfinite(values)) and field != "velocity_limit":
                raise ValueError(f"robot {self.name!r}: {field} must be finite, got {values.tolist()}")
            if field in ("kp", "kd", "torque_limit", "velocity_limit") and np.any(values < 0):
                raise ValueError(f"robot {self.name!r}: {field} must not be negative, got {values.tolist()}")
        if not self.feet:
            raise ValueError(f"robot {self.name!r}: feet is empty; name the foot bodies or geoms")
        if not 0.0 < self.soft_joint_limit <= 1.0:
            raise ValueError(f"robot {self.name!r}: soft_joint_limit must be in (0, 1], got {self.soft_joint_limit}")

    def per_joint(self, field: str) -> np.ndarray:
        """The field as one float64 value per joint, in action order."""
        value = getattr(self, field)
        values = np.asarray(value, dtype=np.float64)
        if values.ndim == 0:
            return np.full(len(self.joints), float(values))
        if values.shape != (len(self.joints),):
            raise ValueError(
                f"robot {self.name!r}: {field} has {values.size} values for {len(self.joints)} joints "
                f"({', '.join(self.joints)}); give one value, or one per joint in that order"
            )
        return values

    def as_dict(self) -> dict[str, Any]:
        """The config as plain data (for config.yaml and exported metadata); ``robot_config`` reads it back."""
        data = dataclasses.asdict(self)
        return {key: list(value) if isinstance(value, tuple) else value for key, value in data.items()}


# -- the robots shipped with the suite --------------------------------------------------------------------------

_QUADRUPED_LEGS = ("FR", "FL", "RR", "RL")  # Unitree's SDK order: front right, front left, rear right, rear left

QUADRUPED = RobotConfig(
    name="quadruped",
    mjcf="quadruped.xml",
    joints=tuple(f"{leg}_{part}_joint" for leg in _QUADRUPED_LEGS for part in ("hip", "thigh", "calf")),
    # legged_gym's Go1 configuration (go1_sources.md LG-z): hips 0.1 rad outwards (left +, right -), thighs 0.8 rad
    # at the front and 1.0 at the rear, calves -1.5 rad; Kp 20, Kd 0.5, action scale 0.25.
    default_joint_pos=(-0.1, 0.8, -1.5, 0.1, 0.8, -1.5, -0.1, 1.0, -1.5, 0.1, 1.0, -1.5),
    kp=20.0,
    kd=0.5,
    action_scale=0.25,
    torque_limit=(23.7, 23.7, 35.55) * 4,  # UR-c *_torque_max
    velocity_limit=(30.1, 30.1, 20.06) * 4,  # UR-c *_velocity_max
    base_body="trunk",
    feet=tuple(f"{leg}_foot" for leg in _QUADRUPED_LEGS),
    termination_contacts=("trunk",),
    penalized_contacts=tuple(f"{leg}_{part}" for leg in _QUADRUPED_LEGS for part in ("thigh", "calf")),
    init_base_height=0.34,  # LG-f / WTW; the default pose stands the trunk at about 0.32-0.33 m
)

# gymnasium's Ant (its own ant.xml, read from the installed gymnasium): the second robot, to show that a config is
# all a robot needs. Its torque limit is the file's motor gear times its control range (150 x 1); the gains and the
# default pose (ankles at the middle of their ranges, 50 degrees) are ours, chosen so that it stands at zero action.
ANT = RobotConfig(
    name="ant",
    mjcf="gymnasium/ant.xml",
    joints=("hip_1", "ankle_1", "hip_2", "ankle_2", "hip_3", "ankle_3", "hip_4", "ankle_4"),
    default_joint_pos=(0.0, 0.873, 0.0, -0.873, 0.0, -0.873, 0.0, 0.873),
    kp=40.0,
    kd=2.0,
    action_scale=0.5,
    torque_limit=150.0,
    base_body="torso",
    feet=("left_ankle_geom", "right_ankle_geom", "third_ankle_geom", "fourth_ankle_geom"),
    termination_contacts=("torso",),
    init_base_height=0.6,
)

_HUMANOID_LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")

# A biped of the Unitree G1's class (humanoid.xml; g1_sources.md gives the keys): 6 joints per leg in Unitree's SDK
# order, left leg first, then the waist. The arms and the head are rigid, so they have no joints here.
HUMANOID = RobotConfig(
    name="humanoid",
    mjcf="humanoid.xml",
    joints=(*(f"{side}_{part}_joint" for side in ("left", "right") for part in _HUMANOID_LEG), "waist_yaw_joint"),
    # unitree_rl_gym's G1 configuration (UR-gym): hips -0.1 rad, knees 0.3, ankles -0.2 rad (the feet flat), the rest
    # 0; Kp 100 (hips), 150 (knees), 40 (ankles), Kd 2 / 4 / 2; action scale 0.25. The waist's 300 / 3 are Unitree's
    # own deploy gains for holding the waist while that leg policy walks (UR-gym-d arm_waist_kps / arm_waist_kds).
    default_joint_pos=(-0.1, 0.0, 0.0, 0.3, -0.2, 0.0) * 2 + (0.0,),
    kp=(100.0, 100.0, 100.0, 150.0, 40.0, 40.0) * 2 + (300.0,),
    kd=(2.0, 2.0, 2.0, 4.0, 2.0, 2.0) * 2 + (3.0,),
    action_scale=0.25,
    torque_limit=(88.0, 139.0, 88.0, 139.0, 50.0, 50.0) * 2 + (88.0,),  # UR <limit effort>
    velocity_limit=(32.0, 20.0, 32.0, 20.0, 37.0, 37.0) * 2 + (32.0,),  # UR <limit velocity>
    base_body="pelvis",
    feet=("left_ankle_roll_link", "right_ankle_roll_link"),  # UR-gym foot_name "ankle_roll"
    # UR-gym ends an episode on pelvis contact; the torso, the head and the arms are the rest of the body above it
    termination_contacts=("pelvis", "torso_link", "head_link", "left_arm_link", "right_arm_link"),
    # UR-gym penalize_contacts_on ["hip", "knee"]: the thighs and the shins
    penalized_contacts=tuple(
        f"{side}_{part}_link" for side in ("left", "right") for part in ("hip_pitch", "hip_roll", "hip_yaw", "knee")
    ),
    init_base_height=0.8,  # UR-gym init_state.pos; the default pose stands the pelvis at 0.784 m
)

ROBOTS: dict[str, RobotConfig] = {robot.name: robot for robot in (QUADRUPED, ANT, HUMANOID)}
"""The built-in robots by name: what a file may name with ``robot: <name>``."""


def robot_config(robot: str | dict | RobotConfig) -> RobotConfig:
    """A ``RobotConfig`` from a built-in robot's name, a dict of its fields (plain data, as a file holds it), or a
    config."""
    if isinstance(robot, RobotConfig):
        return robot
    if isinstance(robot, str):
        if robot not in ROBOTS:
            raise ValueError(
                f"unknown robot {robot!r}; the built-in robots are {', '.join(ROBOTS)}, or pass a RobotConfig"
            )
        return ROBOTS[robot]
    if isinstance(robot, dict):
        fields = {field.name for field in dataclasses.fields(RobotConfig)}
        unknown = sorted(set(robot) - fields)
        if unknown:
            raise ValueError(f"robot config has unknown fields {unknown}; RobotConfig takes {sorted(fields)}")
        return RobotConfig(**robot)
    raise TypeError(
        f"robot must be a built-in robot's name, a dict of RobotConfig fields or a RobotConfig, got {robot!r}"
    )


def mjcf_path(mjcf: str) -> Path:
    """The model file a config names (what the exported metadata's ``robot.mjcf`` holds): a bare name is a file
    shipped in ``rl_suite/envs/robots/models``, ``gymnasium/<name>`` one of the installed gymnasium's MuJoCo assets,
    anything else a path on disk."""
    if "/" not in mjcf and (MODELS / mjcf).is_file():
        path = MODELS / mjcf
    elif mjcf.startswith("gymnasium/"):
        import gymnasium

        path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / mjcf.removeprefix("gymnasium/")
    else:
        path = Path(mjcf).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"model file {mjcf!r} not found (looked for {path})")
    return path


# -- from a config to the simulated model ----------------------------------------------------------------------


def build_model(
    robot: RobotConfig, physics_dt: float = 0.005, ground_friction: float = 1.0, terrain=None
) -> mujoco.MjModel:
    """The model a task simulates: the robot's MJCF with its own actuators and world geoms removed, one position
    actuator per joint of ``robot.joints`` (force = kp (target - q) - kd q', clipped to the torque limit, at every
    physics step of ``physics_dt`` s), and the ground, a geom named ``terrain``: a plane, or ``terrain``'s heightfield
    (a ``terrain.Terrain``)."""
    if not physics_dt > 0:
        raise ValueError(f"physics_dt must be positive, got {physics_dt!r}")
    spec = mujoco.MjSpec.from_file(str(mjcf_path(robot.mjcf)))
    for geom in list(spec.worldbody.geoms):  # the scene is the task's: a file's floor goes
        spec.delete(geom)
    for actuator in list(spec.actuators):
        spec.delete(actuator)
    joints = {joint.name for joint in spec.joints}
    missing = [name for name in robot.joints if name not in joints]
    if missing:
        raise ValueError(
            f"robot {robot.name!r}: joints {missing} are not in {robot.mjcf}; its joints are {sorted(joints)}"
        )
    spec.option.timestep = physics_dt
    if terrain is not None:
        terrain.add_to(spec, ground_friction)
    else:
        spec.worldbody.add_geom(
            name="terrain",
            type=mujoco.mjtGeom.mjGEOM_PLANE,
            size=[0.0, 0.0, 0.05],  # infinite
            contype=1,
            conaffinity=1,
            condim=3,
            friction=[ground_friction, 0.005, 0.0001],
            rgba=[0.55, 0.6, 0.55, 1.0],
        )
    kp, kd, limit = (robot.per_joint(name) for name in ("kp", "kd", "torque_limit"))
    for j, name in enumerate(robot.joints):
        actuator = spec.add_actuator(name=f"{name}_pd", target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
        actuator.set_to_position(kp=float(kp[j]), kv=float(kd[j]))
        actuator.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
        actuator.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
        actuator.forcerange = [-float(limit[j]), float(limit[j])]
    return spec.compile()


@dataclasses.dataclass(frozen=True)
class BoundRobot:
    """A config checked against its compiled model, as indices into the physics arrays."""

    config: RobotConfig
    base: int
    """Body id of the base."""
    joint_qpos: np.ndarray
    """``[J]`` addresses in ``qpos`` of the joints, in action order."""
    joint_dof: np.ndarray
    """``[J]`` addresses in ``qvel``."""
    joint_range: np.ndarray
    """``[J, 2]`` lower and upper limits (infinite where a joint has none)."""
    feet: np.ndarray
    """``[F]`` body ids of the feet."""
    termination: np.ndarray
    """Body ids whose contact ends an episode."""
    penalized: np.ndarray
    """Body ids whose contact is penalised."""


def _body_ids(model: mujoco.MjModel, names: Sequence[str], robot: RobotConfig, what: str) -> np.ndarray:
    ids = []
    for name in names:
        body = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name)
        if body < 0:
            geom = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
            if geom < 0:
                raise ValueError(
                    f"robot {robot.name!r}: {what} names {name!r}, which is neither a body nor a geom of the model"
                )
            body = int(model.geom_bodyid[geom])
        ids.append(body)
    return np.asarray(ids, dtype=np.int64)


def bind(robot: RobotConfig, model: mujoco.MjModel) -> BoundRobot:
    """Check ``robot`` against ``model`` (built by ``build_model``) and return the indices a task reads."""
    base = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, robot.base_body)
    if base < 0:
        raise ValueError(f"robot {robot.name!r}: base_body {robot.base_body!r} is not a body of {robot.mjcf}")
    first, count = int(model.body_jntadr[base]), int(model.body_jntnum[base])
    if count == 0 or int(model.jnt_type[first]) != int(mujoco.mjtJoint.mjJNT_FREE) or model.jnt_qposadr[first] != 0:
        raise ValueError(
            f"robot {robot.name!r}: the base body {robot.base_body!r} has no free joint as the model's first joint; "
            "a legged task needs a floating base (<freejoint/> in the base body)"
        )
    qpos, dof, ranges = [], [], []
    for name in robot.joints:
        joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if int(model.jnt_type[joint]) not in (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)):
            raise ValueError(f"robot {robot.name!r}: joint {name!r} is not a hinge or slide joint")
        qpos.append(model.jnt_qposadr[joint])
        dof.append(model.jnt_dofadr[joint])
        limited = bool(model.jnt_limited[joint])
        ranges.append(model.jnt_range[joint] if limited else (-np.inf, np.inf))
    return BoundRobot(
        config=robot,
        base=base,
        joint_qpos=np.asarray(qpos, dtype=np.int64),
        joint_dof=np.asarray(dof, dtype=np.int64),
        joint_range=np.asarray(ranges, dtype=np.float64),
        feet=_body_ids(model, robot.feet, robot, "feet"),
        termination=_body_ids(model, robot.termination_contacts, robot, "termination_contacts"),
        penalized=_body_ids(model, robot.penalized_contacts, robot, "penalized_contacts"),
    )
