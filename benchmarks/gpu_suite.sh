#!/usr/bin/env bash
# The GPU benchmark suite, in one go on a lent NVIDIA machine (no network): about 10 minutes in all.
#
#   bash benchmarks/gpu_suite.sh                 # on the GPU machine, from the repository root
#   CPU_SMOKE=1 bash benchmarks/gpu_suite.sh     # every step with tiny sizes on the CPU: checks the plumbing
#
# Steps (each under its own time limit; a failed or timed-out step is recorded and the suite goes on):
#   1. environment: nvidia-smi, torch / CUDA, mujoco, mujoco_warp, warp versions, the GPU's name;
#   2. CartPole-v1 env-steps/s, N up to 2^20;
#   3. Ant-v5 env-steps/s on MuJoCo Warp (backend "warp"), N up to 2^14; 3b. the same for the Control Suite's six
#      representative tasks (benchmarks/dmc_throughput.py's), N = 1024 and 4096;
#   4. the hot loop (benchmarks/hot_loop.py): eager, compile, cuda_graph, compile+cuda_graph, N up to 2^20;
#   5. PPO on Ant-v5 (warp, cuda): wall-clock to an evaluation return of 6000, within a time budget;
#   6. step 5 again under `torchrun --nproc_per_node 1`: the distributed overhead;
#   7. PQL on Ant-v5 under the same budget, against step 5;
#   8. PPO on QuadrupedVelocity-Flat-v0 (warp, cuda, 4096 envs, rsl_rl's settings): the planar tracking error after
#      LEGGED_S seconds (goal: under 0.2 m/s within 5 minutes); it takes what the suite has left, up to LEGGED_S, so
#      give the whole suite TOTAL_S=900 to run it in full;
#   9. the same on QuadrupedVelocity-Rough-v0 for what is left, up to ROUGH_S: the terrain level the curriculum
#      reached and the tracking error;
#  10. the same on HumanoidVelocity-Flat-v0 for what is left, up to HUMANOID_S: the tracking error and falls;
#  11-12. FlashSAC (its shipped `gpu` profile, its authors' GPU settings: 1,024 envs, batches of 2,048, 2 updates per
#      batched step, 3-step returns, a 10M-transition buffer on the device) on QuadrupedVelocity-Flat-v0 and HumanoidVelocity-Flat-v0, up
#      to FLASH_S each, against steps 8 and 10.
# Everything goes to $RESULTS (default: $OUT if set, else benchmarks/results/gpu/): a log per step, the result files
# of each step, and summary.md (status and time of every step, then the results side by side).
#
# Settings (environment variables): TOTAL_S (600, the whole suite's budget; steps are cut to what is left), LEGGED_S
# (300, step 8's training budget), ROUGH_S (120, step 9's), HUMANOID_S (120, step 10's),
# FLASH_S (120, steps 11-12's each), TRAIN_S (80, wall-clock budget of each training run), NUM_ENVS_PPO (4096), NUM_ENVS_PQL (4096), PPO_SET and PQL_SET
# (extra `--set` assignments), PY (the Python to use; default .venv/bin/python).
set -euo pipefail

cd "$(dirname "$0")/.."
SMOKE=${CPU_SMOKE:-0}
RESULTS=${RESULTS:-${OUT:-benchmarks/results/gpu}}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
PY=${PY:-.venv/bin/python}
[[ -x $PY ]] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
TOTAL_S=${TOTAL_S:-600}
SUITE_START=$SECONDS
SUMMARY=$RESULTS/steps.tsv
printf 'step\tstatus\tseconds\tlimit_s\n' >"$SUMMARY"

if [[ $SMOKE == 1 ]]; then
    DEVICE=cpu
    TRAIN_S=${TRAIN_S:-20}
    CARTPOLE_N="1 64 1024"
    ANT_N="4"
    ANT_BACKEND=${ANT_BACKEND:-cpu} # warp on the CPU compiles its kernels first: minutes on a small machine
    HOT_LOOP_ARGS=(--max-envs 64 --factor 8 --seconds 0.3 --tasks CartPole-v1)
    NUM_ENVS_PPO=${NUM_ENVS_PPO:-4}
    NUM_ENVS_PQL=${NUM_ENVS_PQL:-4}
    PPO_SET=${PPO_SET:-"n_steps=8 epochs=1 minibatches=1 eval_every_steps=64 eval_episodes=2 hidden=[32,32]"}
    PQL_SET=${PQL_SET:-"learning_starts=64 batch_size=64 eval_every_steps=64 eval_episodes=2 hidden=[32,32] concurrent=false"}
    LIMIT_ENV=60 LIMIT_CARTPOLE=60 LIMIT_ANT=120 LIMIT_HOT=240 LIMIT_TRAIN=$((TRAIN_S + 60)) LIMIT_DMC=240
    DMC_N="4"
    DMC_BACKEND=cpu # as ANT_BACKEND: warp on the CPU compiles for minutes
    LEGGED_S=${LEGGED_S:-20}
    ROUGH_S=${ROUGH_S:-20}
    HUMANOID_S=${HUMANOID_S:-20}
    NUM_ENVS_LEGGED=${NUM_ENVS_LEGGED:-8}
    LEGGED_BACKEND=cpu
    LEGGED_SET=${LEGGED_SET:-"n_steps=8 epochs=1 minibatches=1 eval_every_steps=64 eval_episodes=2 hidden=[32,32]"}
    FLASH_S=${FLASH_S:-20}
    NUM_ENVS_FLASH=${NUM_ENVS_FLASH:-8}
    FLASH_SET=${FLASH_SET:-"actor_width=16 critic_width=16 atoms=11 batch_size=32 learning_starts=64 eval_every_steps=64 eval_episodes=2"}
    FLASH_PROFILE=${FLASH_PROFILE:-} # the gpu profile's 10M-transition buffer would not fit a smoke run
else
    DEVICE=cuda
    TRAIN_S=${TRAIN_S:-80}
    CARTPOLE_N="1 1024 16384 262144 1048576"
    ANT_N="1024 4096 16384"
    ANT_BACKEND=warp
    HOT_LOOP_ARGS=(--max-envs 1048576 --factor 16 --seconds 0.6 --tasks CartPole-v1 Pendulum-v1)
    NUM_ENVS_PPO=${NUM_ENVS_PPO:-4096}
    NUM_ENVS_PQL=${NUM_ENVS_PQL:-4096}
    # Thousands of GPU envs want short rollouts and fewer, larger minibatches (rsl_rl's setup), not the CPU settings
    # that agents/hyperparams/ppo.yaml ships for 16 envs.
    PPO_SET=${PPO_SET:-"n_steps=32 epochs=5 minibatches=4 lr=3e-4 adaptive_kl=0.01 eval_every_steps=1000000 eval_episodes=32"}
    # PQL's paper settings (PQLConfig's defaults) are sized for a GPU; the YAML's Ant entry is the CPU one.
    PQL_SET=${PQL_SET:-"batch_size=8192 hidden=[512,256,128] activation=elu eval_every_steps=500000 eval_episodes=32"}
    LIMIT_ENV=60 LIMIT_CARTPOLE=60 LIMIT_ANT=100 LIMIT_HOT=120 LIMIT_TRAIN=$((TRAIN_S + 45)) LIMIT_DMC=150
    DMC_N="1024 4096"
    DMC_BACKEND=warp
    LEGGED_S=${LEGGED_S:-300}
    ROUGH_S=${ROUGH_S:-120}
    HUMANOID_S=${HUMANOID_S:-120}
    NUM_ENVS_LEGGED=${NUM_ENVS_LEGGED:-4096}
    LEGGED_BACKEND=warp
    # rsl_rl's legged_gym networks and minibatches for 4,096 GPU envs (the YAML's are sized for a 2-core CPU)
    LEGGED_SET=${LEGGED_SET:-"hidden=[512,256,128] eval_every_steps=2000000 eval_episodes=64"}
    FLASH_S=${FLASH_S:-120}
    NUM_ENVS_FLASH=${NUM_ENVS_FLASH:-1024}
    # FlashSAC's GPU-simulator settings from its authors: the shipped `gpu` profile (agents/hyperparams/flashsac.yaml),
    # 2 updates per batched step of 1,024 envs (updates_per_env_step, whatever NUM_ENVS_FLASH is).
    FLASH_PROFILE=${FLASH_PROFILE:-gpu}
    FLASH_SET=${FLASH_SET:-"eval_every_steps=2000000 eval_episodes=64"}
fi

# run_step NAME LIMIT_S COMMAND...: run COMMAND under a time limit (cut to what is left of TOTAL_S), its output in
# NAME.log; record its status and time, and never stop the suite.
run_step() {
    local name=$1 limit=$2
    shift 2
    local left=$((TOTAL_S - (SECONDS - SUITE_START)))
    if ((left < 15)); then
        echo "== $name: skipped, the suite's ${TOTAL_S} s are spent"
        printf '%s\tskipped (no time left)\t0\t%s\n' "$name" "$limit" >>"$SUMMARY"
        return 0
    fi
    ((limit > left)) && limit=$left
    echo "== $name (limit ${limit} s): $*"
    local start=$SECONDS status rc=0
    # Through bash -c, so that COMMAND may be one of the functions below (exported with export -f).
    timeout --kill-after=10 "$limit" bash -c '"$@"' _ "$@" >"$RESULTS/$name.log" 2>&1 || rc=$?
    case $rc in
        0) status=ok ;;
        124 | 137) status="timed out" ;;
        *) status="failed (exit $rc)" ;;
    esac
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" "$limit" >>"$SUMMARY"
    echo "   $status after $((SECONDS - start)) s; last lines:"
    tail -n 5 "$RESULTS/$name.log" | sed 's/^/   | /'
    return 0
}

# 1. The environment. Without a CUDA torch there is nothing to measure: fail clearly (the carried .venv may be a
# CPU build of torch).
environment() {
    if [[ $SMOKE != 1 ]]; then
        nvidia-smi || echo "nvidia-smi failed"
    fi
    "$PY" - "$DEVICE" <<'EOF'
import importlib, platform, sys
import torch
print(f"Python {platform.python_version()}, torch {torch.__version__} (CUDA build: {torch.version.cuda})")
for name in ("mujoco", "mujoco_warp", "warp", "gymnasium", "numpy"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', getattr(module, 'config', None) and module.config.version)}")
    except Exception as error:  # noqa: BLE001
        print(f"{name}: not importable ({type(error).__name__}: {error})")
if sys.argv[1] == "cuda":
    if not torch.cuda.is_available():
        sys.exit(f"torch {torch.__version__} does not see a CUDA device (CUDA build: {torch.version.cuda}); this "
                 "suite needs a CUDA build of torch and a GPU. Nothing is installed from the network.")
    print(f"GPU {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB, "
          f"{torch.cuda.device_count()} device(s)")
EOF
}

export PY DEVICE SMOKE RESULTS ANT_BACKEND TRAIN_S
export -f environment
run_step environment "$LIMIT_ENV" environment
if [[ $SMOKE != 1 ]] && ! grep -q "^environment	ok" "$SUMMARY"; then
    cat "$RESULTS/environment.log"
    echo "no usable CUDA device: stopping (see $RESULTS/environment.log)" >&2
    exit 1
fi

# 2-3. Env-steps/s under random actions, from rl_suite.throughput (what `rl-suite throughput` measures), written as
# CSV. The backend is given explicitly: Ant runs on MuJoCo Warp on the GPU.
throughput() {
    local env_id=$1 backend=$2 csv=$3
    shift 3
    "$PY" - "$env_id" "$DEVICE" "$backend" "$csv" "$@" <<'EOF'
import csv, sys, time
import torch
import rl_suite
from rl_suite.throughput import env_steps_per_second
env_id, device, backend, path, *sizes = sys.argv[1:]
kwargs = {"backend": backend} if backend != "-" else {}
with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["env", "device", "backend", "num_envs", "env_steps_per_s", "make_s"])
    for n in map(int, sizes):
        start = time.perf_counter()
        env = rl_suite.make(env_id, num_envs=n, device=device, seed=0, **kwargs)
        made = time.perf_counter() - start
        rate = env_steps_per_second(env, seconds=1.0)
        env.close()
        writer.writerow([env_id, device, backend, n, f"{rate:.0f}", f"{made:.1f}"])
        f.flush()  # a timed-out step keeps its rows
        print(f"{env_id} {device} {backend} N={n}: {rate:,.0f} env-steps/s (made in {made:.1f} s)", flush=True)
        del env
        if device == "cuda":
            torch.cuda.empty_cache()
EOF
}
export -f throughput
# shellcheck disable=SC2086 # the sizes are words
run_step cartpole_throughput "$LIMIT_CARTPOLE" throughput CartPole-v1 - "$RESULTS/cartpole_throughput.csv" $CARTPOLE_N
# shellcheck disable=SC2086
run_step ant_throughput "$LIMIT_ANT" throughput Ant-v5 "$ANT_BACKEND" "$RESULTS/ant_throughput.csv" $ANT_N

# 3b. The Control Suite on MuJoCo Warp, one CSV per task.
dmc_throughput() {
    for task in cartpole-swingup cheetah-run walker-walk humanoid-run quadruped-run dog-run; do
        # shellcheck disable=SC2086 # the sizes are words
        throughput "dm_control/$task-v0" "$DMC_BACKEND" "$RESULTS/dmc_throughput_$task.csv" $DMC_N || return 1
    done
}
export -f dmc_throughput
export DMC_BACKEND DMC_N
run_step dmc_throughput "$LIMIT_DMC" dmc_throughput

# 4. The hot loop, eager against compiled and graph-captured (it writes hot_loop.{csv,md,png} as it goes).
run_step hot_loop "$LIMIT_HOT" "$PY" benchmarks/hot_loop.py --device "$DEVICE" --out "$RESULTS" \
    --budget-s $((LIMIT_HOT - 30)) "${HOT_LOOP_ARGS[@]}"

# 5-7. Training on Ant-v5 to an evaluation return of 6000, each run under the same wall-clock budget.
rm -rf "$RESULTS/ppo_ant" "$RESULTS/pql_ant" "$RESULTS/ppo_ant_torchrun"
train() { # ALGO NUM_ENVS SET RUN_DIR [LAUNCHER...]
    local algo=$1 n=$2 set=$3 dir=$4
    shift 4
    # shellcheck disable=SC2086 # SET is a list of KEY=VALUE words
    "$@" -m rl_suite train "$algo" Ant-v5 --device "$DEVICE" --num-envs "$n" --seed 0 --time-budget "$TRAIN_S" \
        --stop-at-return 6000 --total-steps 1000000000 --run-dir "$dir" \
        --set progress=false checkpoint_every_steps=1000000000 "env_kwargs={backend: $ANT_BACKEND}" $set
}
export -f train
# The three runs get the same budget: cut it to fit what is left of TOTAL_S (with 45 s each for start-up and the
# final evaluation), so that the comparisons stay fair.
LEFT=$((TOTAL_S - (SECONDS - SUITE_START)))
FIT=$(((LEFT - 3 * 45) / 3))
if ((FIT < TRAIN_S)); then
    TRAIN_S=$((FIT > 20 ? FIT : 20))
    LIMIT_TRAIN=$((TRAIN_S + 45))
    echo "== training budget cut to ${TRAIN_S} s per run to fit the suite's ${TOTAL_S} s"
fi
run_step ppo_ant "$LIMIT_TRAIN" train ppo "$NUM_ENVS_PPO" "$PPO_SET" "$RESULTS/ppo_ant" "$PY"
# torchrun is the launcher the brief names (`torchrun --nproc_per_node 1 -m rl_suite ...`), through the Python that
# runs the suite: the venv's torchrun script has an absolute path to the interpreter, which moves with the copy.
run_step ppo_ant_torchrun "$LIMIT_TRAIN" train ppo "$NUM_ENVS_PPO" "$PPO_SET" "$RESULTS/ppo_ant_torchrun" \
    "$PY" -m torch.distributed.run --standalone --nproc_per_node 1
run_step pql_ant "$LIMIT_TRAIN" train pql "$NUM_ENVS_PQL" "$PQL_SET" "$RESULTS/pql_ant" "$PY"

# 8-12. PPO on the quadruped on flat ground, then on rough terrain, then on the humanoid, then FlashSAC on the
# quadruped and the humanoid, each with what is left (up to LEGGED_S, ROUGH_S, HUMANOID_S, FLASH_S): the shipped
# settings with the GPU sets above, on MuJoCo Warp, the task metrics from summary.json.
legged() {  # ALGO ENV_ID RUN_NAME BUDGET_S
    local algo=$1 n=$NUM_ENVS_LEGGED set=$LEGGED_SET profile=()
    if [[ $algo == flashsac ]]; then
        n=$NUM_ENVS_FLASH set=$FLASH_SET
        if [[ -n $FLASH_PROFILE ]]; then profile=(--profile "$FLASH_PROFILE"); fi
    fi
    # shellcheck disable=SC2086 # SET is a list of KEY=VALUE words
    "$PY" -m rl_suite train "$algo" "$2" --device "$DEVICE" --num-envs "$n" --seed 0 "${profile[@]}" \
        --time-budget "$4" --total-steps 1000000000000 --run-dir "$RESULTS/$3" \
        --set progress=false checkpoint_every_steps=1000000000000 "env_kwargs={backend: $LEGGED_BACKEND}" $set
}
export -f legged
export NUM_ENVS_LEGGED LEGGED_BACKEND LEGGED_SET NUM_ENVS_FLASH FLASH_SET FLASH_PROFILE
for task in "ppo QuadrupedVelocity-Flat-v0 ppo_quadruped $LEGGED_S" \
    "ppo QuadrupedVelocity-Rough-v0 ppo_quadruped_rough $ROUGH_S" "ppo HumanoidVelocity-Flat-v0 ppo_humanoid $HUMANOID_S" \
    "flashsac QuadrupedVelocity-Flat-v0 flashsac_quadruped $FLASH_S" \
    "flashsac HumanoidVelocity-Flat-v0 flashsac_humanoid $FLASH_S"; do
    read -r algo env_id name wanted <<<"$task"
    rm -rf "${RESULTS:?}/$name"
    LEFT=$((TOTAL_S - (SECONDS - SUITE_START) - 60))
    BUDGET=$((LEFT < wanted ? LEFT : wanted))
    if ((BUDGET >= 20)); then
        run_step "$name" $((BUDGET + 60)) legged "$algo" "$env_id" "$name" "$BUDGET"
    else
        printf '%s\tskipped (no time left: raise TOTAL_S)\t0\t%s\n' "$name" "$wanted" >>"$SUMMARY"
    fi
done

# The summary: every step's status, then the results side by side.
"$PY" - "$RESULTS" "$TRAIN_S" <<'EOF' || echo "the summary failed; the step logs are in $RESULTS"
import csv, json, pathlib, sys
results, budget = pathlib.Path(sys.argv[1]), sys.argv[2]
lines = ["# GPU suite", ""]
env_log = results / "environment.log"
if env_log.exists():
    keep = [l for l in env_log.read_text().splitlines() if l.split(" ")[0] in
            ("Python", "mujoco", "mujoco_warp", "warp", "gymnasium", "numpy", "GPU")]
    lines += ["Environment: " + "; ".join(keep) + ".", ""]
lines += ["| step | status | seconds | limit (s) |", "|---|---|---:|---:|"]
with open(results / "steps.tsv") as f:
    for row in csv.DictReader(f, delimiter="\t"):
        lines.append(f"| {row['step']} | {row['status']} | {row['seconds']} | {row['limit_s']} |")
for name in ("cartpole_throughput", "ant_throughput", *sorted(p.stem for p in results.glob("dmc_throughput_*.csv"))):
    path = results / f"{name}.csv"
    if path.exists():
        rows = list(csv.DictReader(open(path)))
        lines += ["", f"## {name}", "", "| env | backend | N | env-steps/s |", "|---|---|---:|---:|"]
        lines += [f"| {r['env']} | {r['backend']} | {r['num_envs']} | {int(r['env_steps_per_s']):,} |" for r in rows]
if (results / "hot_loop.md").exists():
    lines += ["", "## Hot loop", "", "See hot_loop.md, hot_loop.csv and hot_loop.png."]
lines += ["", f"## Ant-v5 to an evaluation return of 6000 (budget {budget} s per run)", "",
          "| run | env steps | wall-clock (s) | best eval return | reached 6000 | at (s) |", "|---|---:|---:|---:|---|---:|"]
walls = {}
for run in ("ppo_ant", "pql_ant", "ppo_ant_torchrun"):
    path = results / run / "summary.json"
    if not path.exists():
        lines.append(f"| {run} | - | - | - | no summary.json (see {run}.log) | - |")
        continue
    s = json.loads(path.read_text())
    best = max((e["mean_return"] for e in s.get("evaluations", [])), default=float("nan"))
    t = s.get("threshold") or {}
    walls[run] = s["wall_time_s"] / max(s["env_steps"], 1)
    at = f"{t['wall_time_s']:.0f}" if t.get("reached") else "-"
    lines.append(f"| {run} | {s['env_steps']:,} | {s['wall_time_s']:.0f} | {best:.0f} | {t.get('reached', False)} | {at} |")
if "ppo_ant" in walls and "ppo_ant_torchrun" in walls:
    lines += ["", f"torchrun (1 process) against the plain run, wall-clock per env step: "
              f"{walls['ppo_ant_torchrun'] / walls['ppo_ant']:.3f}x (1.000 = no overhead)."]
for run, title in (("ppo_quadruped", "QuadrupedVelocity-Flat-v0 (goal: planar tracking error under 0.2 m/s within "
                   "5 minutes)"), ("ppo_quadruped_rough", "QuadrupedVelocity-Rough-v0 (no goal yet)"),
                  ("ppo_humanoid", "HumanoidVelocity-Flat-v0 (no goal yet)"),
                  ("flashsac_quadruped", "FlashSAC on QuadrupedVelocity-Flat-v0 (against PPO's above)"),
                  ("flashsac_humanoid", "FlashSAC on HumanoidVelocity-Flat-v0 (against PPO's above)")):
    path = results / run / "summary.json"
    if not path.exists():
        continue
    s = json.loads(path.read_text())
    final = s.get("final_eval") or {}
    level = f", terrain level {final['terrain_level']:.2f}" if "terrain_level" in final else ""
    lines += ["", f"## {title}", "",
              f"{s['env_steps']:,} env steps in {s['wall_time_s']:.0f} s; final evaluation: tracking error "
              f"{final.get('tracking_error_lin', float('nan')):.3f} m/s, yaw-rate error "
              f"{final.get('tracking_error_yaw', float('nan')):.3f} rad/s, falls {final.get('fell', float('nan')):.0%}"
              f"{level}."]
(results / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "suite done in $((SECONDS - SUITE_START)) s; results in $RESULTS"
