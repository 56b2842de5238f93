"""The seams between the core and the backends: the adapters' end of step (``VecEnv.start_episodes`` and
``finish_step``), the physics backends' ``PhysicsBackend`` protocol, ``EnvStreams``' state, the one list of MuJoCo
tasks and the tasks' declared parameters."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

import rl_suite
from rl_suite.env import VecEnv
from rl_suite.registry import MUJOCO_TASKS, load_entry_point
from rl_suite.rng import EnvStreams

ROOT = pathlib.Path(__file__).resolve().parents[1]
N = 3


def outside_env(critic: bool = False) -> VecEnv:
    """A ``VecEnv`` driven by hand, as an adapter of an outside simulator drives it."""
    env = VecEnv(N, "cpu", gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), gym.spaces.Box(-1, 1, (1,), np.float32))
    if critic:
        env.offer_critic_observation(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32))
    return env


# -- the adapters' end of step ----------------------------------------------------------------------------------


def test_finish_step_reports_the_step_final_observations_and_episode_statistics():
    env = outside_env()
    obs = env.start_episodes(torch.zeros(N, 2))
    assert torch.equal(obs, torch.zeros(N, 2))
    no, yes = torch.zeros(N, dtype=torch.bool), torch.ones(N, dtype=torch.bool)
    for step in range(1, 3):  # two steps of reward 1, 2, 3 (by env) that end nothing
        reward = torch.arange(1.0, N + 1)
        obs, rew, terminated, truncated, info = env.finish_step(torch.full((N, 2), float(step)), reward, no, no)
        assert torch.equal(info["final_obs"], obs) and not info["done"].any()
        assert not info["episode_return"].any() and not info["episode_length"].any()
    # env 0 terminates, env 2 is truncated; their final observations differ from the new episodes' first ones
    terminated, truncated = torch.tensor([True, False, False]), torch.tensor([False, False, True])
    final = torch.full((N, 2), 7.0)
    obs, reward, term, trunc, info = env.finish_step(
        torch.full((N, 2), 9.0), torch.ones(N), terminated, truncated, final
    )
    assert torch.equal(obs, torch.full((N, 2), 9.0)) and torch.equal(info["final_obs"], final)
    assert torch.equal(term, terminated) and torch.equal(trunc, truncated) and torch.equal(reward, torch.ones(N))
    assert torch.equal(info["done"], torch.tensor([True, False, True]))
    torch.testing.assert_close(info["episode_return"], torch.tensor([1.0 + 1 + 1, 0.0, 3.0 + 3 + 1]))
    assert info["episode_length"].dtype == torch.int32 and info["episode_length"].tolist() == [3, 0, 3]
    # the ended episodes count from zero again; env 1 carries on to a length of 4
    info = env.finish_step(torch.zeros(N, 2), torch.ones(N), no, yes)[4]
    assert info["episode_length"].tolist() == [1, 4, 1]
    torch.testing.assert_close(info["episode_return"], torch.tensor([1.0, 2 + 2 + 1 + 1, 1.0]))


def test_start_episodes_by_rows_writes_and_restarts_only_those_rows():
    env = outside_env(critic=True)
    env.start_episodes(torch.zeros(N, 2), torch.zeros(N, 4))
    no = torch.zeros(N, dtype=torch.bool)
    info = env.finish_step(torch.ones(N, 2), torch.ones(N), no, no, critic_obs=torch.ones(N, 4))[4]
    # an adapter that resets env 1 itself after the step (Isaac Gym's deferred resets)
    obs = env.start_episodes(torch.full((N, 2), 5.0), torch.full((N, 4), 6.0), env_ids=torch.tensor([1]))
    assert obs.tolist() == [[1.0, 1.0], [5.0, 5.0], [1.0, 1.0]]
    assert info["critic_obs"][:, 0].tolist() == [1.0, 6.0, 1.0]  # the buffer step returned, now the new episode's
    truncated = torch.ones(N, dtype=torch.bool)
    info = env.finish_step(obs.clone(), torch.ones(N), no, truncated, critic_obs=torch.ones(N, 4))[4]
    assert info["episode_length"].tolist() == [2, 1, 2]
    assert torch.equal(info["final_critic_obs"], torch.ones(N, 4))


def test_finish_step_refuses_what_it_would_broadcast_and_critic_observations_that_do_not_match():
    env, no = outside_env(), torch.zeros(N, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"VecEnv.finish_step expects reward as a tensor of shape \(3,\), got \(1,\)"):
        env.finish_step(torch.zeros(N, 2), torch.zeros(1), no, no)
    with pytest.raises(ValueError, match=r"expects obs as a tensor of shape \(3, 2\), got ndarray"):
        env.finish_step(np.zeros((N, 2)), torch.zeros(N), no, no)
    with pytest.raises(ValueError, match=r"got critic_obs=a tensor, but the env does not offer a critic observation"):
        env.finish_step(torch.zeros(N, 2), torch.zeros(N), no, no, critic_obs=torch.zeros(N, 4))
    with pytest.raises(ValueError, match=r"VecEnv.start_episodes got critic_obs=None, but the env offers a critic"):
        outside_env(critic=True).start_episodes(torch.zeros(N, 2))


def vecenv_private_members() -> set[str]:
    members = set(vars(outside_env(critic=True))) | set(vars(VecEnv))
    return {name for name in members if name.startswith("_") and not name.startswith("__")}


@pytest.mark.parametrize("adapter", sorted(p.stem for p in (ROOT / "envs" / "adapters").glob("[!_]*.py")))
def test_adapters_use_no_private_member_of_vecenv(adapter):
    private = vecenv_private_members()
    assert {"_obs", "_running", "_close_episodes", "_step_info"} <= private
    path = ROOT / "envs" / "adapters" / f"{adapter}.py"
    used = {
        node.attr
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    }
    assert not used & private, f"{path.name} uses VecEnv's {sorted(used & private)}; use start_episodes/finish_step"


# -- physics backends ---------------------------------------------------------------------------------------------


def protocol_members(protocol: type) -> tuple[set[str], dict[str, inspect.Signature]]:
    """The data members (annotations) and the methods, with their signatures, that ``protocol`` declares."""
    methods = {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }
    return set(protocol.__annotations__), methods


def model(name: str):
    mujoco = pytest.importorskip("mujoco")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return mujoco.MjModel.from_xml_path(str(pathlib.Path(gym.__file__).parent / "envs/mujoco/assets" / name))


try:
    from rl_suite.envs.mujoco.env import BACKENDS  # every backend in the table is tested, with no edit here
except ImportError:  # mujoco is not installed: the backend tests are skipped (an empty parameter set)
    BACKENDS = {}


def physics_backend(name: str) -> type:
    """The backend class registered as ``name``; skipped where its simulator is not installed."""
    try:
        return load_entry_point(BACKENDS[name])
    except ImportError as error:
        pytest.skip(f"the {name} backend's simulator is not installed: {error}")


@pytest.mark.parametrize("name", list(BACKENDS))
def test_physics_backends_provide_every_member_of_the_protocol_with_its_shapes(name):
    backend = physics_backend(name)
    from rl_suite.envs.mujoco.physics import PhysicsBackend

    data, methods = protocol_members(PhysicsBackend)
    assert {"qpos", "state", "derived"} <= data and {"step", "reset", "forward", "model_field"} <= set(methods)
    for method, signature in methods.items():
        assert inspect.signature(getattr(backend, method)) == signature, f"{backend.__name__}.{method}"
    ant = model("ant.xml")  # a free root, so nq != nv; 4 simulations of it take 0.3 s to build on warp's CPU device
    physics = backend(ant, 4, ("xpos", "cfrc_ext"), device="cpu")  # the constructor MujocoVecEnv calls
    missing = [member for member in data if not hasattr(physics, member)]
    assert not missing, f"{backend.__name__} lacks {missing}"
    assert physics.backend == name and physics.num_envs == 4 and physics.model is ant
    shapes = {"qpos": (ant.nq,), "qvel": (ant.nv,), "ctrl": (ant.nu,), "xfrc_applied": (ant.nbody, 6)}
    mujoco = pytest.importorskip("mujoco")
    shapes["state"] = (mujoco.mj_stateSize(ant, mujoco.mjtState.mjSTATE_INTEGRATION),)
    for name, shape in shapes.items():
        tensor = getattr(physics, name)
        assert tensor.shape == (4, *shape) and tensor.dtype == physics.dtype and tensor.device == physics.device, name
    assert physics.derived["cfrc_ext"].shape == (4, ant.nbody, 6)


# -- random streams ---------------------------------------------------------------------------------------------


def test_stream_state_continues_every_stream_exactly():
    streams = EnvStreams(4, torch.device("cpu"), seed=3)
    streams.uniform(0.0, 1.0, 5, mask=torch.tensor([True, False, True, True]))
    saved = streams.get_state()
    assert saved.dtype == torch.int32 and saved.shape == (4, 2)
    expected = streams.normal(3, env_ids=torch.tensor([2, 0]))
    other = EnvStreams(4, torch.device("cpu"), seed=99)
    other.set_state(saved)
    assert torch.equal(other.normal(3, env_ids=torch.tensor([2, 0])), expected)
    assert not torch.equal(saved, other.get_state())  # a copy, which the draws since did not move


def test_stream_state_of_another_size_or_dtype_is_refused():
    streams = EnvStreams(4, torch.device("cpu"), seed=0)
    with pytest.raises(ValueError, match=r"int32 tensor of shape \(4, 2\) \(from get_state of 4 streams\), got torch"):
        streams.set_state(EnvStreams(5, torch.device("cpu"), seed=0).get_state())
    with pytest.raises(ValueError, match=r"got torch.int64 \(4, 2\)"):
        streams.set_state(streams.get_state().long())


@pytest.mark.parametrize(
    "env_id, keys",
    [
        ("CartPole-v1", {"state", "streams", "running", "obs"}),
        ("HalfCheetah-v5", {"physics", "position", "streams", "running", "obs"}),
    ],
)
def test_env_checkpoints_keep_their_format(env_id, keys):
    """Checkpoints written before ``EnvStreams.get_state`` hold the same keys and tensors, so they still load."""
    env = rl_suite.make(env_id, num_envs=N, seed=0)
    env.reset()
    state = env.state_dict()
    assert set(state) == keys
    assert state["streams"].dtype == torch.int32 and torch.equal(state["streams"], env.rng.get_state())


# -- the MuJoCo tasks -------------------------------------------------------------------------------------------


def test_the_registry_names_exactly_the_mujoco_tasks():
    pytest.importorskip("mujoco")
    from rl_suite.envs.mujoco import tasks

    assert list(tasks.TASKS) == list(MUJOCO_TASKS)
    defined = {
        value.__name__
        for value in vars(tasks).values()
        if isinstance(value, type)
        and issubclass(value, tasks.MujocoTask)
        and not value.__name__.startswith(("_", "Mujoco"))
    }
    assert defined == set(MUJOCO_TASKS), "a task class that the registry does not name (or the other way round)"
    mujoco_ids = [s.id for s in rl_suite.registry.registered() if s.entry_point.endswith(":make_mujoco_env")]
    assert mujoco_ids == [f"{task}-v5" for task in MUJOCO_TASKS]


@pytest.mark.parametrize("task", MUJOCO_TASKS)
def test_each_task_declares_gymnasiums_parameters_as_its_fields(task):
    pytest.importorskip("mujoco")
    from rl_suite.envs.mujoco.tasks import TASKS

    reference = rl_suite.registry.load_entry_point(gym.spec(f"{task}-v5").entry_point)  # gymnasium's env class
    expected = {k: p.default for k, p in inspect.signature(reference).parameters.items() if k != "kwargs"}
    # gymnasium's environment-level settings are the task's class attributes (or the renderer's, which we do not take)
    assert (expected.pop("xml_file"), expected.pop("frame_skip")) == (TASKS[task].xml_file, TASKS[task].frame_skip)
    expected.pop("default_camera_config")
    assert {field.name: field.default for field in dataclasses.fields(TASKS[task])} == expected
    assert list(inspect.signature(TASKS[task]).parameters) == list(expected)  # in gymnasium's order


def test_the_base_task_declares_what_its_methods_read():
    pytest.importorskip("mujoco")
    from rl_suite.envs.mujoco.tasks import MujocoTask

    tree = ast.parse(inspect.getsource(MujocoTask))
    read = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }
    declared = set(MujocoTask.__annotations__) | set(vars(MujocoTask))
    assert read and read <= declared, f"MujocoTask reads {sorted(read - declared)} without declaring them"
