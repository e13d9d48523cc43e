"""The SWE family: SWE-bench-format instances, their images, grading, ``gymfleet/SWE-v0`` and
``gymfleet eval swebench``. See envs/swe/README.md for the modules."""
