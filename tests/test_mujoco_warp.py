"""``WarpPhysics`` (MuJoCo Warp, float32, here on warp's CPU device) against ``CPUPhysics`` (MuJoCo, float64).

Warp compiles its kernels for the CPU on first use and caches them (``WARP_CACHE_PATH``, by default
``~/.cache/warp``). Measured on 2 cores: 90 s for this module with an empty cache (45 s of it HalfCheetah's first
step, which compiles the kernels every model shares), 25 s with a warm one. Each model is used in one
configuration only, so that the tests share their kernels.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest
import torch

mujoco = pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")
wp = pytest.importorskip("warp")
pytest.importorskip("mujoco_warp")

from rl_suite.envs.mujoco.physics import CPUPhysics, compile_spec  # noqa: E402
from rl_suite.envs.mujoco.warp_physics import WarpPhysics  # noqa: E402

ASSETS = Path(gymnasium.__file__).parent / "envs/mujoco/assets"
FIELDS = ("xpos", "xipos", "cinert", "cvel", "cfrc_ext", "qfrc_actuator", "qfrc_constraint")
N, FRAME_SKIP = 4, 5

# One frame's error (5 substeps from the same state), as a fraction of the field's largest magnitude over the
# compared frames (at least 1): measured over 8 seeds of test_frames_match_cpu_physics for each model.
#                  qpos   qvel   xpos   xipos  cinert cvel   cfrc_ext qfrc_actuator qfrc_constraint
#   typical        7e-7   4e-6   4e-7   5e-7   2e-7   5e-6   2e-4     7e-8          5e-5
#   worst          4e-5   3e-4   4e-6   6e-6   8e-7   4e-4   1.4e-2   8e-8          1.4e-2
# (the worst: HalfCheetah, seed 35, a contact at the margin that one backend counts and the other not). float32
# rounds at 6e-8; the float32 solver stops earlier than MuJoCo's, so constraint forces move most. Over 10 frames
# run side by side without resynchronising, qpos drifts apart by at most 4e-6. Tolerances: about 3x the worst.
TOLERANCE = {
    "qpos": 1e-4,
    "qvel": 1e-3,
    "xpos": 2e-5,
    "xipos": 2e-5,
    "cinert": 3e-6,
    "cvel": 1e-3,
    "cfrc_ext": 5e-2,
    "qfrc_actuator": 1e-6,
    "qfrc_constraint": 5e-2,
}


def load(name: str, elliptic: bool = False) -> mujoco.MjModel:
    model = compile_spec(mujoco.MjSpec.from_file(str(ASSETS / name)))  # as MujocoVecEnv compiles them
    if elliptic:
        model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    return model


def newton(model: mujoco.MjModel) -> mujoco.MjModel:
    """What WarpPhysics runs: the model with Newton in place of PGS."""
    model = copy.copy(model)
    if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
        model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    return model


def warp_physics(model: mujoco.MjModel, num_envs: int = N) -> WarpPhysics:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PGS -> Newton, tested in test_pgs_runs_as_newton
        return WarpPhysics(model, num_envs, FIELDS)


def random_start(physics, model: mujoco.MjModel, seed: int) -> None:
    """gymnasium's initial-state noise, larger: qpos0 + U(-0.1, 0.1), qvel = 0.1 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    physics.reset()
    qpos0 = torch.as_tensor(model.qpos0, dtype=physics.dtype)
    physics.qpos.copy_(qpos0 + 0.1 * (2 * torch.rand(physics.qpos.shape, generator=g, dtype=physics.dtype) - 1))
    physics.qvel.copy_(0.1 * torch.randn(physics.qvel.shape, generator=g, dtype=physics.dtype))
    physics.forward()


def scaled_errors(warp: WarpPhysics, cpu: CPUPhysics) -> dict[str, float]:
    """Largest |warp - cpu| per field, over the field's largest magnitude (at least 1)."""
    pairs = {"qpos": (warp.qpos, cpu.qpos), "qvel": (warp.qvel, cpu.qvel)}
    pairs.update({name: (warp.derived[name], cpu.derived[name]) for name in FIELDS})
    errors = {}
    for name, (ours, expected) in pairs.items():
        scale = max(1.0, expected.abs().max().item())
        errors[name] = (ours.double() - expected).abs().max().item() / scale
    return errors


def frame_errors(name: str, elliptic: bool, seed: int = 0) -> tuple[dict[str, float], float]:
    """Per field, the largest scaled error after a frame, over 10 frames from random states near qpos0 and 10
    frames after the bodies have fallen (contacts); and the largest cfrc_ext seen in those. Each frame starts
    WarpPhysics from CPUPhysics's state (float32-rounded), so errors are one frame's, not chaos compounded."""
    model = newton(load(name, elliptic))
    cpu, warp = CPUPhysics(model, N, FIELDS, nthread=1), warp_physics(model)
    random_start(cpu, model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    worst, largest_contact_force = dict.fromkeys(("qpos", "qvel", *FIELDS), 0.0), 0.0
    for frame in range(40):
        controls = 2 * torch.rand(N, model.nu, generator=g, dtype=torch.float64) - 1
        compared = frame < 10 or frame >= 30  # frames 10..29: the CPU alone, to let the bodies fall
        if compared:
            warp.state.copy_(cpu.state)
            assert torch.equal(warp.qpos, cpu.qpos.float())  # one layout: mjSTATE_INTEGRATION
            warp.ctrl.copy_(controls)
            warp.step(FRAME_SKIP)
        cpu.ctrl.copy_(controls)
        cpu.step(FRAME_SKIP)
        if compared:
            errors = scaled_errors(warp, cpu)
            worst = {field: max(worst[field], errors[field]) for field in worst}
            largest_contact_force = max(largest_contact_force, cpu.derived["cfrc_ext"].abs().max().item())
    return worst, largest_contact_force


# gymnasium's Ant and Humanoid use the pyramidal friction cone, whose edges follow the contact's tangent frame.
# For a capsule steeper than 60 degrees on a plane, mujoco_warp takes a fixed tangent while MuJoCo takes the
# capsule's axis (e.g. (0, 1, 0) against (-0.991, -0.134, 0) on Ant), so contact forces differ by far more than
# float32 (one frame of Ant: qvel 1.4 off in 12, cfrc_ext 110 in 40; Humanoid: qvel 0.17 in 15). The elliptic cone
# does not depend on the frame: there both agree to float32. HalfCheetah is planar: its frames agree.
MODELS = [("half_cheetah.xml", False), ("ant.xml", True), ("humanoid.xml", True)]


@pytest.mark.parametrize(("name", "elliptic"), MODELS)
def test_frames_match_cpu_physics(name, elliptic):
    worst, largest_contact_force = frame_errors(name, elliptic)
    assert largest_contact_force > 10.0  # the compared frames include contacts
    for field, error in worst.items():
        assert error <= TOLERANCE[field], (field, worst)


def test_forward_matches_cpu_physics():
    model = load("ant.xml", elliptic=True)
    cpu, warp = CPUPhysics(model, N, FIELDS, nthread=1), warp_physics(model)
    random_start(cpu, model, seed=2)
    warp.state.copy_(cpu.state)
    cpu.forward()
    warp.forward()
    errors = scaled_errors(warp, cpu)
    assert all(error <= TOLERANCE[field] for field, error in errors.items()), errors
    assert warp.derived["cfrc_ext"].abs().max() == 0  # as after mj_resetData and mj_forward


def test_pgs_runs_as_newton():
    model = load("humanoid.xml")
    with pytest.warns(UserWarning, match="PGS"):
        warp = WarpPhysics(model, 1)
    assert warp.model is model and model.opt.solver == mujoco.mjtSolver.mjSOL_PGS  # the caller's model is untouched


def test_views_alias_the_warp_arrays():
    model = load("half_cheetah.xml")
    warp = warp_physics(model, num_envs=2)
    warp.reset()
    warp.forward()
    views = {"qpos": warp.qpos, "qvel": warp.qvel, "ctrl": warp.ctrl, "xpos": warp.derived["xpos"]}
    addresses = {name: view.data_ptr() for name, view in views.items()}
    for name, view in views.items():
        assert view.data_ptr() == getattr(warp._d, name).ptr, name
    assert warp.qpos.data_ptr() == warp.state[:, 1:].data_ptr()  # after time: the state rows are Data's qpos

    # A write through torch is what the next step starts from: lift world 1 by 1 m (rootz is qpos[1]).
    warp.qpos[1, 1] += 1.0
    warp.step(1)
    xpos = warp.derived["xpos"]  # of the state before the substep: the one written
    assert torch.allclose(xpos[1, 1:, 2] - xpos[0, 1:, 2], torch.ones(model.nbody - 1), atol=1e-5)
    assert torch.allclose(warp.state[:, 0], torch.full((2,), model.opt.timestep))
    # Stepping moved nothing: the Data's arrays and the torch views are the same memory as before.
    for _ in range(3):
        warp.ctrl.uniform_(-1, 1)
        warp.step(FRAME_SKIP)
    for name, view in views.items():
        assert view.data_ptr() == addresses[name] == getattr(warp._d, name).ptr, name


def test_state_restores_exactly():
    model = load("half_cheetah.xml")
    warp = warp_physics(model, num_envs=3)
    random_start(warp, model, seed=3)
    g = torch.Generator().manual_seed(4)
    controls = 2 * torch.rand(6, 3, model.nu, generator=g) - 1
    for u in controls[:3]:
        warp.ctrl.copy_(u)
        warp.step(FRAME_SKIP)
    saved = warp.state.clone()

    def rollout():
        qpos = []
        for u in controls[3:]:
            warp.ctrl.copy_(u)
            warp.step(FRAME_SKIP)
            qpos.append(warp.qpos.clone())
        return torch.stack(qpos), warp.derived["cfrc_ext"].clone()

    first = rollout()
    warp.state.copy_(saved)
    again = rollout()
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert first[1].abs().max() > 0


def test_forward_and_reset_touch_only_the_chosen_worlds():
    model = load("ant.xml", elliptic=True)
    warp = warp_physics(model, num_envs=3)
    random_start(warp, model, seed=5)
    for _ in range(50):  # unactuated, until every world rests on the ground
        warp.step(FRAME_SKIP)
        if (warp.derived["cfrc_ext"].abs().amax(dim=(1, 2)) > 0).all():
            break
    assert (warp.derived["cfrc_ext"].abs().amax(dim=(1, 2)) > 0).all()
    before = {name: view.clone() for name, view in warp.derived.items()}
    warmstart = warp._warmstart.clone()

    warp.qpos[:, 2] += 0.1  # move every world, but recompute world 1 only
    warp.forward(torch.tensor([1]))
    for name, view in warp.derived.items():
        assert torch.equal(view[[0, 2]], before[name][[0, 2]]), name
    assert not torch.equal(warp.derived["xpos"][1], before["xpos"][1])
    assert torch.equal(warp.derived["cfrc_ext"][1], before["cfrc_ext"][1])  # mj_forward does not compute it
    assert torch.equal(warp._warmstart[[0, 2]], warmstart[[0, 2]]) and (warp._warmstart[1] == 0).all()
    # World 1 now holds what a forward of every world gives it.
    recomputed = {name: view[1].clone() for name, view in warp.derived.items()}
    warp.forward()
    assert all(torch.equal(warp.derived[name][1], recomputed[name]) for name in FIELDS)

    kept = warp.state[[0, 1]].clone()
    warp.reset(torch.tensor([2]))
    assert torch.equal(warp.state[[0, 1]], kept)
    assert torch.equal(warp.qpos[2], torch.as_tensor(model.qpos0, dtype=torch.float32))
    assert warp.state[2, 0] == 0 and (warp.qvel[2] == 0).all() and (warp.ctrl[2] == 0).all()
    assert all((view[2] == 0).all() for view in warp.derived.values())


def test_data_copies_one_world():
    model = load("half_cheetah.xml")
    warp = warp_physics(model, num_envs=2)
    random_start(warp, model, seed=6)
    warp.ctrl.uniform_(-1, 1)
    warp.step(FRAME_SKIP)
    data = warp.data(1)
    assert torch.equal(torch.as_tensor(data.qpos, dtype=torch.float32), warp.qpos[1])
    assert torch.equal(torch.as_tensor(data.xpos, dtype=torch.float32), warp.derived["xpos"][1])
    assert data.time == pytest.approx(warp.state[1, 0].item())


def test_half_cheetah_task_on_warp_matches_gymnasium():
    """The whole task (observation, reward) on the Warp backend against gymnasium, one step from the same states.
    Measured worst over 20 cases: observation 4.5e-6 of its largest entry, reward 2.4e-6; tolerances 20x that."""
    import numpy as np

    import rl_suite

    ref = gymnasium.make("HalfCheetah-v5").unwrapped
    env = rl_suite.make("HalfCheetah-v5", num_envs=N, seed=0, backend="warp")
    assert env.backend == "warp" and env.physics.dtype == torch.float32
    env.reset()
    rng = np.random.default_rng(0)
    qpos, qvel = [], []
    for i in range(N):
        ref.reset(seed=i)
        for _ in range(7 * i):
            ref.do_simulation(rng.uniform(-1, 1, 6), FRAME_SKIP)
        qpos.append(ref.data.qpos.copy())
        qvel.append(ref.data.qvel.copy())
    qpos, qvel = np.stack(qpos), np.stack(qvel)
    for _ in range(3):
        actions = rng.uniform(-1, 1, (N, 6)).astype(np.float32)
        env.set_state(torch.from_numpy(qpos), torch.from_numpy(qvel))
        _, reward, terminated, _, info = env.step(torch.from_numpy(actions))
        for i in range(N):
            ref.reset(seed=0)
            ref.set_state(qpos[i], qvel[i])
            expected_obs, expected_reward, *_ = ref.step(actions[i])
            scale = max(1.0, np.abs(expected_obs).max())
            assert np.abs(info["final_obs"][i].numpy() - expected_obs).max() <= 1e-4 * scale
            assert abs(reward[i].item() - expected_reward) <= 5e-5
            assert not terminated[i]


def test_per_world_masses_and_friction_match_cpu_physics():
    """Model fields varied per world (mass randomisation's ``model_field`` and ``set_const``) step as on the CPU
    backend with the same values; HalfCheetah as in the tests above, so no kernel is compiled for this test alone."""
    model = load("half_cheetah.xml")
    cpu, warp = CPUPhysics(model, N, FIELDS, nthread=1), warp_physics(model)
    g = torch.Generator().manual_seed(5)
    mass_factor = 0.6 + 0.8 * torch.rand(N, model.nbody, generator=g, dtype=torch.float64)
    friction_factor = 0.3 + torch.rand(N, 1, generator=g, dtype=torch.float64)
    for physics in (cpu, warp):
        physics.model_field("body_mass").copy_(torch.as_tensor(model.body_mass) * mass_factor)
        physics.model_field("body_inertia").copy_(torch.as_tensor(model.body_inertia) * mass_factor[..., None])
        physics.model_field("geom_friction")[..., 0] = torch.as_tensor(model.geom_friction[:, 0]) * friction_factor
        physics.set_const()
    cpu.reset()
    cpu.forward()  # every world starts at qpos0 and gets the same controls: only their parameters differ
    for frame in range(30):
        controls = (2 * torch.rand(1, model.nu, generator=g, dtype=torch.float64) - 1).expand(N, -1)
        warp.state.copy_(cpu.state)
        for physics in (cpu, warp):
            physics.ctrl.copy_(controls)
            physics.step(FRAME_SKIP)
        errors = scaled_errors(warp, cpu)
        assert errors["qpos"] < TOLERANCE["qpos"] and errors["qvel"] < TOLERANCE["qvel"], (frame, errors)
    # each world ran on its own parameters: from one start under one control sequence, they went apart
    assert (warp.qpos[0] - warp.qpos[1]).abs().max() > 1e-2
    assert warp.model_field("body_subtreemass").shape == (N, model.nbody)
