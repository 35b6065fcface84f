"""Records and their loaders."""

from dpmtv.data.records import Record, load_records, validate_records

__all__ = ["Record", "load_records", "validate_records"]
