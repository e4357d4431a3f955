"""The on-disk format: schema 3.0 and its metadata, shards and checksums, the card.

Owns what a dataset directory *is* (``schema``, ``bakemeta``, ``breakdown``, ``command``), how it is
read (``reader``) and written (``writer``, ``card``); what the machine adds is ``work/machine.py``'s.
May import: ``compute``, ``work`` and the top-level helpers. Never the Hub, a bake, verify or assembly.
"""
