"""The version of dpmtv, in one place: the package metadata (pyproject's dynamic version) reads
it from this file, and ``dpmtv --version``, the artifacts' ``library_version`` and the server's
OpenAPI title read it from here, so a source tree and its install never disagree."""

__version__ = "0.2.0"
