"""Prints the requirements of the installed sglang (markers evaluated, extras left out), one per
line, with pins the package registries cannot satisfy relaxed. Used by setup_sglang.sh, which
installs sglang with --no-deps and then these.

sglang 0.5.22 pins cuda-tile==1.6.0rc5, whose registry entry is only a stub that downloads the
real wheel from NVIDIA's index at install time; the release that is on the registries (1.7.0)
stands in. cuda-tile is a GPU kernel compiler that no CPU path imports.
"""

from importlib.metadata import requires

from packaging.requirements import Requirement

RELAXED = {"cuda-tile"}

for line in requires("sglang") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name in RELAXED:
        req.specifier = type(req.specifier)("")
    print(req)
