from __future__ import annotations

import pytest
import torch

from dpmtv.data.records import load_records
from dpmtv.models.loading import load_model
from dpmtv.selection import PublicSearch
from dpmtv.testing import build_tiny_checkpoint
from tests.selection.planted import plant, write_public_records


@pytest.fixture(autouse=True, scope="package")
def _one_thread():
    """Two cores shared with other jobs: one thread is ~50x faster than two contended ones."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="package")
def planted_path(tmp_path_factory):
    return build_tiny_checkpoint("llava", tmp_path_factory.mktemp("planted-llava"))


@pytest.fixture(scope="package")
def public_path(tmp_path_factory):
    return write_public_records(tmp_path_factory.mktemp("public"), 24)


@pytest.fixture(scope="package")
def public_records(public_path):
    return load_records(public_path)


@pytest.fixture(scope="package")
def planted(planted_path, public_records):
    """(loaded, task) for the planted model; the model is edited in memory only."""
    loaded = load_model(planted_path)
    return loaded, plant(loaded, public_records)


@pytest.fixture(scope="package")
def planted_checkpoint(planted, tmp_path_factory):
    """The planted model saved as a checkpoint folder, for the command line."""
    loaded, _ = planted
    folder = tmp_path_factory.mktemp("planted-saved")
    loaded.model.save_pretrained(folder)
    loaded.processor.save_pretrained(folder)
    return folder


@pytest.fixture(scope="package")
def planted_search(planted):
    loaded, task = planted
    return PublicSearch.from_task(loaded.adapter, task)
