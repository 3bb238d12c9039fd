"""Check that the built wheel and sdist each hold the LICENSE and evidential_prvr/py.typed, and the wheel the page of
serve, the bundled encoder and the prvr-videos command."""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path


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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
