"""Single-observation inference latency of an exported policy: onnxruntime and TorchScript against the plain torch
module, for a PPO Gaussian policy with a 256x256 MLP, with and without observation normalisation.

Each figure times ``--calls`` single calls (batch of one) after ``--warmup`` calls, one thread, and reports the
median (p50) and the 99th percentile (p99) in microseconds. ``raw`` rows call the backend directly on preallocated
inputs; ``runtime`` rows go through ``rl_suite.deploy.ExportedPolicy`` (numpy in, numpy out, shape checks), the
path a control loop takes. The goal for a 1 kHz-capable controller: p50 <= 50 us, p99 <= 200 us.

    OMP_NUM_THREADS=1 python benchmarks/deploy_latency.py
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import pathlib
import platform
import sys
import tempfile
import time
import warnings

import gymnasium as gym
import numpy as np
import torch

RESULTS = pathlib.Path(__file__).parent / "results"
OBS_DIM, ACT_DIM = 48, 12  # a quadruped-sized task
GOAL_P50_US, GOAL_P99_US = 50.0, 200.0


def time_calls(call, calls: int, warmup: int) -> np.ndarray:
    for _ in range(warmup):
        call()
    clock = time.perf_counter_ns
    samples = np.empty(calls, dtype=np.int64)
    for k in range(calls):
        began = clock()
        call()
        samples[k] = clock() - began
    return samples / 1e3  # microseconds


def processor() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "deploy_latency")
    args = parser.parse_args()

    import onnxruntime as ort

    from rl_suite.deploy import load_policy
    from rl_suite.deploy.export import deterministic_policy, export_policy
    from rl_suite.registry import load_algorithm

    torch.set_num_threads(1)
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
    load_before = os.getloadavg()
    rows = []
    folder = pathlib.Path(tempfile.mkdtemp(prefix="deploy_latency_"))
    obs = np.random.default_rng(0).normal(size=(1, OBS_DIM)).astype(np.float32)
    for normalized in (True, False):
        agent = load_algorithm("ppo")(obs_space, act_space, hidden=(256, 256), normalize_obs=normalized)
        if normalized:
            agent.normalizer.update(torch.randn(1000, OBS_DIM) * 2 + 1)
        label = "with normalisation" if normalized else "without normalisation"

        module = deterministic_policy(agent)
        tensor = torch.from_numpy(obs)

        def torch_eager(module=module, tensor=tensor):
            with torch.inference_mode():
                return module(tensor)

        onnx_path = export_policy(agent, folder / f"p{int(normalized)}.onnx", "onnx").path
        ts_path = export_policy(agent, folder / f"p{int(normalized)}.pt", "torchscript").path

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        feeds, outputs = {"obs": obs}, ["action"]

        def onnx_raw(session=session, feeds=feeds, outputs=outputs):
            return session.run(outputs, feeds)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            scripted = torch.jit.load(str(ts_path))
        scripted = torch.jit.optimize_for_inference(torch.jit.freeze(scripted.eval()))

        def ts_raw(scripted=scripted, tensor=tensor):
            with torch.inference_mode():
                return scripted(tensor)

        onnx_runtime, ts_runtime = load_policy(onnx_path), load_policy(ts_path)
        single = obs[0]
        candidates = [
            ("torch eager module", "raw", torch_eager),
            ("TorchScript (frozen)", "raw", ts_raw),
            ("onnxruntime", "raw", onnx_raw),
            ("TorchScript", "runtime", lambda p=ts_runtime, x=single: p(x)),
            ("onnxruntime", "runtime", lambda p=onnx_runtime, x=single: p(x)),
        ]
        for backend, path, call in candidates:
            us = time_calls(call, args.calls, args.warmup)
            p50, p99 = np.percentile(us, 50), np.percentile(us, 99)
            rows.append(
                {
                    "policy": f"ppo 256x256 {label}",
                    "backend": backend,
                    "path": path,
                    "p50_us": round(float(p50), 1),
                    "p99_us": round(float(p99), 1),
                    "mean_us": round(float(us.mean()), 1),
                    "max_us": round(float(us.max()), 1),
                    "meets_goal": bool(p50 <= GOAL_P50_US and p99 <= GOAL_P99_US),
                }
            )
            print(f"{label:<22} {backend:<21} {path:<8} p50 {p50:7.1f} us  p99 {p99:7.1f} us", flush=True)
        agent.close()
    load_after = os.getloadavg()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    machine = (
        f"{platform.platform()}, {processor()}, {os.cpu_count()} logical cores; Python {platform.python_version()}, "
        f"torch {torch.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}; "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, torch threads {torch.get_num_threads()}"
    )
    lines = [
        "# Deployment inference latency",
        "",
        f"PPO Gaussian policy, MLP {OBS_DIM} -> 256 -> 256 -> {ACT_DIM} (tanh), deterministic (mean, scaled and "
        f"clipped inside the graph); one observation per call, {args.calls:,} calls after {args.warmup:,} warm-up "
        "calls, one thread. `raw`: the backend called directly on a preallocated input; `runtime`: through "
        "`rl_suite.deploy.ExportedPolicy` (numpy in and out, shape checks), the path the control loop takes. "
        f"Goal: p50 <= {GOAL_P50_US:g} us and p99 <= {GOAL_P99_US:g} us.",
        "",
        f"Machine: {machine}.",
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC with `{' '.join(sys.argv)}`; "
        f"load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} (the 2 cores are shared with other "
        "work, which inflates the tails: p99 and max are upper bounds of what an idle core gives).",
        "",
        "| policy | backend | path | p50 (us) | p99 (us) | mean (us) | max (us) | goal met |",
        "|---|---|---|---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['policy']} | {r['backend']} | {r['path']} | {r['p50_us']} | {r['p99_us']} | {r['mean_us']} | "
            f"{r['max_us']} | {'yes' if r['meets_goal'] else 'no'} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
