"""The privacy-budget ledger: a SQLite book of every release charged to a dataset, and the charge
protocol a build calls once before its first noise draw. File I/O lives here, not in the pure maths
of :mod:`dpmtv.privacy`, whose events and composition the ledger stores and replays."""
