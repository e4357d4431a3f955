"""The ``--peer-timeout`` flag type of a distributed bake (where a rank sits: ``work.launch_env``)."""

from __future__ import annotations

from whestbench.cli.common import Seconds


class PeerTimeout(Seconds):
    """``--peer-timeout``: seconds, bounded at parse time to what the protocol and the store accept."""

    def convert(self, value, param, ctx):
        from whestbench.work.distributed import check_peer_timeout

        v = super().convert(value, param, ctx)
        why = check_peer_timeout(v)
        if why:
            self.fail(f"{why}; got {value!r}.", param, ctx)
        return v


PEER_TIMEOUT = PeerTimeout()
