"""``PyBulletRobot``: a gymnasium v5 MuJoCo task's robot simulated by PyBullet, as a sim-to-sim deployment target.

The robot is built from the same MJCF file as our MuJoCo task (gymnasium's asset, loaded with ``pybullet.loadMJCF``)
in a DIRECT client, and honours the deployment ``Robot`` interface (``rl_suite.deploy``):

- ``read_observation()``: the task's gymnasium-v5 observation, built from PyBullet's base and joint states mapped to
  MuJoCo's generalized coordinates.
  - HalfCheetah (17): ``qpos[1:]`` (rootz, rooty, 6 joint angles) and ``qvel`` (9). The root is three joints
    (rootx, rootz slides, rooty hinge), read with ``getJointStates`` exactly as MuJoCo's qpos/qvel.
  - Ant (27): the layout of ``Ant-v5`` with ``include_cfrc_ext_in_observation=False``: ``qpos[2:]`` (z, quaternion
    ``(w, x, y, z)``, 8 joint angles) and ``qvel`` (world-frame linear velocity of the torso's frame origin,
    BODY-frame angular velocity as MuJoCo's free joint has it, 8 joint velocities). PyBullet's base state is its
    inertial frame in world coordinates (quaternion ``(x, y, z, w)``, world angular velocity); it is converted.
    The default Ant-v5 observation (105) also holds ``cfrc_ext``, which PyBullet does not compute: train the policy
    with ``include_cfrc_ext_in_observation=False`` to deploy it here.
- ``apply_action(action)``: clips to the actuators' ``ctrlrange``, multiplies by their ``gear`` (actuators are
  matched to joints by name, so Ant's actuator order, which differs from its joint order, is respected), and
  applies the torques with ``setJointMotorControlArray(TORQUE_CONTROL)`` after the default velocity motors were
  disabled, then steps PyBullet ``frame_skip`` MJCF timesteps (each as ``substeps`` PyBullet steps), so that one
  call is one control cycle of the task's ``dt``.
  It then computes gymnasium's reward terms (``reward_terms()``) and adds the reward to ``episode_return``.
- ``reset(seed)``: gymnasium's reset noise (uniform on qpos, Gaussian on qvel, ``reset_noise_scale``), drawn from
  ``numpy.random.default_rng(seed)`` (the same distributions as gymnasium; not the same numbers).

What is mapped from the MJCF by hand, because ``loadMJCF`` drops or misreads it (read from the compiled MuJoCo model):

- gravity and timestep: ``loadMJCF`` ignores ``<option>`` (PyBullet would use zero gravity and 1/240 s);
- inertia (``exact_inertia``): ``loadMJCF`` puts each link's centre of mass at the link's origin (the joint:
  HalfCheetah's thigh 0.16 m from MuJoCo's), ignores ``density`` (Ant's 5.0: links 200 times too heavy) and
  ``settotalmass`` (HalfCheetah 21.2 kg, not 14). The file is loaded with an explicit ``<inertial>`` in every body,
  MuJoCo's compiled mass, centre of mass and principal axes (which loadMJCF honours), then each link's principal
  moments are set with ``changeDynamics`` (loadMJCF adds geometry to ``diaginertia``). It is the model's own
  inertia, kept for that reason: with the calibrated contact, loadMJCF's inertia did no worse on the two policies
  measured (``benchmarks/results/sim2sim.md``), so this correction is not what the transfer hinges on;
- joint damping and stiffness (springs to ``qpos_spring``), which loadMJCF does not read: explicit torques
  ``-damping * qdot - stiffness * (q - q_spring)`` added to the actuator torques at every PyBullet step;
  ``substeps`` (default 4) splits each MJCF timestep into that many PyBullet steps, because HalfCheetah's stiff
  springs (up to 240 N m/rad) make the explicit scheme unstable at 0.01 s (the cheetah flips under random actions);
- ``armature`` (``armature``, default on): Bullet has no rotor inertia. It is approximated by adding the armature to
  all three principal moments of the link the joint moves. That is not the same thing (MuJoCo adds it to the joint's
  diagonal of the joint-space inertia only; here it also adds to the whole body's rotational inertia);
- contacts (``contact``): MuJoCo's contacts in these files are soft (HalfCheetah: ``solref 0.02 1``, ``solimp 0 0.8
  0.01``; the resting cheetah sinks 2.7 cm deeper than on Bullet's rigid contact). ``"calibrated"`` gives the robot's
  links a contact stiffness and damping (``CALIBRATED_CONTACT``) chosen so that the robot rests as deep as in MuJoCo;
- Bullet's own defaults that MuJoCo lacks are switched off: velocity damping of every link (0.04) and the joint
  speed cap (100 rad/s);
- friction: Bullet multiplies the two bodies' friction coefficients, MuJoCo takes the larger; the floor is set to
  friction 1 so that each contact uses the robot geom's sliding friction, as MuJoCo does with these files.

Known mismatches, not corrected:

- contact model: a calibrated spring-damper is not MuJoCo's soft convex contact (impedance that grows with
  penetration, ``margin``: Ant's 0.01, friction cone pyramid); contacts remain the largest difference;
- solver and integrator: MuJoCo's Newton solver with Euler (HalfCheetah; damping implicit) or RK4 (Ant) against
  Bullet's sequential impulse with semi-implicit Euler; damping and springs are explicit here;
- joint limits (``joint_limits``, default on): loadMJCF reads the ranges but Bullet enforces a limit only on a joint
  that is inside its range; a joint that starts outside stays outside. Ant's initial pose puts every ankle at 0,
  outside its range (30 to 70 degrees): MuJoCo's soft limits push the ankles in while the ant falls, Bullet's never
  do, and the ant lay on its torso (height 0.25 where MuJoCo's stands at 0.49). So the limits are set explicitly
  (``changeDynamics``) and a reset clips the joints into their ranges: the ankles start at their bounds, where
  MuJoCo's are pushed within the first steps. It then stands, lower than MuJoCo's (0.37 at rest: rigid contacts,
  the ankles at their bounds where MuJoCo's settle at 44 degrees). (Explicit soft-limit torques in MuJoCo's style,
  ``I (-k r - b qdot)`` from ``solreflimit``, were tried and made Ant blow up where a hip met Bullet's own limit.)
  Limits are hard here and soft in MuJoCo (``solreflimit``/``solimplimit``); ``frictionloss`` (zero in these files)
  is not mapped; ``condim`` torsional/rolling friction are off in both;
- Ant's ``contact_cost`` uses MuJoCo's ``cfrc_ext`` (a com-based 6-D wrench per body, clipped to [-1, 1]); here it
  is approximated by the summed contact force (3-D, no torque) on each body, clipped the same way;
- reset: MuJoCo keeps the noised, unnormalised quaternion in ``qpos`` until it integrates; PyBullet normalises it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from xml.etree import ElementTree

import gymnasium as gym
import numpy as np

try:
    import pybullet
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError("PyBulletRobot needs pybullet: pip install 'rl-suite[bullet]'") from None

import mujoco

from rl_suite.envs.mujoco.physics import compile_spec

TASKS = {
    # name: (MJCF asset, frame_skip, defaults of gymnasium's keyword arguments used here)
    "HalfCheetah": (
        "half_cheetah.xml",
        5,
        {"forward_reward_weight": 1.0, "ctrl_cost_weight": 0.1, "reset_noise_scale": 0.1},
    ),
    "Ant": (
        "ant.xml",
        5,
        {
            "forward_reward_weight": 1.0,
            "ctrl_cost_weight": 0.5,
            "contact_cost_weight": 5e-4,
            "healthy_reward": 1.0,
            "terminate_when_unhealthy": True,
            "healthy_z_range": (0.2, 1.0),
            "contact_force_range": (-1.0, 1.0),
            "reset_noise_scale": 0.1,
        },
    ),
}


# Compliant contacts standing in for MuJoCo's soft ones, per task: (stiffness N/m, damping N s/m). HalfCheetah's: the
# stiffness at which the robot at rest (zero action, 100 cycles from qpos0) sits as deep as in MuJoCo (rootz -0.132;
# Bullet's rigid contact: -0.105), with the damping near critical for a quarter of its mass. Chosen from the rest
# height, not from any policy's return. Ant: not calibrated (rigid).
CALIBRATED_CONTACT: dict[str, tuple[float, float] | None] = {"HalfCheetah": (2700.0, 190.0), "Ant": None}


def asset_path(xml_file: str) -> Path:
    return Path(gym.__file__).parent / "envs" / "mujoco" / "assets" / xml_file


def _mjcf_text(path: Path, model: mujoco.MjModel) -> str:
    """The MJCF file with an explicit ``<inertial>`` in every body: MuJoCo's compiled mass, centre of mass and
    principal axes (which loadMJCF would otherwise derive itself: centre of mass at the body's origin, density and
    ``settotalmass`` ignored). Bodies are numbered in document order, as MuJoCo numbers them."""
    tree = ElementTree.parse(path)
    bodies = list(tree.getroot().find("worldbody").iter("body"))
    if len(bodies) != model.nbody - 1:
        raise RuntimeError(f"{path.name}: {len(bodies)} <body> elements, {model.nbody - 1} compiled bodies")
    for index, element in enumerate(bodies, start=1):
        for old in element.findall("inertial"):
            element.remove(old)
        inertial = ElementTree.Element(
            "inertial",
            pos=" ".join(repr(float(x)) for x in model.body_ipos[index]),
            quat=" ".join(repr(float(x)) for x in model.body_iquat[index]),
            mass=repr(float(model.body_mass[index])),
            diaginertia=" ".join(repr(float(x)) for x in model.body_inertia[index]),
        )
        element.insert(0, inertial)
    return ElementTree.tostring(tree.getroot(), encoding="unicode")


def _name(model: mujoco.MjModel, kind: mujoco.mjtObj, index: int) -> str:
    return mujoco.mj_id2name(model, kind, index)


class PyBulletRobot:
    """The robot of ``task`` (``"HalfCheetah"`` or ``"Ant"``) in PyBullet; see the module docstring.

    Args:
        task: which gymnasium v5 task's robot.
        seed: seed of the reset noise; ``reset(seed)`` reseeds.
        frame_skip: physics steps per control cycle (default: the task's, 5).
        substeps: PyBullet steps per MJCF timestep (default 4; 1 is exactly the MJCF timestep, where the explicit
            joint springs of HalfCheetah make it unstable).
        armature: approximate the joints' ``armature`` by adding it to the moved link's inertia (default on).
        exact_inertia: give every link MuJoCo's compiled mass, centre of mass and principal inertia (default on);
            off keeps loadMJCF's own (centre of mass at the link origin), scaled to MuJoCo's masses.
        contact: ``"calibrated"`` (the task's entry in ``CALIBRATED_CONTACT``), ``None`` (Bullet's rigid contact) or
            ``(stiffness, damping)`` for every link of the robot.
        joint_limits: enforce the joints' ranges, and start every episode inside them (default on; see the module
            docstring).
        task_kwargs: gymnasium's keyword arguments of the task's reward and reset (``ctrl_cost_weight``,
            ``reset_noise_scale``, ``healthy_z_range``, ...). A name the task does not have is refused.
    """

    def __init__(
        self,
        task: str = "HalfCheetah",
        seed: int | None = None,
        frame_skip: int | None = None,
        substeps: int = 4,
        armature: bool = True,
        exact_inertia: bool = True,
        contact: str | tuple[float, float] | None = "calibrated",
        joint_limits: bool = True,
        **task_kwargs,
    ):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; PyBulletRobot supports {', '.join(TASKS)}")
        xml_file, default_skip, defaults = TASKS[task]
        unknown = sorted(set(task_kwargs) - set(defaults))
        if unknown:
            raise ValueError(f"{task} has no keyword argument(s) {', '.join(unknown)}; it takes {', '.join(defaults)}")
        self.task, self.settings = task, {**defaults, **task_kwargs}
        if isinstance(contact, str):
            if contact != "calibrated":
                raise ValueError(f"contact must be 'calibrated', None or (stiffness, damping), got {contact!r}")
            contact = CALIBRATED_CONTACT.get(task)
        self.contact = contact
        self.frame_skip = default_skip if frame_skip is None else int(frame_skip)
        if self.frame_skip <= 0 or substeps <= 0:
            raise ValueError("frame_skip and substeps must be positive integers")
        self.substeps = int(substeps)
        path = asset_path(xml_file)
        self.model = model = compile_spec(mujoco.MjSpec.from_file(str(path)))
        self.timestep = float(model.opt.timestep)
        self.dt = self.timestep * self.frame_skip
        self.free_root = task == "Ant"
        self.skip = 2 if self.free_root else 1  # exclude_current_positions_from_observation=True
        self.observation_size = model.nq - self.skip + model.nv
        self.action_size = model.nu
        self.ctrl_low, self.ctrl_high = model.actuator_ctrlrange.T.copy()
        self.gear = model.actuator_gear[:, 0].copy()

        self.client = pybullet.connect(pybullet.DIRECT)
        c = self.client
        pybullet.setGravity(*model.opt.gravity, physicsClientId=c)
        pybullet.setPhysicsEngineParameter(fixedTimeStep=self.timestep / self.substeps, physicsClientId=c)
        self.exact_inertia = bool(exact_inertia)
        if exact_inertia:
            with tempfile.TemporaryDirectory() as tmp:
                patched = Path(tmp) / path.name
                patched.write_text(_mjcf_text(path, model))
                floor, body = pybullet.loadMJCF(str(patched), physicsClientId=c)
        else:
            floor, body = pybullet.loadMJCF(str(path), physicsClientId=c)
        self.floor, self.body = floor, body
        pybullet.changeDynamics(floor, -1, lateralFriction=1.0, physicsClientId=c)

        # MuJoCo's hinge/slide joints, by name, to PyBullet joint indices (in MuJoCo's qpos order).
        pb_joints = {}
        for j in range(pybullet.getNumJoints(body, physicsClientId=c)):
            info = pybullet.getJointInfo(body, j, physicsClientId=c)
            if info[2] in (pybullet.JOINT_REVOLUTE, pybullet.JOINT_PRISMATIC):
                pb_joints[info[1].decode()] = j
        first = 1 if self.free_root else 0  # the free joint is PyBullet's base
        names = [_name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(first, model.njnt)]
        missing = [n for n in names if n not in pb_joints]
        if missing:
            raise RuntimeError(f"loadMJCF built no joint(s) {missing} of {xml_file}")
        self.joints = [pb_joints[n] for n in names]
        dofs = slice(6 if self.free_root else 0, model.nv)
        self.damping = model.dof_damping[dofs].copy()
        self.stiffness = model.jnt_stiffness[first:].copy()
        self.q_spring = model.qpos_spring[7 if self.free_root else 0 :].copy()
        self.joint_limits = bool(joint_limits)
        if joint_limits:
            self._set_joint_limits(first)
            limited = model.jnt_limited[first:].astype(bool)
            self._q_low = np.where(limited, model.jnt_range[first:, 0], -np.inf)
            self._q_high = np.where(limited, model.jnt_range[first:, 1], np.inf)
        # actuators to joints by name
        joint_of = [_name(model, mujoco.mjtObj.mjOBJ_JOINT, model.actuator_trnid[a, 0]) for a in range(model.nu)]
        self.actuated = [names.index(n) for n in joint_of]  # actuator a drives self.joints[actuated[a]]
        for link in range(-1, pybullet.getNumJoints(body, physicsClientId=c)):
            # Bullet's defaults damp every link's velocity (0.04 per step) and cap joint speeds at 100/s; MuJoCo does
            # neither.
            pybullet.changeDynamics(
                body, link, linearDamping=0.0, angularDamping=0.0, maxJointVelocity=1e4, physicsClientId=c
            )
        if contact is not None:  # a compliant contact (stiffness N/m, damping N s/m) in place of Bullet's rigid one
            for link in range(-1, pybullet.getNumJoints(body, physicsClientId=c)):
                pybullet.changeDynamics(
                    body, link, contactStiffness=float(contact[0]), contactDamping=float(contact[1]), physicsClientId=c
                )
        for j in self.joints:  # switch off the default velocity motors, so that torques act alone
            pybullet.setJointMotorControl2(body, j, pybullet.VELOCITY_CONTROL, force=0.0, physicsClientId=c)
        if exact_inertia:
            self._set_inertias()
        else:
            self._scale_masses()
        self._base_com = np.asarray(pybullet.getDynamicsInfo(body, -1, physicsClientId=c)[3])
        if armature:
            self._add_armature()
        self.qpos0, self.qvel0 = model.qpos0.copy(), np.zeros(model.nv)
        self._torque = np.zeros(len(self.joints))
        self._last_terms: dict[str, float] = {}
        self.episode_return, self.episode_length, self.terminated = 0.0, 0, False
        self._rng = np.random.default_rng(seed)
        self.reset(seed)

    # -- model fixes ----------------------------------------------------------------------------------------

    def _set_joint_limits(self, first: int) -> None:
        """Bullet's own hard limits at the MJCF ranges, for the limited hinges; unlimited ones stay free."""
        model, c = self.model, self.client
        for j, index in zip(self.joints, range(first, model.njnt), strict=True):
            if model.jnt_limited[index]:
                low, high = (float(x) for x in model.jnt_range[index])
                pybullet.changeDynamics(self.body, j, jointLowerLimit=low, jointUpperLimit=high, physicsClientId=c)

    def _set_inertias(self) -> None:
        """Give each PyBullet link its MuJoCo body's mass and principal inertia (bodies and massive links pair up in
        tree order); the inertial frames already came from the ``<inertial>`` elements written by ``_mjcf_text``."""
        c, body, model = self.client, self.body, self.model
        links = [
            i
            for i in range(-1, pybullet.getNumJoints(body, physicsClientId=c))
            if pybullet.getDynamicsInfo(body, i, physicsClientId=c)[0] > 0
        ]
        if len(links) != model.nbody - 1:
            raise RuntimeError(f"{len(links)} massive PyBullet links against {model.nbody - 1} MuJoCo bodies")
        for link, index in zip(links, range(1, model.nbody), strict=True):
            inertia = model.body_inertia[index].tolist()
            mass = float(model.body_mass[index])
            pybullet.changeDynamics(body, link, mass=mass, localInertiaDiagonal=inertia, physicsClientId=c)
            if self.exact_inertia:
                ipos = pybullet.getDynamicsInfo(body, link, physicsClientId=c)[3]
                if not np.allclose(ipos, model.body_ipos[index], atol=1e-5):
                    raise RuntimeError(f"link {link}'s centre of mass {ipos} is not MuJoCo's {model.body_ipos[index]}")

    def _scale_masses(self) -> None:
        """``exact_inertia=False``: keep loadMJCF's own inertial frames and inertias (centre of mass at each link's
        origin, density ignored), only scaled to MuJoCo's body masses."""
        c, body, model = self.client, self.body, self.model
        links = [
            i
            for i in range(-1, pybullet.getNumJoints(body, physicsClientId=c))
            if pybullet.getDynamicsInfo(body, i, physicsClientId=c)[0] > 0
        ]
        masses = [m for m in model.body_mass[1:] if m > 0]
        if len(links) != len(masses):
            raise RuntimeError(f"{len(links)} massive PyBullet links against {len(masses)} MuJoCo bodies")
        for link, mass in zip(links, masses, strict=True):
            info = pybullet.getDynamicsInfo(body, link, physicsClientId=c)
            factor = mass / info[0]
            inertia = [x * factor for x in info[2]]
            pybullet.changeDynamics(body, link, mass=float(mass), localInertiaDiagonal=inertia, physicsClientId=c)

    def _add_armature(self) -> None:
        """Approximate each hinge's ``armature`` (rotor inertia on the joint axis) by adding it to the inertia of the
        link that the joint moves, on all three principal axes (Bullet has no joint-space inertia term)."""
        c, body = self.client, self.body
        dofs = slice(6 if self.free_root else 0, self.model.nv)
        for j, armature in zip(self.joints, self.model.dof_armature[dofs], strict=True):
            if armature <= 0:
                continue
            link = j  # the joint's child link; its fixed-jointed geometry link follows
            mass_link = next(
                i
                for i in range(link, pybullet.getNumJoints(body, physicsClientId=c))
                if pybullet.getDynamicsInfo(body, i, physicsClientId=c)[0] > 0
            )
            inertia = pybullet.getDynamicsInfo(body, mass_link, physicsClientId=c)[2]
            inertia = [x + float(armature) for x in inertia]
            pybullet.changeDynamics(body, mass_link, localInertiaDiagonal=inertia, physicsClientId=c)

    # -- state in MuJoCo's coordinates ----------------------------------------------------------------------

    def get_state(self) -> tuple[np.ndarray, np.ndarray]:
        """``(qpos [nq], qvel [nv])`` in MuJoCo's generalized coordinates."""
        c, body = self.client, self.body
        states = pybullet.getJointStates(body, self.joints, physicsClientId=c)
        q = np.array([s[0] for s in states])
        qd = np.array([s[1] for s in states])
        if not self.free_root:
            return q, qd
        com, quat_xyzw = pybullet.getBasePositionAndOrientation(body, physicsClientId=c)
        lin, ang = pybullet.getBaseVelocity(body, physicsClientId=c)
        rot = np.array(pybullet.getMatrixFromQuaternion(quat_xyzw)).reshape(3, 3)
        ang = np.asarray(ang)
        offset = rot @ self._base_com  # body origin -> centre of mass, in world
        origin = np.asarray(com) - offset
        v_origin = np.asarray(lin) - np.cross(ang, offset)
        quat_wxyz = np.array([quat_xyzw[3], *quat_xyzw[:3]])
        qpos = np.concatenate([origin, quat_wxyz, q])
        qvel = np.concatenate([v_origin, rot.T @ ang, qd])  # MuJoCo: world linear, body-frame angular velocity
        return qpos, qvel

    def set_state(self, qpos, qvel) -> None:
        """Set the state from MuJoCo's ``qpos``/``qvel`` (as ``MujocoVecEnv.set_state`` does for one env)."""
        c, body = self.client, self.body
        qpos, qvel = np.asarray(qpos, dtype=np.float64), np.asarray(qvel, dtype=np.float64)
        if qpos.shape != (self.model.nq,) or qvel.shape != (self.model.nv,):
            raise ValueError(f"qpos/qvel must have shapes ({self.model.nq},), ({self.model.nv},)")
        if self.free_root:
            quat = qpos[3:7] / np.linalg.norm(qpos[3:7])
            quat_xyzw = [quat[1], quat[2], quat[3], quat[0]]
            rot = np.array(pybullet.getMatrixFromQuaternion(quat_xyzw)).reshape(3, 3)
            offset = rot @ self._base_com
            ang_world = rot @ qvel[3:6]
            pybullet.resetBasePositionAndOrientation(body, (qpos[:3] + offset).tolist(), quat_xyzw, physicsClientId=c)
            lin = qvel[:3] + np.cross(ang_world, offset)
            pybullet.resetBaseVelocity(body, lin.tolist(), ang_world.tolist(), physicsClientId=c)
            q, qd = qpos[7:], qvel[6:]
        else:
            q, qd = qpos, qvel
        for j, angle, rate in zip(self.joints, q, qd, strict=True):
            pybullet.resetJointState(body, j, float(angle), float(rate), physicsClientId=c)

    def _position(self) -> np.ndarray:
        qpos, _ = self.get_state()
        return qpos[:2].copy() if self.free_root else qpos[:1].copy()

    # -- the Robot interface --------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> np.ndarray:
        """A new episode from gymnasium's noised initial state (its joints clipped into their ranges when
        ``joint_limits`` is on); returns the first observation."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        scale = self.settings["reset_noise_scale"]
        qpos = self.qpos0 + self._rng.uniform(-scale, scale, self.model.nq)
        qvel = self.qvel0 + scale * self._rng.standard_normal(self.model.nv)
        if self.joint_limits:
            hinges = slice(7 if self.free_root else 0, None)
            qpos[hinges] = np.clip(qpos[hinges], self._q_low, self._q_high)
        self.set_state(qpos, qvel)
        self.episode_return, self.episode_length, self.terminated = 0.0, 0, False
        self._last_terms = {}
        return self.read_observation()

    def read_observation(self) -> np.ndarray:
        qpos, qvel = self.get_state()
        return np.concatenate([qpos[self.skip :], qvel]).astype(np.float32)

    def apply_action(self, action) -> None:
        """Clip, scale by the gear, apply as torques for one control cycle (``frame_skip`` physics steps), and score
        it with gymnasium's reward. After a termination (Ant) the episode is over: actions are ignored until
        ``reset``."""
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (self.action_size,):
            raise ValueError(f"action of shape {action.shape}; {self.task} takes ({self.action_size},)")
        if not np.isfinite(action).all():
            raise ValueError("non-finite action")
        if self.terminated:
            return
        ctrl = np.clip(action, self.ctrl_low, self.ctrl_high)
        motor = np.zeros(len(self.joints))
        motor[self.actuated] = ctrl * self.gear
        before = self._position()
        c, body = self.client, self.body
        for _ in range(self.frame_skip * self.substeps):
            states = pybullet.getJointStates(body, self.joints, physicsClientId=c)
            q = np.array([s[0] for s in states])
            qd = np.array([s[1] for s in states])
            self._torque = motor - self.damping * qd - self.stiffness * (q - self.q_spring)
            pybullet.setJointMotorControlArray(
                body, self.joints, pybullet.TORQUE_CONTROL, forces=self._torque.tolist(), physicsClientId=c
            )
            pybullet.stepSimulation(physicsClientId=c)
        velocity = (self._position() - before) / self.dt
        self._last_terms = self._score(ctrl, velocity)
        self.episode_return += self._last_terms["reward"]
        self.episode_length += 1
        self.terminated = bool(self._last_terms["terminated"])

    def reward_terms(self) -> dict[str, float]:
        """The last cycle's reward and its terms, named as gymnasium's ``info`` names them."""
        return dict(self._last_terms)

    def close(self) -> None:
        if self.client is not None and pybullet.isConnected(self.client):
            pybullet.disconnect(self.client)
        self.client = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- gymnasium's rewards --------------------------------------------------------------------------------

    def _score(self, ctrl: np.ndarray, velocity: np.ndarray) -> dict[str, float]:
        s = self.settings
        forward = s["forward_reward_weight"] * float(velocity[0])
        ctrl_cost = s["ctrl_cost_weight"] * float(np.square(ctrl).sum())
        if self.task == "HalfCheetah":
            return {
                "reward": forward - ctrl_cost,
                "reward_forward": forward,
                "reward_ctrl": -ctrl_cost,
                "x_velocity": float(velocity[0]),
                "terminated": False,
            }
        qpos, qvel = self.get_state()
        low, high = s["healthy_z_range"]
        healthy = bool(np.isfinite(qpos).all() and np.isfinite(qvel).all() and low <= qpos[2] <= high)
        healthy_reward = s["healthy_reward"] * healthy
        contact_cost = s["contact_cost_weight"] * float(np.square(self._contact_forces()).sum())
        return {
            "reward": forward + healthy_reward - ctrl_cost - contact_cost,
            "reward_forward": forward,
            "reward_ctrl": -ctrl_cost,
            "reward_contact": -contact_cost,
            "reward_survive": healthy_reward,
            "x_velocity": float(velocity[0]),
            "y_velocity": float(velocity[1]),
            "terminated": (not healthy) and s["terminate_when_unhealthy"],
        }

    def _contact_forces(self) -> np.ndarray:
        """Per link, the summed contact force in world coordinates, clipped to ``contact_force_range`` (the force
        half of MuJoCo's ``cfrc_ext``; see the module docstring)."""
        c, body = self.client, self.body
        forces: dict[int, np.ndarray] = {}
        for point in pybullet.getContactPoints(bodyA=body, physicsClientId=c):
            normal = np.asarray(point[7]) * point[9]
            lateral = np.asarray(point[11]) * point[10] + np.asarray(point[13]) * point[12]
            forces[point[3]] = forces.get(point[3], 0.0) + normal + lateral  # the normal points from B to A
        if not forces:
            return np.zeros(3)
        return np.clip(np.stack(list(forces.values())), *self.settings["contact_force_range"])
