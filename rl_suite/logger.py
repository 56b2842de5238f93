"""What a run reports as it goes: scalars and videos to its experiment trackers, and progress on stderr.

Trackers are named by ``RunConfig.loggers`` (``--logger tensorboard,wandb``): ``tensorboard`` writes event files into
the run directory (the default), ``wandb`` logs to Weights & Biases (``WANDB_MODE=offline`` keeps it on disk, under
the run directory's ``wandb/``). Another tracker (MLflow, say) is one small class with ``scalars``, ``video`` and
``close``, added to ``TRACKERS``. The names come from config.yaml on resume, so they are looked up in that table and
nothing else.

On a terminal, progress is a tqdm bar redrawn in place. Without one (CI, ``nohup``, a redirect to a file) a bar's
redraws would fill the file, so the run prints one plain summary line per log interval instead, at most one every
``line_interval_s`` seconds, and always the last one."""

from __future__ import annotations

import os
import pathlib
import secrets
import sys
import time

from tqdm import tqdm


class TensorBoardTracker:
    """Event files in the run directory; videos as animated images (what TensorBoard's own ``add_video`` writes)."""

    def __init__(self, run_dir: pathlib.Path, config: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def video(self, tag: str, gif: pathlib.Path, frame_shape: tuple[int, int, int], step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        height, width, channels = frame_shape
        image = Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=gif.read_bytes())
        self.writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A Weights & Biases run named after the run directory, in project ``$WANDB_PROJECT`` (default ``rl-suite``).
    Its id is kept in the run directory (``wandb-run-id``), so a resumed run continues the same W&B run. The config
    is the run's config.yaml; the scalars are the same as TensorBoard's, at the same env steps."""

    ID_FILE = "wandb-run-id"

    def __init__(self, run_dir: pathlib.Path, config: dict):
        try:
            import wandb
        except ImportError:
            raise ValueError("the wandb logger needs Weights & Biases: pip install 'rl-suite[wandb]'") from None
        id_file = run_dir / self.ID_FILE
        if not id_file.is_file():
            id_file.write_text(secrets.token_hex(8) + "\n")
        run_id = id_file.read_text().strip()
        if not run_id.isalnum():  # the file may come from a stranger: an id, nothing else
            raise ValueError(f"{id_file} does not hold a W&B run id: {run_id[:40]!r}")
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "rl-suite"),
            name=run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config,
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def video(self, tag: str, gif: pathlib.Path, frame_shape: tuple[int, int, int], step: int) -> None:
        self.run.log({tag: self.wandb.Video(str(gif), format="gif")}, step=step)

    def close(self) -> None:
        self.run.finish()


TRACKERS = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker}


def tracker_names(loggers: str) -> list[str]:
    """The tracker names of ``RunConfig.loggers`` (comma-separated), checked: known, at least one, none twice."""
    names = [name.strip() for name in loggers.split(",") if name.strip()]
    unknown = [name for name in names if name not in TRACKERS]
    if unknown or not names or len(set(names)) < len(names):
        raise ValueError(
            f"loggers={loggers!r}: give one or more of {', '.join(TRACKERS)}, comma-separated, each once"
            + (f" ({', '.join(map(repr, unknown))} unknown)" if unknown else "")
        )
    return names


class RunLogger:
    def __init__(
        self,
        run_dir: pathlib.Path,
        total_steps: int,
        start_step: int = 0,
        progress: bool = True,
        stream=None,
        line_interval_s: float = 5.0,
        loggers: str = "tensorboard",
        config: dict | None = None,
    ):
        self.trackers = []
        try:
            for name in tracker_names(loggers):
                self.trackers.append(TRACKERS[name](run_dir, config or {}))
        except BaseException:
            for tracker in self.trackers:
                tracker.close()
            raise
        self.stream = sys.stderr if stream is None else stream
        self.total_steps, self.line_interval_s = total_steps, line_interval_s
        self.lines = progress and not _is_terminal(self.stream)  # plain lines instead of a bar
        self.last_line_at = -float("inf")
        self.pending: str | None = None  # a summary held back by the interval, printed at close
        self.bar = tqdm(
            total=total_steps,
            initial=start_step,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=not progress or self.lines,
            desc="train",
            file=self.stream,
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tracker in self.trackers:
            tracker.scalars(step, values)

    def video(self, tag: str, gif: pathlib.Path, frame_shape: tuple[int, int, int], step: int) -> None:
        """An animated GIF already written at ``gif``, of frames ``frame_shape`` (height, width, channels)."""
        for tracker in self.trackers:
            tracker.video(tag, gif, frame_shape, step)

    def advance(self, env_steps: int) -> None:
        """Move the bar; tqdm redraws at most ten times a second, so this is cheap to call every iteration."""
        self.bar.update(env_steps - self.bar.n)

    def progress(self, env_steps: int, **postfix) -> None:
        """The state at a log interval: ``postfix`` values are shown as given (floats to 4 significant digits)."""
        shown = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in postfix.items()}
        if not self.lines:
            self.advance(env_steps)
            self.bar.set_postfix(shown, refresh=False)
            return
        self.pending = f"train {env_steps:,}/{self.total_steps:,} steps" + "".join(
            f" | {k} {v:,}" if isinstance(v, int) else f" | {k} {v}" for k, v in shown.items()
        )
        now = time.monotonic()
        if now - self.last_line_at >= self.line_interval_s:
            self._print_pending()
            self.last_line_at = now

    def _print_pending(self) -> None:
        if self.pending is not None:
            print(self.pending, file=self.stream, flush=True)
            self.pending = None

    def message(self, text: str) -> None:
        """A line on stdout (evaluation thresholds, interruptions), written above the bar if there is one."""
        if self.lines:
            print(text, flush=True)
        else:
            self.bar.write(text)

    def close(self) -> None:
        self._print_pending()
        for tracker in self.trackers:
            tracker.close()
        self.bar.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class NullLogger:
    """What ranks other than 0 log under torchrun: nothing (rank 0 alone writes TensorBoard and shows progress)."""

    def scalars(self, step: int, values: dict[str, float]) -> None:
        pass

    def video(self, tag: str, gif: pathlib.Path, frame_shape: tuple[int, int, int], step: int) -> None:
        pass

    def advance(self, env_steps: int) -> None:
        pass

    def progress(self, env_steps: int, **postfix) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
