"""Settings that check themselves: every numeric or named setting of every agent's config and of RunConfig declares
its valid values (``rl_suite.config.setting``), and a value outside them is refused, before anything is built, with an
error that names the field, the value and the range."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest

from rl_suite.cli import main
from rl_suite.config import ConfigError, check_settings, describe_limits, field_limits
from rl_suite.registry import ALGORITHMS, load_algorithm
from rl_suite.runner import RunConfig

OPEN = {  # settings whose every value of the type is valid, and why
    "algo": "a registered name, checked by the registry",
    "env_id": "a registered id or an adapter's, checked by the registry",
    "device": "a torch device, checked by torch",
    "init_from": "a path, checked when read",
    "loggers": "a comma-separated list, checked by rl_suite/logger.py",
    "stop_at_return": "any return",
    "target_entropy": "any entropy (SAC: None for -dim(A))",
    "v_min": "any value (FlashSAC's and PQL's support; their agents check v_min < v_max)",
    "v_max": "any value (FlashSAC's and PQL's support)",
    "init_log_std": "any log standard deviation (the Gaussian policies do not clamp it; FixPO's flow checks [-5, 2])",
    "adversary_init_log_std": "RARL's adversary's init_log_std",
}


def configs() -> dict[str, type]:
    found = {name: load_algorithm(name).Config for name in ALGORITHMS}
    found["run"] = RunConfig
    return found


def checked_fields(config_class: type) -> list[dataclasses.Field]:
    """The fields whose type leaves room for a wrong value: numbers, names, and tuples of numbers."""
    hints = typing.get_type_hints(config_class)
    fields = []
    for field in dataclasses.fields(config_class):
        kinds = {arg for arg in typing.get_args(hints[field.name]) if arg is not type(None)} or {hints[field.name]}
        if kinds & {int, float, str} or any(typing.get_origin(kind) is tuple for kind in kinds):
            fields.append(field)
    return fields


def outside(limits: dict) -> object:
    """A value that ``limits`` refuses."""
    if "choices" in limits:
        return "not-a-choice"
    if "at_least" in limits:
        return limits["at_least"] - 1
    if "above" in limits:
        return limits["above"]
    if "at_most" in limits:
        return limits["at_most"] + 1
    return limits["below"]


CASES = [(name, field.name) for name, cls in configs().items() for field in checked_fields(cls)]


@pytest.mark.parametrize(("config", "field"), CASES, ids=[f"{c}.{f}" for c, f in CASES])
def test_every_setting_declares_its_valid_values_and_a_value_outside_them_is_refused(config, field):
    config_class = configs()[config]
    limits = field_limits(config_class, field)
    if not limits:
        assert field in OPEN, f"{config_class.__name__}.{field} declares no valid values: use rl_suite.config.setting"
        return
    default = getattr(config_class(), field)
    bad = outside(limits)
    if isinstance(default, tuple):
        bad = (*default[:-1], bad) if default else (bad,)
    with pytest.raises(ConfigError) as refused:
        check_settings(dataclasses.replace(config_class(), **{field: bad}), config)
    assert str(refused.value) == f"{config}: {field}={bad!r} is out of range ({describe_limits(limits)})"


@pytest.mark.parametrize("config", list(configs()))
def test_every_default_is_within_its_own_range(config):
    check_settings(configs()[config](), config)


def test_nan_and_a_bad_tuple_entry_are_refused_and_a_subclass_keeps_its_bases_limits():
    ppo = load_algorithm("ppo")
    with pytest.raises(ConfigError, match=r"ppo: lr=nan is out of range \(>= 0\)"):
        check_settings(ppo.Config(lr=math.nan), "ppo")
    with pytest.raises(ConfigError, match=r"hidden=\(64, 0\) is out of range \(>= 1\)"):
        check_settings(ppo.Config(hidden=(64, 0)), "ppo")
    assert field_limits(ppo.Config, "n_steps") == {"at_least": 1}  # declared on OnPolicyConfig


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["gamma=1.5", "epochs=0"], "rl-suite: error: ppo: epochs=0 is out of range (>= 1); gamma=1.5 is out of range"),
        (["clip_range=-0.2"], "rl-suite: error: ppo: clip_range=-0.2 is out of range (> 0)"),
        (["eval_episodes=-3"], "rl-suite: error: run: eval_episodes=-3 is out of range (>= 0)"),
        (["minibatches=1000000"], "rl-suite: error: ppo: minibatches=1000000 must divide the rollout's n_steps * "
                                  "num_envs = 32 * 8 = 256 samples"),
    ],
)  # fmt: skip
def test_the_command_line_refuses_a_setting_out_of_range_before_it_trains(settings, message, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--run-dir", str(run_dir), "--set", *settings]) == 2
    assert capsys.readouterr().err.strip().startswith(message)
    assert not (run_dir / "checkpoints").exists()
