import os
import sys

# MuJoCo picks its OpenGL platform when first imported (gymnasium may import it before rl_suite does): render
# off-screen through EGL when there is no display.
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _sb3_logs_in_the_test_directory(tmp_path_factory):
    """stable-baselines3's learn() makes a logger folder in the system's temporary directory (SB3-<date>) unless
    SB3_LOGDIR says where: keep them in pytest's own temporary directory, before any fixture of any scope trains."""
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))
