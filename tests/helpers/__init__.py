"""What the tests share, one module a concern (``tests/`` is on ``sys.path`` beside conftest.py, so a test
imports ``from helpers.cli import run``). Nothing is imported here: a module that needs torch or
huggingface_hub loads it only for the tests that import that module.

- ``cli``: the CLI in-process (``run``, ``dataset``), as every verb's tests call it.
- ``datasets``: the bakes many files share (their recipes, ``made_once``; conftest.py hands them out as the
  session fixtures ``tiny`` and ``small_bake``), a bake stopped after its first unit, a metadata.json to
  start from, and tampering with a dataset on disk (``edit_metadata``, ``tampered_copy``, ...).
- ``procs``: ``python -m whestbench dataset bake`` as a real subprocess, to signal or kill; a process's
  children; ``free_port``.
- ``signal_points``: a script that sends a signal at one named point of a run.
- ``hub_fake``: the in-memory Hugging Face Hub (no network in any test).
- ``device_faults``: faults a faulty device would make: the ones the device check exists to catch, and
  pcg64 steps on slightly wrong weights for verify's checks.
- ``triton_interp``: triton's interpreter, scoped to the kernel tests on a machine without CUDA.
- ``doc_commands``: what a documented command is, the small sizes and the skips (README and docs/*.md).

The reference models (``tests/philox_kat.py``, ``tests/philox_reference.py``, ``tests/precision_emulation.py``)
stay beside conftest.py: src, docs and benchmarks/ cite them by those paths.
"""
