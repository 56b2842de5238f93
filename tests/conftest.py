import os
import sys

# MuJoCo picks its OpenGL platform when first imported (gymnasium may import it before rl_suite does): render
# off-screen through EGL when there is no display.
if sys.platform.startswith("linux") and not os.environ.get("DISPLAY"):
    os.environ.setdefault("MUJOCO_GL", "egl")
