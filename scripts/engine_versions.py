"""Prints the releases of an engine (vllm or sglang) its lane runs, oldest first, one per line.

Read from LANE_<ENGINE> in plugins/<engine>/registration.py (the one place they are listed)
without importing anything, so set-up scripts can use it before any environment exists.
"""

import ast
import sys
from pathlib import Path

ENGINES = ("vllm", "sglang")
if len(sys.argv) != 2 or sys.argv[1] not in ENGINES:
    raise SystemExit(f"usage: engine_versions.py {{{','.join(ENGINES)}}}")
engine = sys.argv[1]
name = f"LANE_{engine.upper()}"
source = Path(__file__).resolve().parent.parent / "plugins" / engine / "registration.py"
for node in ast.parse(source.read_text()).body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
        print("\n".join(ast.literal_eval(node.value)))
        break
else:
    raise SystemExit(f"{name} not found in {source}")
