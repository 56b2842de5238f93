"""What a run reports as it goes: TensorBoard scalars in the run directory, and a progress bar on the terminal."""

from __future__ import annotations

import pathlib

from tqdm import tqdm


class RunLogger:
    def __init__(self, run_dir: pathlib.Path, total_steps: int, start_step: int = 0, progress: bool = True):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir))
        self.bar = tqdm(
            total=total_steps,
            initial=start_step,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=not progress,
            desc="train",
        )

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def advance(self, env_steps: int) -> None:
        """Move the bar; tqdm redraws at most ten times a second, so this is cheap to call every iteration."""
        self.bar.update(env_steps - self.bar.n)

    def progress(self, env_steps: int, **postfix) -> None:
        self.advance(env_steps)
        self.bar.set_postfix(
            {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in postfix.items()}, refresh=False
        )

    def message(self, text: str) -> None:
        self.bar.write(text)

    def close(self) -> None:
        self.writer.close()
        self.bar.close()


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
