"""What a run reports as it goes: TensorBoard scalars in the run directory, and progress on stderr.

On a terminal, progress is a tqdm bar redrawn in place. Without one (CI, ``nohup``, a redirect to a file) a bar's
redraws would fill the file, so the run prints one plain summary line per log interval instead, at most one every
``line_interval_s`` seconds, and always the last one."""

from __future__ import annotations

import pathlib
import sys
import time

from tqdm import tqdm


class RunLogger:
    def __init__(
        self,
        run_dir: pathlib.Path,
        total_steps: int,
        start_step: int = 0,
        progress: bool = True,
        stream=None,
        line_interval_s: float = 5.0,
    ):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir))
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
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

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
        self.writer.close()
        self.bar.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class NullLogger:
    """What ranks other than 0 log under torchrun: nothing (rank 0 alone writes TensorBoard and shows progress)."""

    writer = None

    def scalars(self, step: int, values: dict[str, float]) -> None:
        pass

    def advance(self, env_steps: int) -> None:
        pass

    def progress(self, env_steps: int, **postfix) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
