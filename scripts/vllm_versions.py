"""Prints the vLLM releases sagespec is tested against, oldest first, one per line.

Read from SUPPORTED_VLLM in plugins/vllm/registration.py (the one place they are listed) without
importing vLLM, so set-up scripts can use it before any environment exists.
"""
import ast
from pathlib import Path

source = Path(__file__).resolve().parent.parent / "plugins" / "vllm" / "registration.py"
for node in ast.parse(source.read_text()).body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SUPPORTED_VLLM" for t in node.targets):
        print("\n".join(ast.literal_eval(node.value)))
        break
else:
    raise SystemExit(f"SUPPORTED_VLLM not found in {source}")
