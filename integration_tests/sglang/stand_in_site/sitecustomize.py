"""Put this folder on PYTHONPATH to give a process and every process it spawns (SGLang's scheduler
and detokenizer) the test-only sgl_kernel stand-in; see ../sgl_kernel_stand_in.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sgl_kernel_stand_in  # noqa: E402

sgl_kernel_stand_in.install()
