"""The bundled executable's entry point: the ``hearth`` CLI, with what a frozen program needs."""

import multiprocessing
import sys

if __name__ == "__main__":
    # The engine worker and the probe run in spawned processes: in a frozen program the child
    # is this same executable, and freeze_support() turns it into the child it was asked to be.
    multiprocessing.freeze_support()
    if len(sys.argv) == 1 and sys.platform == "darwin":
        sys.argv.append("app")  # Hearth.app opened from Finder or the Dock
    from runtime.cli import main

    sys.exit(main())
