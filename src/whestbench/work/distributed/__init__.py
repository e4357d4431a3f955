"""Distributed bakes: ranks claim units from a shared counter and post results to rank 0.

Coordination uses only the rendezvous key-value store (torch.distributed's TCPStore), never a
collective; the protocol (epochs, plan, claims, collection, news, liveness, stopping, endings) is
docs/distributed.md's "Design". Keys, all under ``whest/<run>``: ``epoch`` (counter), ``current``,
``hb/<rank>``, and per epoch ``e<epoch>/``: ``plan``, ``claim``, ``owner/<i>``, ``result/<i>``,
``ckpt/<i>``, ``ckpt-in/<i>``, ``prog/<rank>`` (each rank's progress counts), ``events`` (``r<i>@<rank>``
results, ``c…`` checkpoints, ``s…`` stopped units, ``j…`` joins, ``b…`` goodbyes), ``news`` and the
announcements it counts (``stop``, ``done``, ``failed``, ``abort``, ``peer_failed``).

Modules: ``store_executor`` (``StoreExecutor``, the entry), ``roles`` (rank 0's and the other ranks'),
``epoch`` (one epoch's unit threads) and ``store`` (connection, keys, waits, heartbeats).
"""
