"""Build a labelled stand-in Neuron "release" (neuron_standins/releases/*.json) as a wheel.

    python scripts/build_standin_release.py neuron_standins/releases/rehearsal.2.json OUT_DIR

The release names one stand-in distribution, its new version and the documented behaviours
it changes (exact text replacements in its sources). The stand-in's tree is copied, changed,
given the new version and built with ``pip wheel --no-deps --no-build-isolation`` by the
running interpreter; the wheel's path is printed. REHEARSAL ONLY: never Trainium evidence.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build(release_file: Path, out: Path) -> Path:
    release = json.loads(release_file.read_text())
    if "+rehearsal" not in release["version"]:
        sys.exit(f"{release_file}: a stand-in release's version must carry +rehearsal ({release['version']})")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(REPO / release["source"], src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        for change in release["changes"]:
            path = src / change["file"]
            text = path.read_text()
            if text.count(change["old"]) != 1:
                sys.exit(f"{release_file}: {change['file']} holds {change['old']!r} {text.count(change['old'])} times, not once")
            path.write_text(text.replace(change["old"], change["new"]))
        pyproject = src / "pyproject.toml"
        lines = [f'version = "{release["version"]}"' if l.startswith("version = ") else l
                 for l in pyproject.read_text().splitlines()]
        pyproject.write_text("\n".join(lines) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                               "--disable-pip-version-check", "-w", str(out), str(src)], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"pip wheel failed:\n{proc.stderr[-2000:]}")
    name = release["distribution"].replace("-", "_")
    wheels = sorted(out.glob(f"{name}-{release['version']}-*.whl"))
    if not wheels:
        sys.exit(f"no {name}-{release['version']} wheel in {out}")
    return wheels[-1]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(build(Path(sys.argv[1]), Path(sys.argv[2])))
