"""Check the built distributions: the wheel and the sdist each hold the LICENSE and evidential_prvr/py.typed, the
wheel the page of serve, the bundled encoder and the prvr-videos command; then install the wheel into a fresh
virtual environment and run the README's drop-in snippet there, from a folder outside the repository (what a user
who installs the wheel runs first).

Usage: ``python .ci/check_dist.py DIST_FOLDER`` (the folder ``python -m build`` wrote one wheel and one sdist to),
run by the environment that built them: the fresh environment gets the torch version installed there
(``pip install torch==X`` beside the wheel; on CI's machines pip finds that file locally).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What marks the README's drop-in snippet among its Python blocks.
SNIPPET_MARK = "from evidential_prvr import HolmesCriterion"


def main(folder: str) -> int:
    dist = Path(folder)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {dist}, found {[p.name for p in dist.iterdir()]}")
        return 1
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel_names = wheel.namelist()
    with tarfile.open(sdists[0]) as sdist:
        sdist_names = [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]
    missing = []
    if "evidential_prvr/py.typed" not in wheel_names:
        missing.append(f"{wheels[0].name}: evidential_prvr/py.typed")
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in wheel_names):
        missing.append(f"{wheels[0].name}: *.dist-info/licenses/LICENSE")
    for name, what in (("reference_models/videos/static/index.html", "the page of serve"),
                       ("reference_models/videos/encoders/prvr-tiny.json", "the bundled encoder's configuration"),
                       ("reference_models/videos/encoders/prvr-tiny-generated-world.safetensors",
                        "the bundled encoder's weights"),
                       ("reference_models/videos/encoders/prvr-tiny-generated-world.json",
                        "the bundled encoder's record")):
        if name not in wheel_names:
            missing.append(f"{wheels[0].name}: {name} ({what})")
    if not any(name.endswith(".dist-info/entry_points.txt") for name in wheel_names):
        missing.append(f"{wheels[0].name}: *.dist-info/entry_points.txt (the prvr-videos command)")
    else:
        entry = next(name for name in wheel_names if name.endswith(".dist-info/entry_points.txt"))
        with zipfile.ZipFile(wheels[0]) as wheel:
            if "prvr-videos = reference_models.videos.cli:console_main" not in wheel.read(entry).decode():
                missing.append(f"{wheels[0].name}: the prvr-videos console script in {entry}")
    for name in ("LICENSE", "evidential_prvr/py.typed"):
        if name not in sdist_names:
            missing.append(f"{sdists[0].name}: {name}")
    if missing:
        print("missing from the distributions: " + "; ".join(missing))
        return 1
    print(f"{wheels[0].name} and {sdists[0].name} carry LICENSE and evidential_prvr/py.typed")
    return run_readme_snippet(wheels[0])


def readme_snippet(readme: Path = ROOT / "README.md") -> str:
    """The README's drop-in snippet: its one ```python block that contains :data:`SNIPPET_MARK`."""
    blocks = re.findall(r"^```python\n(.*?)^```$", readme.read_text(encoding="utf-8"), re.M | re.S)
    found = [block for block in blocks if SNIPPET_MARK in block]
    if len(found) != 1:
        raise SystemExit(f"expected one Python block with {SNIPPET_MARK!r} in {readme}, found {len(found)}")
    return found[0]


def run_readme_snippet(wheel: Path) -> int:
    """Install ``wheel`` and this environment's torch into a fresh virtual environment and run the README's drop-in
    snippet there, from an empty folder outside the repository; 0 when it runs on the installed package."""
    import torch  # the environment that built the wheel has the torch CI installed

    version = wheel.name.split("-")[1]
    torch_pin = f"torch=={torch.__version__.split('+')[0]}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    with tempfile.TemporaryDirectory(prefix="wheel-check-") as tmp:
        if Path(tmp).resolve().is_relative_to(ROOT):
            raise SystemExit(f"the temporary folder {tmp} lies inside the repository")
        venv, work = Path(tmp) / "venv", Path(tmp) / "work"
        work.mkdir()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run([python, "-m", "pip", "install", "--quiet", torch_pin, str(wheel.resolve())], check=True,
                       env=env)
        (work / "drop_in.py").write_text(readme_snippet(), encoding="utf-8")
        where = ("import evidential_prvr, sys; print(evidential_prvr.__version__); "
                 "print(evidential_prvr.__file__)")
        found = subprocess.run([python, "-c", where], cwd=work, env=env, capture_output=True, text=True, check=True)
        installed_version, location = found.stdout.split()
        if installed_version != version or not Path(location).resolve().is_relative_to(venv.resolve()):
            print(f"the fresh environment imports evidential_prvr {installed_version} from {location}, not the "
                  f"wheel's {version} installed in {venv}")
            return 1
        run = subprocess.run([python, "drop_in.py"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        if run.returncode != 0:
            print(f"the README's drop-in snippet failed on the installed {wheel.name}:\n{run.stdout}{run.stderr}")
            return 1
        print(f"the README's drop-in snippet runs on {wheel.name} installed with {torch_pin} in a fresh environment, "
              f"from a folder outside the repository: {run.stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
