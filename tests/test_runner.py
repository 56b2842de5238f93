"""The runner and what a run leaves behind: run directory, stop conditions, exact resume, safe checkpoints, skipped
non-finite updates, and the stable-baselines3-style conveniences."""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import numpy as np
import pytest
import torch
import yaml

import rl_suite
from rl_suite.agents.bpo import BPO
from rl_suite.agents.fixpo import FixPO
from rl_suite.agents.flashsac import FlashSAC
from rl_suite.agents.fpo import FPO
from rl_suite.agents.policyflow import PolicyFlow
from rl_suite.agents.ppo import PPO
from rl_suite.agents.pql import PQL
from rl_suite.agents.props import PROPS
from rl_suite.agents.sac import SAC
from rl_suite.checkpoint import CheckpointError, checkpoints, load_latest
from rl_suite.cli import main
from rl_suite.config import ConfigError, field_types
from rl_suite.registry import UntrustedEnvError
from rl_suite.rng import seed_everything
from rl_suite.runner import RunConfig, Runner

TINY_PPO = dict(n_steps=8, epochs=2, minibatches=2, hidden=(16, 16))
TINY_SAC = dict(hidden=(16, 16), batch_size=32, learning_starts=64, buffer_size=4096, updates_per_transition=0.25)
# PQL's learners in turn in the runner's thread (concurrent=False): the deterministic form, which resumes exactly.
TINY_PQL = dict(hidden=(16, 16), batch_size=32, learning_starts=64, buffer_size=4096, concurrent=False)
TINY_FLASH = dict(
    actor_width=16, critic_width=16, actor_blocks=1, critic_blocks=1, atoms=11, batch_size=32, learning_starts=64,
    buffer_size=4096, updates_per_transition=0.25,
)  # fmt: skip
TINY_FLOW = dict(n_steps=8, epochs=2, minibatches=2, hidden=(16, 16), scale_rewards=True)


def build(algo, env_id, settings, num_envs=4, seed=0):
    seed_everything(seed)
    env = rl_suite.make(env_id, num_envs=num_envs, seed=seed)
    return algo(env.observation_space, env.action_space, **settings), env


def run_config(**overrides):
    base = dict(
        env_id="CartPole-v1",
        num_envs=4,
        total_steps=640,
        eval_every_steps=320,
        eval_episodes=5,
        log_every_steps=160,
        checkpoint_every_steps=320,
        keep_checkpoints=10,
        progress=False,
    )
    return RunConfig(**{**base, **overrides})


def parameters(agent):
    return torch.cat([p.detach().flatten() for m in agent.modules.values() for p in m.parameters()])


def test_run_directory_holds_config_events_checkpoints_and_summary(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    summary = Runner(agent, env, run_config(stop_at_return=10_000.0), run_dir=tmp_path).run()
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config["run"]["total_steps"] == 640 and config["agent"]["n_steps"] == 8
    assert list(tmp_path.glob("events.out.tfevents*"))
    assert [p.name for p in checkpoints(tmp_path)] == ["step_000000000640.pt", "step_000000000320.pt"]
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["env_steps"] == 640 and on_disk["wall_time_s"] > 0
    assert (
        set(on_disk["final_eval"]) == {"mean_return", "std_return", "episodes"}
        and on_disk["final_eval"]["episodes"] == 5
    )
    assert on_disk["threshold"] == {"return": 10_000.0, "reached": False, "env_steps": None, "wall_time_s": None}


def test_tensorboard_scalars_are_written(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    Runner(agent, env, run_config(), run_dir=tmp_path).run()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in (
        "rollout/episode_return",
        "rollout/episode_length",
        "train/policy_loss",
        "train/value_loss",
        "train/entropy",
        "train/approx_kl",
        "train/lr",
        "time/env_steps_per_s",
        "time/updates_per_s",
        "eval/mean_return",
    ):
        assert tag in tags, tag


def test_stops_at_the_return_threshold_and_records_when(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    summary = Runner(agent, env, run_config(total_steps=10**6, stop_at_return=5.0), run_dir=tmp_path).run()
    assert summary["threshold"]["reached"] and summary["env_steps"] == 320  # the first evaluation already reaches 5
    assert (
        summary["threshold"]["env_steps"] == 320 and 0 < summary["threshold"]["wall_time_s"] <= summary["wall_time_s"]
    )


def test_stops_at_the_time_budget(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    summary = Runner(
        agent, env, run_config(total_steps=10**9, time_budget_s=1.0, eval_every_steps=10**8), run_dir=tmp_path
    ).run()
    assert 0 < summary["env_steps"] < 10**9 and summary["wall_time_s"] < 30


@pytest.mark.parametrize(
    "algo, env_id, settings",
    [
        (PPO, "CartPole-v1", TINY_PPO),
        (BPO, "Pendulum-v1", TINY_PPO),
        (FixPO, "Pendulum-v1", {**TINY_PPO, "lr": 0.02, "kl_bound": 0.01}),  # its fixup phase at work
        (FixPO, "Pendulum-v1", {**TINY_PPO, "lr": 0.02, "kl_bound": 0.01, "policy": "flow"}),  # and the flow's noise
        (PROPS, "Pendulum-v1", {**TINY_PPO, "props_steps": 4, "props_epochs": 2, "props_minibatches": 2}),
        (SAC, "Pendulum-v1", TINY_SAC),
        (FlashSAC, "Pendulum-v1", TINY_FLASH),
        (PQL, "Pendulum-v1", TINY_PQL),
        (FPO, "Pendulum-v1", TINY_FLOW),
        (PolicyFlow, "Pendulum-v1", TINY_FLOW),
    ],
    ids=["ppo", "bpo", "fixpo", "fixpo-flow", "props", "sac", "flashsac", "pql-in-turn", "fpo", "policyflow"],
)
def test_resumed_run_ends_bitwise_equal_to_the_straight_run(tmp_path, algo, env_id, settings):
    straight_dir, resumed_dir = tmp_path / "straight", tmp_path / "resumed"
    agent, env = build(algo, env_id, settings)
    Runner(agent, env, run_config(env_id=env_id, algo=algo.name), run_dir=straight_dir).run()
    straight = parameters(agent)

    # Keep only the halfway checkpoint, then continue from it with freshly built objects and another seed.
    shutil.copytree(straight_dir, resumed_dir)
    (resumed_dir / "checkpoints" / "step_000000000640.pt").unlink()
    agent, env = build(algo, env_id, settings, seed=123)
    summary = Runner(agent, env, run_config(env_id=env_id, algo=algo.name), run_dir=resumed_dir, resume=True).run()
    assert summary["env_steps"] == 640
    assert torch.equal(parameters(agent), straight)


@pytest.mark.parametrize(
    "algo, env_id, settings, in_update, signal_name",
    [
        (PPO, "CartPole-v1", TINY_PPO, True, "SIGINT"),
        (PPO, "CartPole-v1", TINY_PPO, False, "SIGINT"),
        (SAC, "Pendulum-v1", TINY_SAC, True, "SIGINT"),
        (PPO, "CartPole-v1", TINY_PPO, False, "SIGTERM"),
        (PPO, "CartPole-v1", TINY_PPO, False, "SIGHUP"),
    ],
    ids=["ppo-in-update", "ppo-in-rollout", "sac-in-update", "ppo-sigterm-in-rollout", "ppo-sighup-repeated"],
)
def test_ctrl_c_finishes_the_iteration_checkpoints_and_the_resumed_run_ends_bitwise_equal(
    tmp_path, algo, env_id, settings, in_update, signal_name
):
    """SIGINT (Ctrl-C) or SIGTERM (a scheduler's preemption) in the middle of a rollout or an update: the iteration
    finishes, the checkpoint written then is of a consistent state (not a half-filled buffer), and the run resumed
    from it ends as the run that never stopped. SIGHUP comes three times in a row, as a benchmark's runs get their
    parent-death signal once for each of its threads: the repeats do not cut the checkpoint short."""
    import signal

    # Whatever the handlers were (a shell's `make test &` starts pytest with SIGINT ignored), the runner puts them back.
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    handlers_before = [signal.getsignal(number) for number in handled]
    config = run_config(env_id=env_id, algo=algo.name, checkpoint_every_steps=10**6)
    agent, env = build(algo, env_id, settings)
    Runner(agent, env, config, run_dir=tmp_path / "straight").run()
    straight = parameters(agent)

    agent, env = build(algo, env_id, settings)
    calls = [0]
    target, name = (agent, "update") if in_update else (env, "step")
    original = getattr(target, name)

    def interrupted(*args, **kwargs):
        calls[0] += 1
        if calls[0] == (7 if in_update else 50):
            for _ in range(3 if signal_name == "SIGHUP" else 1):
                signal.raise_signal(getattr(signal, signal_name))  # as Ctrl-C or kill would, halfway through the call
        return original(*args, **kwargs)

    setattr(target, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        Runner(agent, env, config, run_dir=tmp_path / "resumed").run()
    # the runner's handlers are gone; after a hang-up, SIGHUP's later copies are ignored
    after = [signal.getsignal(number) for number in handled]
    if signal_name == "SIGHUP":
        assert after[2] is signal.SIG_IGN
        signal.signal(signal.SIGHUP, handlers_before[2])
        after[2] = handlers_before[2]
    assert after == handlers_before
    (path,) = checkpoints(tmp_path / "resumed")
    cut_at = int(path.stem.removeprefix("step_"))
    assert 0 < cut_at < 640 and not (tmp_path / "resumed" / "summary.json").exists()
    agent, env = build(algo, env_id, settings, seed=123)
    summary = Runner(agent, env, config, run_dir=tmp_path / "resumed", resume=True).run()
    assert summary["env_steps"] == 640
    assert torch.equal(parameters(agent), straight)


def test_under_nohup_sighup_stays_ignored_and_the_handler_needs_no_stdout(monkeypatch):
    import signal
    import sys

    from rl_suite.runner import DeferredInterrupt

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a process
    try:
        interrupt = DeferredInterrupt()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and signal.SIGHUP not in interrupt.previous
        monkeypatch.setattr(sys, "stdout", None)  # started with its output closed
        signal.raise_signal(signal.SIGTERM)
        assert interrupt.requested and not interrupt.hung_up
        interrupt.restore()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_a_run_killed_while_saving_keeps_its_last_good_checkpoint(tmp_path, monkeypatch):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    Runner(agent, env, run_config(total_steps=320), run_dir=tmp_path).run()

    def dies_halfway(obj, f):
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    monkeypatch.setattr(torch, "save", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        Runner(agent, env, run_config(total_steps=640), run_dir=tmp_path, resume=True).run()
    monkeypatch.undo()
    assert [p.name for p in checkpoints(tmp_path)] == ["step_000000000320.pt"]
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    path, state = load_latest(tmp_path)
    assert path.name == "step_000000000320.pt" and state["runner"]["env_steps"] == 320


def test_an_unreadable_newest_checkpoint_is_skipped_with_a_warning(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    Runner(agent, env, run_config(total_steps=320), run_dir=tmp_path).run()
    (tmp_path / "checkpoints" / "step_000000000999.pt").write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match=r"skipping .*step_000000000999.pt is not a readable checkpoint"):
        path, _ = load_latest(tmp_path)
    assert path.name == "step_000000000320.pt"
    (tmp_path / "checkpoints" / "step_000000000320.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"none of the 2 checkpoints .* is readable"), pytest.warns(UserWarning):
        load_latest(tmp_path)


def test_a_checkpoint_of_another_algorithm_or_env_is_refused(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    Runner(agent, env, run_config(total_steps=320), run_dir=tmp_path).run()
    agent, env = build(PPO, "Acrobot-v1", TINY_PPO)
    with pytest.raises(CheckpointError, match=r"is a checkpoint of ppo on CartPole-v1, not of ppo on Acrobot-v1"):
        Runner(agent, env, run_config(env_id="Acrobot-v1"), run_dir=tmp_path, resume=True)


def test_ppo_skips_a_non_finite_update_and_keeps_its_parameters():
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    buffer = agent.make_buffer(env.num_envs)
    rl_suite.collector.Collector(env, agent, buffer).collect(agent.steps_per_iteration)
    buffer["rewards"][3, 1] = float("nan")
    before, optimizer_state = parameters(agent), agent.optimizer.state_dict()
    with pytest.warns(UserWarning, match="PPO: non-finite loss; this minibatch's update is skipped"):
        agent.update(buffer)
    assert torch.equal(parameters(agent), before) and agent.skipped_updates == 4
    assert agent.optimizer.state_dict()["state"] == optimizer_state["state"]


def test_sac_skips_a_non_finite_update_and_keeps_its_parameters():
    agent, env = build(SAC, "Pendulum-v1", {**TINY_SAC, "learning_starts": 0})
    buffer = agent.make_buffer(env.num_envs)
    rl_suite.collector.Collector(env, agent, buffer).collect(20)
    buffer.data["rewards"].fill_(float("nan"))
    before = parameters(agent)
    with pytest.warns(UserWarning, match="SAC: non-finite loss; this update is skipped"):
        agent.update(buffer)
    assert torch.equal(parameters(agent), before) and agent.skipped_updates >= 1


def test_learn_evaluates_on_an_env_made_with_the_training_envs_keywords(tmp_path):
    env = rl_suite.make("Pendulum-v1", num_envs=4, seed=0, max_episode_steps=30, g=9.0)
    agent = PPO.for_env(env, **TINY_PPO)
    summary = agent.learn(env, total_steps=64, run_dir=tmp_path / "run", eval_episodes=2, progress=False)
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["run"]["env_kwargs"] == {"max_episode_steps": 30, "g": 9.0}
    # Pendulum's cost per step is at most pi^2 + 0.1 * 8^2 + 0.001 * 2^2 = 16.27: a 30-step episode scores at least
    # -488, where the default 200-step episodes of this untrained policy score about -970.
    assert summary["final_eval"]["mean_return"] >= -30 * 16.3
    # Keywords that config.yaml cannot keep as plain data are refused before anything runs, with the way out.
    odd = rl_suite.make("Pendulum-v1", num_envs=4, seed=0, g=np.float64(9.0))
    with pytest.raises(ValueError, match=r"not plain data \(env_kwargs\['g'\] is a float64.*pass env_kwargs= to learn"):
        PPO.for_env(odd, **TINY_PPO).learn(odd, total_steps=64, run_dir=tmp_path / "odd", progress=False)
    assert not (tmp_path / "odd").exists()


def test_eval_every_steps_zero_evaluates_at_the_end_only(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    settings = dict(eval_episodes=2, eval_every_steps=0, progress=False)
    summary = agent.learn(env, total_steps=256, run_dir=tmp_path / "run", **settings)
    assert [row["env_steps"] for row in summary["evaluations"]] == [256]  # not also after the first iteration


def test_learn_predict_save_and_load(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    summary = agent.learn(env, total_steps=320, run_dir=tmp_path / "run", eval_episodes=3, progress=False)
    assert summary["env_steps"] == 320
    obs = np.zeros(4, dtype=np.float32)
    action = agent.predict(obs)
    assert isinstance(action, np.ndarray) and action.shape == () and action in (0, 1)
    batch = agent.predict(torch.zeros(5, 4))
    assert isinstance(batch, torch.Tensor) and batch.shape == (5,)
    agent.save(tmp_path / "agent.pt")
    loaded = PPO.load(tmp_path / "agent.pt")
    assert torch.equal(parameters(loaded), parameters(agent))
    assert torch.equal(loaded.normalizer.mean, agent.normalizer.mean)  # the normaliser travels with the policy
    probe = torch.randn(64, 4)
    assert torch.equal(loaded.predict(probe), agent.predict(probe))
    with pytest.raises(ValueError, match="the file holds a ppo agent, not sac"):
        SAC.load(tmp_path / "agent.pt")


def test_learn_resumes_a_run_bitwise_as_the_cli_does(tmp_path):
    def final_agent_state(run_dir):
        return load_latest(run_dir)[1]["agent"]["modules"]

    learn = dict(checkpoint_every_steps=320, eval_every_steps=320, eval_episodes=5, log_every_steps=160, progress=False)
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    agent.learn(env, total_steps=640, run_dir=tmp_path / "straight", **learn)
    straight = parameters(agent)
    for name in ("by_learn", "by_cli"):  # the halfway checkpoint only
        shutil.copytree(tmp_path / "straight", tmp_path / name)
        (tmp_path / name / "checkpoints" / "step_000000000640.pt").unlink()

    agent, env = build(PPO, "CartPole-v1", TINY_PPO, seed=123)
    summary = agent.learn(env, total_steps=640, resume=tmp_path / "by_learn", progress=False)
    assert summary["env_steps"] == 640
    assert torch.equal(parameters(agent), straight)
    assert main(["train", "ppo", "CartPole-v1", "--resume", str(tmp_path / "by_cli")]) == 0
    for resumed in ("by_learn", "by_cli"):
        expected, got = final_agent_state(tmp_path / "straight"), final_agent_state(tmp_path / resumed)
        for module, tensors in expected.items():
            assert all(torch.equal(value, got[module][key]) for key, value in tensors.items()), (resumed, module)


def test_learn_refuses_to_resume_what_the_cli_refuses(tmp_path):
    run_dir = tmp_path / "run"
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    agent.learn(env, total_steps=320, run_dir=run_dir, eval_episodes=0, progress=False)

    def refused(error, message, agent, env, **settings):
        with pytest.raises(error, match=f"^{re.escape(message)}$"):
            agent.learn(env, total_steps=640, **{"resume": run_dir, **settings})

    refused(
        ConfigError,
        f"{run_dir} is a run of ppo on CartPole-v1, not of ppo on Acrobot-v1",
        *build(PPO, "Acrobot-v1", TINY_PPO),
    )
    resumable = "['loggers', 'progress', 'stop_at_return', 'stop_at_win_rate', 'time_budget_s', 'total_steps']"
    only = f"a resumed run keeps its settings; only {resumable} may change"
    refused(ConfigError, only, agent, env, eval_episodes=3)
    keeps = "a resumed run keeps its settings, so build the agent and the env as the run's config.yaml says"
    wider = build(PPO, "CartPole-v1", {**TINY_PPO, "hidden": (32, 32)})
    refused(ConfigError, f"{run_dir} ran with hidden=[16, 16], not [32, 32]: {keeps}", *wider)
    fewer = build(PPO, "CartPole-v1", TINY_PPO, num_envs=2)
    refused(ConfigError, f"{run_dir} ran with num_envs=4, not 2: {keeps}", *fewer)
    elsewhere = "a resumed run continues in its own directory: pass resume=RUN_DIR without run_dir"
    refused(ValueError, elsewhere, agent, env, run_dir=tmp_path / "elsewhere")
    refused(ConfigError, f"{tmp_path} is not a run directory: it has no config.yaml", agent, env, resume=tmp_path)
    unnamed, env.env_id = env.env_id, None  # an env the registry cannot name
    refused(ValueError, "resume needs an env made by rl_suite.make: the run's env_id is checked against it", agent, env)
    env.env_id = unnamed

    # The run directory may come from a stranger: its env keywords are checked before anything is built from them.
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["run"]["env_kwargs"] = {"evil": 1}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(UntrustedEnvError, match="'evil' is not a keyword argument of CartPole-v1"):
        agent.learn(env, total_steps=640, resume=run_dir)


def test_sac_refuses_discrete_actions():
    env = rl_suite.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"sac needs a Box action space, got Discrete\(2\)"):
        SAC(env.observation_space, env.action_space)


def test_settings_have_one_owner():
    run, ppo, sac = field_types(RunConfig), field_types(PPO.Config), field_types(SAC.Config)
    assert not set(run) & set(ppo) and not set(run) & set(sac)


def test_checkpoints_load_with_weights_only(tmp_path):
    agent, env = build(SAC, "Pendulum-v1", TINY_SAC)
    Runner(agent, env, run_config(env_id="Pendulum-v1", algo="sac", total_steps=320), run_dir=tmp_path).run()
    path = checkpoints(tmp_path)[0]
    state = torch.load(path, weights_only=True)
    assert state["algo"] == "sac" and state["buffer"]["size"] > 0 and "torch" in state["rng"]
    assert pathlib.Path(path).stat().st_size > 0


def test_learning_curve_is_in_the_summary(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    summary = Runner(agent, env, run_config(), run_dir=tmp_path).run()
    curve = summary["evaluations"]
    assert [point["env_steps"] for point in curve] == [320, 640]
    assert curve[-1]["mean_return"] == summary["final_eval"]["mean_return"]
    assert 0 < curve[0]["wall_time_s"] <= curve[1]["wall_time_s"] <= summary["wall_time_s"]


def test_evaluation_videos_go_to_the_run_directory_and_tensorboard(tmp_path):
    pytest.importorskip("mujoco")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    agent, env = build(PPO, "InvertedPendulum-v5", TINY_PPO, num_envs=2)
    config = run_config(
        env_id="InvertedPendulum-v5",
        num_envs=2,
        total_steps=64,
        eval_every_steps=64,
        eval_episodes=2,
        video_every_steps=32,
    )
    Runner(agent, env, config, run_dir=tmp_path).run()
    if not (tmp_path / "videos").exists():
        pytest.skip("no OpenGL context on this machine: the run went on without videos")
    videos = sorted(p.name for p in (tmp_path / "videos").glob("*.gif"))
    assert videos == ["eval-000000000032.gif", "eval-000000000064.gif"]
    import imageio.v3 as iio

    frames = iio.imread(tmp_path / "videos" / videos[-1], index=None)
    assert frames.ndim == 4 and frames.shape[0] >= 2 and frames.shape[1:3] == (240, 240)
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0})
    events.Reload()
    assert "eval/video" in events.Tags()["images"]
    assert [image.step for image in events.Images("eval/video")] == [32, 64]


def test_a_task_that_cannot_render_costs_a_message_not_the_run(tmp_path, capsys):
    agent, env = build(PPO, "MultiGoal-v0", TINY_PPO)  # no gymnasium counterpart, so no renderer
    config = run_config(env_id="MultiGoal-v0", video_every_steps=320)
    summary = Runner(agent, env, config, run_dir=tmp_path).run()
    assert summary["env_steps"] == 640 and not (tmp_path / "videos").exists()
    assert "no evaluation videos: NotImplementedError: MultiGoal-v0 does not render" in capsys.readouterr().out


def test_classic_tasks_record_evaluation_videos(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    Runner(agent, env, run_config(video_every_steps=320), run_dir=tmp_path).run()
    videos = sorted(p.name for p in (tmp_path / "videos").glob("*.gif"))
    assert videos == ["eval-000000000320.gif", "eval-000000000640.gif"]


# -- starting a run from another run's agent (init_from) ---------------------------------------------------------


def test_a_run_starts_from_another_runs_agent_with_fresh_optimisers_and_counters(tmp_path):
    agent, env = build(PPO, "CartPole-v1", TINY_PPO)
    Runner(agent, env, run_config(), run_dir=tmp_path / "first").run()
    trained = parameters(agent)
    fresh, env = build(PPO, "CartPole-v1", TINY_PPO, seed=5)
    assert not torch.equal(parameters(fresh), trained)
    runner = Runner(fresh, env, run_config(init_from=str(tmp_path / "first")), run_dir=tmp_path / "second")
    assert torch.equal(parameters(fresh), trained) and runner.env_steps == 0  # the newest checkpoint's weights
    torch.testing.assert_close(fresh.normalizer.mean, agent.normalizer.mean)  # and observation statistics
    assert not fresh.optimizer.state_dict()["state"]  # Adam starts afresh
    assert "started from" in runner.warm_start_note
    assert yaml.safe_load((tmp_path / "second" / "config.yaml").read_text())["run"]["init_from"].endswith("first")


def test_observation_terms_added_at_the_end_start_with_zero_weights(tmp_path):
    import gymnasium as gym

    seed_everything(0)
    narrow, wide = (gym.spaces.Box(-np.inf, np.inf, (size,), np.float32) for size in (3, 5))
    action = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    old = PPO(narrow, action, hidden=(16, 16))
    old.normalizer.update(torch.randn(100, 3) * 2 + 1)
    path = tmp_path / "old.pt"
    torch.save({"algo": "ppo", "agent": old.state_dict()}, path)
    new = PPO(wide, action, hidden=(16, 16))
    _, grown = rl_suite.checkpoint.warm_start(new, path)
    assert "actor.net.0.weight (16, 3) -> (16, 5)" in grown and "normalizer.mean (3,) -> (5,)" in grown
    obs = torch.randn(8, 3)
    extended = torch.cat([obs, torch.randn(8, 2) * 10], dim=1)  # whatever the new terms hold
    torch.testing.assert_close(new.act(extended, deterministic=True)[0], old.act(obs, deterministic=True)[0])
    torch.testing.assert_close(new.critic(new.normalizer(extended)), old.critic(old.normalizer(obs)))


@pytest.mark.parametrize("algo", ["sac", "flashsac"])
def test_off_policy_actors_start_from_a_narrower_checkpoint_and_their_critics_refuse_to(tmp_path, algo):
    """The actors' new inputs start with zero weights, in SAC's layout and in FlashSAC's ([members, out, in]); the
    critics, on cat(s, a), would get the new observation terms where the action was: refused, naming the tensor."""
    import gymnasium as gym

    from rl_suite.registry import load_algorithm

    agent_class = load_algorithm(algo)
    settings = {"sac": dict(hidden=(16, 16)), "flashsac": dict(actor_width=8, critic_width=8, expansion=1)}[algo]
    seed_everything(0)
    narrow, wide = (gym.spaces.Box(-np.inf, np.inf, (size,), np.float32) for size in (3, 5))
    action = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    old = agent_class(narrow, action, **settings)
    path = tmp_path / "old.pt"
    torch.save({"algo": algo, "agent": old.state_dict()}, path)
    new = agent_class(wide, action, **settings)
    with pytest.raises(CheckpointError, match=r"old.pt: critic\.net\..* this network's inputs end with the action"):
        rl_suite.checkpoint.warm_start(new, path)
    new.modules = {name: module for name, module in new.modules.items() if "critic" not in name}
    _, grown = rl_suite.checkpoint.warm_start(new, path)
    assert grown and all(line.startswith("actor.") for line in grown), grown
    for agent in (old, new):
        for module in agent.modules.values():
            module.eval()
    obs = torch.randn(8, 3)
    extended = torch.cat([obs, torch.randn(8, 2) * 10], dim=1)  # whatever the new terms hold
    torch.testing.assert_close(new.act(extended, deterministic=True)[0], old.act(obs, deterministic=True)[0])


def test_init_from_refuses_another_algorithm_and_shapes_that_do_not_extend(tmp_path):
    import gymnasium as gym

    box = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    path = tmp_path / "old.pt"
    torch.save({"algo": "ppo", "agent": PPO(box, action, hidden=(16, 16)).state_dict()}, path)
    with pytest.raises(CheckpointError, match=r"old.pt is a checkpoint of ppo; init_from needs one of bpo"):
        rl_suite.checkpoint.warm_start(BPO(box, action, hidden=(16, 16)), path)
    smaller = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(CheckpointError, match=r"normalizer.mean has shape \(3,\) and this agent's \(2,\): only a"):
        rl_suite.checkpoint.warm_start(PPO(smaller, action, hidden=(16, 16)), path)
    narrower = PPO(box, action, hidden=(16, 8))  # its first layer fits, its second shrank
    before = parameters(narrower)
    with pytest.raises(CheckpointError, match=r"actor.net.2.weight has shape \(16, 16\) and this agent's \(8, 16\)"):
        rl_suite.checkpoint.warm_start(narrower, path)
    assert torch.equal(parameters(narrower), before)  # refused before anything was copied
    with pytest.raises(CheckpointError, match=r"no checkpoint at"):
        rl_suite.checkpoint.warm_start(PPO(box, action), tmp_path / "missing.pt")


def test_a_logged_training_metric_is_its_mean_over_the_log_window():
    from rl_suite.runner import add_metrics, window_means

    sums, reused = {}, torch.zeros(())
    for loss in (1.0, 2.0, 6.0):
        reused.fill_(loss)  # an agent that returns the same tensor, overwritten, every iteration
        add_metrics(sums, {"loss": reused, "lr": 0.1})
    means = window_means(sums)
    assert float(means["loss"]) == 3.0 and means["lr"] == pytest.approx(0.1)
    add_metrics(sums, {})  # an iteration that did not learn (an off-policy warm-up) adds nothing
    assert float(window_means(sums)["loss"]) == 3.0
