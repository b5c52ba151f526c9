"""Build a labelled regression of a released wheel: the same package with one injected
change, as a new local version, for proving the performance gate.

    python benchmarks/inject_regression.py WHEEL {slow,leak} OUT_DIR   # prints the new wheel

``slow``: torchtitan's Qwen3 block runs an extra synchronising collective per forward (an
all-reduce of its output's copy across ranks), the shape of a real regression where a block
gains a communication it did not need. ``leak``: the block keeps its output, with the
autograd graph hanging from it, alive across steps (activations kept alive). Both leave
every computed value unchanged. The wheel is named ``<version>+slow``/``+leak`` (PEP 440 local
label, with the original's label before it), its RECORD rewritten with the new hashes
(PEP 376/427), so ``pip`` installs it as it would any wheel. Never a release: a test input.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

BLOCK = "torchtitan/models/qwen3/model.py"
ANCHOR = """        else:
            x = x + self.feed_forward(self.ffn_norm(x))
        return x
"""
INJECTED = {
    "slow": ANCHOR.replace("        return x\n", """        import torch.distributed as _dist  # injected: an extra synchronising op per block
        if _dist.is_initialized():
            for _ in range(4):
                _dist.all_reduce(x.detach().clone())
        return x
"""),
    "leak": ANCHOR.replace("        return x\n", """        _KEPT_ALIVE.append(x)  # injected: activations (and their graph) kept alive across steps
        return x
""") + "\n\n_KEPT_ALIVE = []\n",
}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(wheel: Path, kind: str, out_dir: Path) -> Path:
    name, version, *rest = wheel.name[:-len(".whl")].split("-")
    new_version = f"{version}.{kind}" if "+" in version else f"{version}+{kind}"
    old_info, new_info = f"{name}-{version}.dist-info", f"{name}-{new_version}.dist-info"
    out = out_dir / f"{name}-{new_version}-{'-'.join(rest)}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        records = []
        for item in src.infolist():
            data = src.read(item.filename)
            target = item.filename.replace(old_info, new_info, 1)
            if item.filename == BLOCK:
                text = data.decode()
                if ANCHOR not in text:
                    raise SystemExit(f"{BLOCK}: the block's forward is not the one this script knows")
                data = text.replace(ANCHOR, INJECTED[kind], 1).encode()
            if target == f"{new_info}/METADATA":
                data = data.decode().replace(f"Version: {version}\n", f"Version: {new_version}\n", 1).encode()
            if target == f"{new_info}/RECORD":
                continue
            dst.writestr(target, data)
            records.append(_record_line(target, data))
        records.append(f"{new_info}/RECORD,,")
        dst.writestr(f"{new_info}/RECORD", "\n".join(records) + "\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[2] not in INJECTED:
        sys.exit(__doc__)
    print(build(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])))
