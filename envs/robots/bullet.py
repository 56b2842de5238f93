"""``BulletRobot``: a legged robot simulated by PyBullet from the same MJCF, driven from an exported policy's ``robot``
entry alone, as a sim-to-sim deployment target.

It honours ``rl_suite.deploy.runtime.Robot`` with the same observation and action as ``MujocoRobot``
(``deploy.py``): ``read_observation()`` builds the entry's observation terms from PyBullet's base and joint states,
and ``apply_action(offsets)`` runs the PD loop (``kp (default + offsets - q) - kd q'``, clipped to the torque
limits, as explicit torques at every PyBullet step) for one control period.

The model is the task's (``config.build_model``), written for ``pybullet.loadMJCF`` as a plain MJCF of primitives
(``bullet_mjcf``): every body's compiled mass, centre of mass and principal inertia as an explicit ``<inertial>``
(loadMJCF ignores ``fullinertia`` and puts centres of mass at link origins), capsules as ``fromto``, and no
defaults classes. What else is mapped by hand, because loadMJCF drops it:

- gravity and the physics step (``physics_dt``, split into ``substeps`` PyBullet steps);
- joint damping (explicit torques) and ``armature`` (added to the moved link's principal moments: an
  approximation, Bullet has no joint-space rotor inertia); ``frictionloss`` (0.2 N m on the quadruped) is not
  mapped;
- joint limits (``changeDynamics``);
- Bullet's link velocity damping and joint speed cap are switched off; the ground's friction is 1, as MuJoCo's
  ground plane.

Known differences, not corrected: Bullet's contacts are rigid where MuJoCo's are soft, its friction is the product
of the two bodies' coefficients where MuJoCo takes the larger, and its solver and integrator differ.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from xml.etree import ElementTree

import mujoco
import numpy as np

try:
    import pybullet
except ImportError:  # pragma: no cover - exercised only without the extra
    raise ImportError("BulletRobot needs pybullet: pip install 'rl-suite[bullet]'") from None

from rl_suite.envs.robots.config import bind, build_model
from rl_suite.envs.robots.deploy import EntryRobot


def _numbers(values) -> str:
    return " ".join(repr(float(x)) for x in np.asarray(values).ravel())


def bullet_mjcf(model: mujoco.MjModel) -> str:
    """``model``'s robot as a plain MJCF of primitives for ``pybullet.loadMJCF`` (see the module docstring), with a
    ground plane."""
    root = ElementTree.Element("mujoco", model="robot")
    world = ElementTree.SubElement(root, "worldbody")
    # Bullet collides two shapes when each one's group is in the other's mask (MuJoCo: either way round): the robot's
    # shapes (group 1, mask 2) touch the ground (group 2, mask 1) and not each other, as contype 0 keeps them in MuJoCo
    ElementTree.SubElement(world, "geom", name="ground", type="plane", size="50 50 0.1", contype="2", conaffinity="1")
    elements = {0: world}
    for body in range(1, model.nbody):
        parent = elements[int(model.body_parentid[body])]
        element = ElementTree.SubElement(
            parent,
            "body",
            name=mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body),
            pos=_numbers(model.body_pos[body]),
            quat=_numbers(model.body_quat[body]),
        )
        elements[body] = element
        ElementTree.SubElement(
            element,
            "inertial",
            pos=_numbers(model.body_ipos[body]),
            quat=_numbers(model.body_iquat[body]),
            mass=repr(float(model.body_mass[body])),
            diaginertia=_numbers(model.body_inertia[body]),
        )
        for joint in range(model.body_jntadr[body], model.body_jntadr[body] + model.body_jntnum[body]):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, joint)
            kind = int(model.jnt_type[joint])
            if kind == mujoco.mjtJoint.mjJNT_FREE:
                ElementTree.SubElement(element, "joint", name=name, type="free")
                continue
            attributes = dict(name=name, type="hinge" if kind == mujoco.mjtJoint.mjJNT_HINGE else "slide")
            attributes.update(pos=_numbers(model.jnt_pos[joint]), axis=_numbers(model.jnt_axis[joint]))
            if model.jnt_limited[joint]:
                attributes.update(limited="true", range=_numbers(model.jnt_range[joint]))
            ElementTree.SubElement(element, "joint", **attributes)
        for geom in range(model.body_geomadr[body], model.body_geomadr[body] + model.body_geomnum[body]):
            _geom(model, geom, element)
    ElementTree.indent(root)  # one element per line: loadMJCF fails to parse long lines
    return ElementTree.tostring(root, encoding="unicode")


def _geom(model: mujoco.MjModel, geom: int, parent: ElementTree.Element) -> None:
    kind, size, pos = int(model.geom_type[geom]), model.geom_size[geom], model.geom_pos[geom]
    friction = repr(float(model.geom_friction[geom, 0]))
    filters = dict(contype="1", conaffinity="2")
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        ElementTree.SubElement(
            parent, "geom", type="sphere", size=repr(float(size[0])), pos=_numbers(pos), friction=friction, **filters
        )
    elif kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        rotation = np.zeros(9)
        mujoco.mju_quat2Mat(rotation, model.geom_quat[geom])
        axis = rotation.reshape(3, 3)[:, 2] * size[1]
        ElementTree.SubElement(
            parent,
            "geom",
            type="capsule",
            size=repr(float(size[0])),
            fromto=_numbers(np.concatenate([pos - axis, pos + axis])),
            friction=friction,
            **filters,
        )
    elif kind == mujoco.mjtGeom.mjGEOM_BOX:
        ElementTree.SubElement(
            parent,
            "geom",
            type="box",
            size=_numbers(size),
            pos=_numbers(pos),
            quat=_numbers(model.geom_quat[geom]),
            friction=friction,
            **filters,
        )
    else:
        name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, geom)
        raise ValueError(f"BulletRobot maps spheres, capsules and boxes; geom {name!r} is another type ({kind})")


class BulletRobot(EntryRobot):
    """One legged robot in a PyBullet DIRECT client, driven from an exported policy's robot entry (see the module
    docstring). ``substeps``: PyBullet steps per physics step of the entry's ``physics_dt``."""

    def __init__(
        self,
        entry: dict,
        command=(0.0, 0.0, 0.0),
        substeps: int = 2,
        max_roll_pitch: float = 1.0,
        min_height: float = 0.1,
    ):
        self._setup(entry, command, max_roll_pitch, min_height)
        self.model = model = build_model(self.config, float(entry["physics_dt"]))
        self.bound = bind(self.config, model)
        self.steps = int(entry["decimation"]) * int(substeps)
        self.kp, self.kd = (np.asarray(entry[key], dtype=np.float64) for key in ("kp", "kd"))
        self.torque_limit = np.asarray(entry["torque_limit"], dtype=np.float64)
        self.damping = model.dof_damping[self.bound.joint_dof].copy()

        self.client = c = pybullet.connect(pybullet.DIRECT)
        pybullet.setGravity(*model.opt.gravity, physicsClientId=c)
        pybullet.setPhysicsEngineParameter(fixedTimeStep=float(entry["physics_dt"]) / substeps, physicsClientId=c)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "robot.xml"
            path.write_text(bullet_mjcf(model))
            self.ground, self.body = pybullet.loadMJCF(str(path), physicsClientId=c)
        pybullet.changeDynamics(self.ground, -1, lateralFriction=1.0, physicsClientId=c)
        joints = {}
        for j in range(pybullet.getNumJoints(self.body, physicsClientId=c)):
            info = pybullet.getJointInfo(self.body, j, physicsClientId=c)
            if info[2] in (pybullet.JOINT_REVOLUTE, pybullet.JOINT_PRISMATIC):
                joints[info[1].decode()] = j
        missing = [name for name in self.config.joints if name not in joints]
        if missing:
            raise RuntimeError(f"loadMJCF built no joints {missing}")
        self.joints = [joints[name] for name in self.config.joints]
        for link in range(-1, pybullet.getNumJoints(self.body, physicsClientId=c)):
            pybullet.changeDynamics(
                self.body, link, linearDamping=0.0, angularDamping=0.0, maxJointVelocity=1e4, physicsClientId=c
            )
        for j, (low, high) in zip(self.joints, self.bound.joint_range, strict=True):
            if np.isfinite(low):
                pybullet.changeDynamics(
                    self.body, j, jointLowerLimit=float(low), jointUpperLimit=float(high), physicsClientId=c
                )
            pybullet.setJointMotorControl2(self.body, j, pybullet.VELOCITY_CONTROL, force=0.0, physicsClientId=c)
        self._set_inertias()
        # PyBullet's base pose is its inertial frame's: the centre of mass, with the principal axes (rotated from the
        # body's frame by MuJoCo's body_iquat). Keep both to convert to and from the body's frame.
        base = self.bound.base
        self._base_com = model.body_ipos[base].copy()
        principal = np.zeros(9)
        mujoco.mju_quat2Mat(principal, model.body_iquat[base])
        self._principal = principal.reshape(3, 3)  # inertial frame's axes in the body frame
        self._principal_xyzw = [*model.body_iquat[base][1:], model.body_iquat[base][0]]
        self.reset()

    def _set_inertias(self) -> None:
        """Each link (named after its MuJoCo body by loadMJCF) gets the body's compiled mass and principal moments,
        plus the armature of the joint that moves it (loadMJCF adds geometry to the moments it reads)."""
        model, c = self.model, self.client
        armature = {}
        for name, dof in zip(self.config.joints, self.bound.joint_dof, strict=True):
            joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
            armature[int(model.jnt_bodyid[joint])] = float(model.dof_armature[dof])
        base_name = pybullet.getBodyInfo(self.body, physicsClientId=c)[0].decode()
        links = {base_name: -1}
        for link in range(pybullet.getNumJoints(self.body, physicsClientId=c)):
            links[pybullet.getJointInfo(self.body, link, physicsClientId=c)[12].decode()] = link
        for body in range(1, model.nbody):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, body)
            if name not in links:
                raise RuntimeError(f"loadMJCF built no link for the body {name!r}")
            inertia = model.body_inertia[body] + armature.get(body, 0.0)
            pybullet.changeDynamics(
                self.body,
                links[name],
                mass=float(model.body_mass[body]),
                localInertiaDiagonal=inertia.tolist(),
                physicsClientId=c,
            )

    def reset(self) -> None:
        """The task's reset without noise: the base at its initial height, the joints at the default pose."""
        c = self.client
        origin = np.array([0.0, 0.0, self.config.init_base_height])
        pybullet.resetBasePositionAndOrientation(  # the body upright: the inertial frame turned by body_iquat
            self.body, (origin + self._base_com).tolist(), self._principal_xyzw, physicsClientId=c
        )
        pybullet.resetBaseVelocity(self.body, [0, 0, 0], [0, 0, 0], physicsClientId=c)
        for j, angle in zip(self.joints, self.default, strict=True):
            pybullet.resetJointState(self.body, j, float(angle), 0.0, physicsClientId=c)
        self.last_action = np.zeros(len(self.default))

    def _joints(self) -> tuple[np.ndarray, np.ndarray]:
        states = pybullet.getJointStates(self.body, self.joints, physicsClientId=self.client)
        return np.array([s[0] for s in states]), np.array([s[1] for s in states])

    def _base(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(linear velocity of the base's origin, angular velocity, gravity direction), in the base's frame, and the
        origin's height."""
        c = self.client
        com, quat = pybullet.getBasePositionAndOrientation(self.body, physicsClientId=c)
        lin, ang = (np.asarray(v) for v in pybullet.getBaseVelocity(self.body, physicsClientId=c))
        rotation = np.array(pybullet.getMatrixFromQuaternion(quat)).reshape(3, 3) @ self._principal.T  # body's
        offset = rotation @ self._base_com
        origin_velocity = lin - np.cross(ang, offset)
        height = float(com[2] - offset[2])
        return rotation.T @ origin_velocity, rotation.T @ ang, rotation.T @ np.array([0.0, 0.0, -1.0]), height

    def apply_action(self, offsets) -> None:
        offsets = np.asarray(offsets, dtype=np.float64)
        target, c = self.default + offsets, self.client
        for _ in range(self.steps):
            q, qd = self._joints()
            torque = np.clip(self.kp * (target - q) - self.kd * qd, -self.torque_limit, self.torque_limit)
            torque -= self.damping * qd
            pybullet.setJointMotorControlArray(
                self.body, self.joints, pybullet.TORQUE_CONTROL, forces=torque.tolist(), physicsClientId=c
            )
            pybullet.stepSimulation(physicsClientId=c)
        self._record_action(offsets)

    def close(self) -> None:
        if self.client is not None and pybullet.isConnected(self.client):
            pybullet.disconnect(self.client)
        self.client = None
