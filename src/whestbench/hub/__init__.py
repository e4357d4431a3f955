"""Where datasets come from and go to: the local-or-Hub reference grammar (``ref``), every call to
the Hugging Face Hub with its retries (``client``), ``load_dataset`` for a local directory or a Hub
repo (``loader``), a loaded split as arrays and frames (``tables``), push (``push``) and
pull (``pull``).

May import: ``compute``, ``work``, ``format`` and the top-level helpers.
"""
