"""Every public error class, in one place, importable from any layer.

The CLI (``cli/app.py``) maps ``UsageError`` to exit 2 and every other ``Exception`` to exit 1::

    ValueError
    ├── UsageError                  exit 2  the command is wrong (a flag, a value, a path); fixing it fixes it
    │   ├── SeedError               exit 2  a seed list of the wrong type, range, length, or with duplicates
    │   ├── OutputExistsError       exit 2  --output exists (also a FileExistsError, as in 0.16)
    │   ├── TorchMissingError       exit 2  the torch backend was asked for, torch is not installed (also an ImportError, as in 0.16)
    │   ├── LedgerMismatch          exit 2  the work directory belongs to another bake
    │   ├── DamagedWorkFile         exit 2  a work directory's plan or seeds file failed its check
    │   ├── WorkDirBusy             exit 2  another bake holds the work directory's lock
    │   ├── InputPathError          exit 2  an input path is missing or not a directory (also an InvalidDatasetError, as in 0.16)
    │   ├── DatasetSourceError      exit 2  a missing local dataset path or a malformed Hub reference (also an InvalidDatasetError)
    │   └── DefaultSplitError       exit 2  --default-split is not an input split (also a MergeIncompatibleError, as in 0.16)
    ├── InvalidDatasetError         exit 1  a dataset directory or its metadata is not a valid WhestBench dataset
    │   ├── MergeIncompatibleError  exit 1  partials (or splits) disagree on something that must be equal
    │   ├── MergeIncompleteError    exit 1  the partials leave MLP indices uncovered
    │   ├── MergeOverlapError       exit 1  two partials cover the same MLP indices
    │   └── MergeCorruptError       exit 1  a dataset's rows or files do not match its metadata
    └── DamagedRecord               exit 1  a work unit or checkpoint file failed its check (a bake re-runs the unit)
    RuntimeError
    ├── WorkFailed                  exit 1  the request was fine but a device, a peer, a disk or the Hub failed
    │   ├── HubError                exit 1  a Hugging Face Hub call failed (also an OSError, as huggingface_hub's are)
    │   └── DeviceCheckFailed       exit 1  a device check failed before the bake started
    └── BakeInterrupted             exit 75 (SIGTERM, SIGUSR1) or 130 (Ctrl-C): a stop; the same command resumes
    BaseException
    └── SignalStop                  exit 75 (bake) or 128+signal: SIGTERM or SIGUSR1 before a verb could handle it

The 0.16 names (``InvalidDatasetError``, ``Merge*Error``) stay ``ValueError`` subclasses and stay
importable from ``whestbench.dataset_io``, as in 0.16. Import every class from here.

Not here, because they never leave their module (control flow, not errors): ``plan.AlreadyBaked``
(the bake is already done: exit 0), ``steps.UnitStopped``, ``scan._ShapeError`` and
``hubclient._Absent``.
"""


class UsageError(ValueError):
    """The request itself is wrong (a flag, a value, a file given as input); fixing the command fixes it."""


class WorkFailed(RuntimeError):
    """The request was fine but the work could not be done (a device, a peer, a disk)."""


class SignalStop(BaseException):
    """SIGTERM or SIGUSR1 before a verb could handle it; a BaseException, like KeyboardInterrupt, so
    that no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


class SeedError(UsageError):
    """A seed list that cannot be used: wrong type, range, length or duplicates."""


class OutputExistsError(UsageError, FileExistsError):
    """The output directory already exists (exit 2); a ``FileExistsError`` as in whestbench 0.16."""


class TorchMissingError(UsageError, ImportError):
    """Torch was asked for but is not installed. ``ImportError`` extends the plain exception layout a
    ``ValueError`` has, so the two bases combine."""


class LedgerMismatch(UsageError):
    """The work directory belongs to a different bake (other seeds, sizes, sampler or range)."""


class DamagedWorkFile(UsageError):
    """A plan or seeds file failed its check: the bake cannot know what it was resuming."""


class WorkDirBusy(UsageError):
    """Another bake holds the work directory's lock."""


class DamagedRecord(ValueError):
    """A unit or checkpoint file failed a check (the message says which)."""


class BakeInterrupted(RuntimeError):
    """A stop was requested; units and checkpoints are saved. ``exit_code``: 75 (SIGTERM/SIGUSR1) or 130 (Ctrl-C)."""

    def __init__(self, message: str, exit_code: int = 75):
        super().__init__(message)
        self.exit_code = exit_code


class DeviceCheckFailed(WorkFailed):
    """A device check failed: the bake stops before any work (exit 1)."""


class InvalidDatasetError(ValueError):
    """A dataset directory or its metadata is not a valid WhestBench dataset."""


class MergeIncompatibleError(InvalidDatasetError):
    """Partials (or splits) disagree on something that must be equal to merge (or combine) them."""


class MergeIncompleteError(InvalidDatasetError):
    """The partials leave some MLP indices uncovered."""


class MergeOverlapError(InvalidDatasetError):
    """Two partials cover the same MLP indices."""


class MergeCorruptError(InvalidDatasetError):
    """A partial's rows or files do not match what its metadata declares (ids, checksums)."""


class InputPathError(UsageError, InvalidDatasetError):
    """An input path is missing or is not a directory (an InvalidDatasetError in whestbench 0.16)."""


class DatasetSourceError(InvalidDatasetError, UsageError):
    """The dataset's location is wrong as written: a missing local path, a malformed Hub reference."""


class DefaultSplitError(UsageError, MergeIncompatibleError):
    """``default_split`` is not an input's split (a MergeIncompatibleError in whestbench 0.16)."""


class HubError(WorkFailed, OSError):
    """A Hub call failed; the message names the fix. An OSError, as huggingface_hub's own errors are."""
