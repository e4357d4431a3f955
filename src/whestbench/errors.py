"""Every public error class, in one place, importable from any layer.

The CLI (``cli/app.py``) maps ``UsageError`` to exit 2, ``BakeInterrupted`` to its ``exit_code`` (75
for a stop signal, 130 for Ctrl-C) and every other ``Exception`` to exit 1 (a closed stdout is no
error: exit 0); the class tree with each class's exit code and meaning is docs/cli.md's "Errors". The 0.16 names
(``InvalidDatasetError``, ``Merge*Error``) stay ``ValueError`` subclasses and stay importable from
``whestbench.dataset_io``, as in 0.16. Import every class from here.

Every class but ``SignalStop`` and ``BakeInterrupted`` is a ``WhestError`` (huggingface_hub's
``errors.py`` is the model): it carries its fields, ``problem`` (what is wrong), ``where`` (the path or
flag it is about) and ``fix`` (the advice), and makes its own message from them. An error of one
class becomes one of another with ``from_error``, fields and all: never by formatting its string into
a new one. Advice said in many places is said once, here (``REDO``).

Not here, because they never leave their module (control flow, not errors): ``work.steps.UnitStopped``, ``verify.scan._ShapeError`` and
``hub.client._Absent``.
"""


from whestbench.text import show_value

REDO = "Re-download the dataset or re-bake it with `whest dataset bake`."
"""The advice for a dataset whose files are damaged or not what its metadata says."""
RESUME = "re-run the same command to resume"
"""The advice after a bake stopped: its saved units are kept, and the same command goes on from them."""
RETRY = "re-run the same command to resume or start again"
"""The advice after any verb stopped: a bake resumes; the others, atomic, start again."""


def render(exc: BaseException) -> str:
    """An error's words: a ``WhestError``'s made from its fields, ``"<where>: <problem> <fix>"`` (its
    message, and what the CLI prints), any other's its message, else its class name."""
    if not isinstance(exc, WhestError):
        return str(exc) or type(exc).__name__
    text = f"{exc.where}: {exc.problem}" if exc.where is not None else exc.problem
    return f"{text} {exc.fix}" if exc.fix else text


class WhestError(Exception):
    """An error that carries its fields and formats its own message from them (``render``)."""

    def __init__(self, problem: object = "", *, where: object = None, fix: str | None = None):
        self.problem, self.where, self.fix = str(problem), where, fix
        super().__init__(render(self))

    @classmethod
    def from_error(cls, exc: BaseException, *, where: object = None, fix: str | None = None):
        """An error of this class saying what ``exc`` says, about ``where`` (before its own), with ``fix``
        added to its advice."""
        problem, old_fix = getattr(exc, "problem", str(exc)), getattr(exc, "fix", None)
        if getattr(exc, "where", None) is not None:
            problem = f"{exc.where}: {problem}"
        return cls(problem, where=where, fix=" ".join(f for f in (old_fix, fix) if f) or None)


def bad_value(cls: type[WhestError], what: str, value: object, rest: str, *, fix: str, where: object = None,
              max_len: int = 60) -> WhestError:
    """The one "bad value" error: ``cls("<what> <value> <rest>", where=where, fix=fix)``, the value shown
    as ``text.show_value`` renders it (a string as its repr, anything else as JSON), cut to ``max_len``."""
    return cls(f"{what} {show_value(value, max_len=max_len)} {rest}", where=where, fix=fix)


class UsageError(WhestError, ValueError):
    """The request itself is wrong (a flag, a value, a file given as input); fixing the command fixes it."""


class WorkFailed(WhestError, RuntimeError):
    """The request was fine but the work could not be done (a device, a peer, a disk)."""


class SignalStop(BaseException):
    """A stop signal (SIGTERM, SIGUSR1, SIGHUP, SIGQUIT) before a verb could handle it; a BaseException, like KeyboardInterrupt, so
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


class FileTooLarge(UsageError, OSError):
    """A file larger than the cap its reader allows (``atomic.read_regular``), refused before it is read:
    an OSError, so a caller that treats an unreadable file as damaged does the same with it, and a
    UsageError (exit 2) where none does."""


class DamagedRecord(WhestError, ValueError):
    """A unit or checkpoint file failed a check (the message says which)."""


class BakeInterrupted(RuntimeError):
    """A stop was requested; units and checkpoints are saved. ``exit_code``: 75 (a stop signal) or 130 (Ctrl-C)."""

    def __init__(self, message: str, exit_code: int = 75):
        super().__init__(message)
        self.exit_code = exit_code


class DeviceCheckFailed(WorkFailed):
    """A device check failed: the bake stops before any work (exit 1)."""


class InvalidDatasetError(WhestError, ValueError):
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
