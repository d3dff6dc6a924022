#!/usr/bin/env python3
"""`kubectl dra` as krew installs it: krew unpacks this file and the dra-extender wheel into a directory
of its own for each version. The first run installs the wheel (dependencies from PyPI) into a virtualenv
in that directory; every run then hands over to the package's own kubectl-dra."""

import fcntl
import glob
import os
import shutil
import subprocess
import sys

MINIMUM_PYTHON = (3, 11)


def _install(here: str, env_dir: str) -> None:
    wheels = glob.glob(os.path.join(here, "dra_extender-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"kubectl dra: expected one dra_extender wheel next to {__file__}, found {len(wheels)}")
    print(f"kubectl dra: first run: installing {os.path.basename(wheels[0])} and its dependencies from PyPI "
          f"into {env_dir} ...", file=sys.stderr, flush=True)
    shutil.rmtree(env_dir, ignore_errors=True)
    python = os.path.join(env_dir, "bin", "python")
    for command in ([sys.executable, "-m", "venv", env_dir],
                    [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheels[0]]):
        if subprocess.run(command, check=False).returncode != 0:
            shutil.rmtree(env_dir, ignore_errors=True)
            sys.exit(f"kubectl dra: `{' '.join(command)}` failed; fix what it says and run kubectl dra again")


def main() -> None:
    if sys.version_info < MINIMUM_PYTHON:
        sys.exit(f"kubectl dra needs Python {'.'.join(map(str, MINIMUM_PYTHON))} or later as python3; "
                 f"{sys.executable} is {sys.version.split()[0]}")
    here = os.path.dirname(os.path.realpath(__file__))
    env_dir = os.path.join(here, "venv")
    done = os.path.join(env_dir, ".installed")
    if not os.path.exists(done):
        # Two first runs at once: the second waits for the first's install instead of racing it.
        with open(os.path.join(here, ".install.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(done):
                _install(here, env_dir)
                open(done, "w").close()
    plugin = os.path.join(env_dir, "bin", "kubectl-dra")
    os.execv(plugin, [plugin, *sys.argv[1:]])


if __name__ == "__main__":
    main()
