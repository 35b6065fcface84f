"""The build's public inputs must not be private records: the one check per build.

A build uses some files without noise because they are public (:mod:`dpmtv.data.overlap` says
why an overlap voids the guarantee): the ``--center`` records and the ``--query`` image, which
:class:`~dpmtv.pipeline.settings.BuildSettings` names, and files a caller used to derive public
inputs before the build (the CLI's ``--heads-from public:FILE`` and ``--public-data``). The check
fingerprints every private record, so it runs once: :func:`check_public_inputs` returns the
records as :class:`CheckedRecords`, and the build (:func:`ensure_checked`) checks only the files
not covered yet. A caller that derives public inputs before the build (the CLI) checks first, so
that a refusal comes before any forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from dpmtv.data import overlap
from dpmtv.data.records import Record
from dpmtv.pipeline.settings import BuildSettings, Centering, QueryKind

__all__ = ["CheckedRecords", "PublicFiles", "check_public_inputs", "ensure_checked"]


@dataclass(frozen=True)
class PublicFiles:
    """Public files by the option that names them (for the message): records files and images."""

    records: Mapping[str, Path] = field(default_factory=dict)
    images: Mapping[str, Path] = field(default_factory=dict)

    @classmethod
    def of_settings(cls, settings: BuildSettings) -> PublicFiles:
        """The public files a build's settings name: ``--center FILE`` and ``--query IMAGE``."""
        center = settings.center_records if settings.center is Centering.PUBLIC_RECORDS else None
        query = settings.query_image if settings.query is QueryKind.PUBLIC_IMAGE else None
        return cls(
            records={} if center is None else {"--center": Path(center)},
            images={} if query is None else {"--query": Path(query)},
        )

    def without(self, checked: PublicFiles) -> PublicFiles:
        """These files less those already ``checked`` (same option, same path)."""
        return PublicFiles(
            records={k: v for k, v in self.records.items() if checked.records.get(k) != v},
            images={k: v for k, v in self.images.items() if checked.images.get(k) != v},
        )

    def union(self, other: PublicFiles) -> PublicFiles:
        return PublicFiles({**self.records, **other.records}, {**self.images, **other.images})


class CheckedRecords(Sequence[Record]):
    """Private records, and the public files already checked against them (made by
    :func:`check_public_inputs`); a sequence of the records, so a build takes it as they are."""

    def __init__(self, records: Sequence[Record], checked: PublicFiles) -> None:
        self.records, self.checked = records, checked

    def __len__(self) -> int:
        return len(self.records)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | Sequence[Record]:
        return self.records[index]


def check_public_inputs(records: Sequence[Record], files: PublicFiles) -> CheckedRecords:
    """Refuse public ``files`` that hold private ``records``; checks only files not yet checked.

    Raises:
        RecordError: a public record equal to a private one, or a public image that is a private
            record's image; the message names the option, the file and how many.
    """
    done = records if isinstance(records, CheckedRecords) else CheckedRecords(records, PublicFiles())
    todo = files.without(done.checked)
    if todo.records or todo.images:
        overlap.check_public_inputs(done.records, public_records=todo.records, public_images=todo.images)
    return CheckedRecords(done.records, done.checked.union(todo))


def ensure_checked(records: Sequence[Record], settings: BuildSettings) -> Sequence[Record]:
    """The build's step before any forward pass: its settings' public files checked (unless the
    caller already did), then the plain records."""
    return check_public_inputs(records, PublicFiles.of_settings(settings)).records
