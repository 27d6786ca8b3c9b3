"""Where sessions live besides a folder of JSONL files.

The folder is the embedded default and the format of record (a session is its
:class:`~boundctx.transcript.Transcript`); :mod:`boundctx.stores.postgres` keeps the same
sessions in PostgreSQL, for a deployment that outgrows one machine (docs/decisions/0048).
Both are read and written by one contract, which the store tests run against each.
"""
