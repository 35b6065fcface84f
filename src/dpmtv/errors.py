"""The one error hierarchy of dpmtv.

Every message names the offending value (file, record, field, layer, head, parameter) and says
what to do about it. Catch :class:`DpmtvError` to handle anything the library raises on purpose.

::

    DpmtvError
    ├── InputError (ValueError)            bad user input, caught at the boundary
    │   ├── RecordError                    a data file or record (names file, record, field)
    │   ├── ParameterError                 a parameter value (epsilon, delta, clip norm, ...)
    │   ├── HeadSpecError                  a head specification (names the layer/head)
    │   └── LedgerError                    a missing, unreadable, foreign or locked ledger file
    ├── ModelError
    │   ├── UnsupportedModelError          a refused or unloadable model_type (names why)
    │   └── AdapterError                   an adapter's sites do not resolve on the loaded model
    ├── ArtifactError
    │   ├── ArtifactIntegrityError         a tampered or unreadable artifact
    │   │   └── ArtifactSignatureError     unsigned, signed by an untrusted key, or changed
    │   └── ModelMismatchError             artifact built for another model (names the field)
    ├── PrivacyError
    │   ├── NoiseAlreadyAddedError         a release may be noised only once
    │   ├── DangerousModeError             seeded noise / non-private build without the switch
    │   └── BudgetExceededError            a ledger would be overspent
    ├── NumericalError                     NaN/inf activations and similar
    ├── PrivateComputationError            a build failed after its charge (message withheld)
    └── DistributedError                   a distributed build: missing extra, a worker lost too
                                           often, chunk ids returned twice or not at all
"""

from __future__ import annotations


class DpmtvError(Exception):
    """Base class of every error dpmtv raises on purpose."""


class InputError(DpmtvError, ValueError):
    """Bad user input, detected at the boundary before any work is done."""


class RecordError(InputError):
    """A data file or one of its records is unusable."""


class ParameterError(InputError):
    """A parameter has a value outside its allowed range."""


class HeadSpecError(InputError):
    """A head specification names a layer or head the model does not have."""


class LedgerError(InputError):
    """The privacy-budget ledger file is missing, unreadable, of another format, read-only or
    locked; the message names the file and what to do (nothing was charged)."""


class ModelError(DpmtvError):
    """The model cannot be used."""


class UnsupportedModelError(ModelError, ValueError):
    """No adapter is registered for this model family."""


class AdapterError(ModelError):
    """An adapter's module paths or head geometry do not match the loaded model."""


class ArtifactError(DpmtvError):
    """A task-vector artifact cannot be used."""


class ArtifactIntegrityError(ArtifactError):
    """The artifact is unreadable, incomplete, or its tensors do not match their hash."""


class ArtifactSignatureError(ArtifactIntegrityError):
    """An artifact that must be signed by a trusted key is unsigned, signed by another key, or
    changed since it was signed."""


class ModelMismatchError(ArtifactError):
    """The artifact was built for a different model."""


class PrivacyError(DpmtvError):
    """An operation would break the privacy guarantee."""


class NoiseAlreadyAddedError(PrivacyError):
    """A release can be noised only once."""


class DangerousModeError(PrivacyError):
    """A mode without a privacy guarantee was requested without its explicit switch."""


class BudgetExceededError(PrivacyError):
    """The privacy-budget ledger would be overspent."""


class PrivateComputationError(DpmtvError):
    """A build failed after its ledger charge, while computing on private records. The original
    message is withheld (it may quote a record); the charge stands."""


class NumericalError(DpmtvError, ArithmeticError):
    """Non-finite values where finite ones are required."""


class DistributedError(DpmtvError):
    """A distributed build cannot go on (the Ray extra is missing, a worker loads another model,
    a batch of chunks failed too often, or the workers' chunk ids are not disjoint and complete)."""
