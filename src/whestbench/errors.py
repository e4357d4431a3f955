"""Error classes shared by every layer. The CLI maps UsageError to exit 2 and other errors to exit 1."""


class UsageError(ValueError):
    """The request itself is wrong (a flag, a value, a file given as input); fixing the command fixes it."""


class WorkFailed(RuntimeError):
    """The request was fine but the work could not be done (a device, a peer, a disk)."""


class SignalStop(BaseException):
    """SIGTERM or SIGUSR1 arrived before a verb could handle it (start-up, imports, set-up).

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way swallows it.
    """

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)
