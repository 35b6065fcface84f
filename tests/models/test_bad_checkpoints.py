"""Damaged or mismatched checkpoints and LoRA adapters: one `error:` line naming the file and
what is wrong, refused before any charge, never a traceback and never a half-applied model.

On the old code (a41db9d): damaged adapter weights, an adapter config that is a JSON list, a
pickled ``adapter_model.bin``, a truncated ``model.safetensors`` (plain or torchao int8) and a
bitsandbytes config without bitsandbytes were tracebacks; ``quant_method = "nonsense"`` loaded
(transformers skips an unknown method); a Qwen2-VL adapter on a LLaVA base merged its half
(LLaVA's vision tower has q_proj/v_proj, Qwen2-VL's has qkv) with only PEFT's warning."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.errors import ModelError
from dpmtv.ledger.book import Ledger
from dpmtv.models.loading import load_model
from dpmtv.testing import build_tiny_checkpoint
from tests.cli.test_cli import _build_args
from tests.models.test_loaded_models import _lora_adapter, int8_checkpoint  # noqa: F401 (a fixture)

WEIGHTS = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def llava_adapter(tiny_llava_path, tmp_path_factory):
    return _lora_adapter(tiny_llava_path, tmp_path_factory.mktemp("lora") / "a", seed=1)


def _copy(folder, tmp_path, name="copy"):
    return shutil.copytree(folder, tmp_path / name)


def _refused(model, match: str, **options) -> str:
    with pytest.raises(ModelError, match=match) as refused:
        load_model(model, **options)
    message = str(refused.value)
    assert "\n" not in message and "Traceback" not in message
    return message


DAMAGES = {
    "corrupt": lambda data: bytes(b ^ 0x5A for b in data),
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_adapter_weights_are_named(tiny_llava_path, llava_adapter, tmp_path, damage):
    adapter = _copy(llava_adapter, tmp_path)
    weights = adapter / WEIGHTS
    weights.write_bytes(DAMAGES[damage](weights.read_bytes()))
    message = _refused(tiny_llava_path, "not a readable safetensors file", adapter_weights=adapter)
    assert str(weights) in message


@pytest.mark.parametrize("config", [[1, 2], "LORA", 3, None])
def test_an_adapter_config_that_is_not_an_object_is_named(tiny_llava_path, llava_adapter, tmp_path, config):
    adapter = _copy(llava_adapter, tmp_path)
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    message = _refused(tiny_llava_path, "must hold a JSON object", adapter_weights=adapter)
    assert "adapter_config.json" in message


def test_a_pickled_adapter_is_refused_without_unpickling_it(tiny_llava_path, llava_adapter, tmp_path):
    from safetensors.torch import load_file

    adapter = _copy(llava_adapter, tmp_path)
    tensors = load_file(adapter / WEIGHTS)
    (adapter / WEIGHTS).unlink()
    torch.save(tensors, adapter / "adapter_model.bin")
    message = _refused(tiny_llava_path, "pickle", adapter_weights=adapter)
    assert "adapter_model.bin" in message and "safetensors" in message


@pytest.fixture(scope="module")
def qwen2_vl_adapter(tmp_path_factory):
    """A LoRA adapter trained on a Qwen2-VL: its keys are the language model's only."""
    base = build_tiny_checkpoint("qwen2_vl", tmp_path_factory.mktemp("tiny-qwen2-vl"))
    return _lora_adapter(base, tmp_path_factory.mktemp("lora-qwen") / "q", seed=3)


def test_an_adapter_of_another_family_is_refused_before_any_charge(
    tiny_llava_path, qwen2_vl_adapter, tmp_path
):
    message = _refused(tiny_llava_path, "do not match", adapter_weights=qwen2_vl_adapter)
    assert "vision_tower" in message  # the first of the base's modules the adapter has no weights for
    from tests.conftest import write_records

    ledger = Ledger(tmp_path / "budget.sqlite")
    ledger.init_dataset("ds", epsilon=3.0, delta=1e-5)
    data = write_records(tmp_path / "data", 8, seed=1)
    args = _build_args(tiny_llava_path, data, tmp_path / "v.safetensors", "--dataset", "ds",
                       "--ledger", str(ledger.path), "--adapter-weights", str(qwen2_vl_adapter))  # fmt: skip
    result = CliRunner().invoke(main, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "do not match" in lines[0], result.output
    assert not ledger.status("ds").charges and not (tmp_path / "v.safetensors").exists()


def test_a_matching_adapter_still_merges(tiny_llava_path, llava_adapter):
    load_model(tiny_llava_path, adapter_weights=llava_adapter)


@pytest.mark.parametrize("quantised", [False, True])
def test_a_truncated_model_safetensors_is_named(tiny_llava_path, request, tmp_path, quantised):
    model = _copy(request.getfixturevalue("int8_checkpoint") if quantised else tiny_llava_path, tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    message = _refused(model, "not a readable safetensors file")
    assert str(weights) in message


def _with_quantization(model, tmp_path, quantization: dict):
    folder = _copy(model, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantization_config": quantization}))
    return folder


def test_an_unknown_quant_method_is_refused(tiny_llava_path, int8_checkpoint, tmp_path):  # noqa: F811
    for name, model in (("plain", tiny_llava_path), ("int8", int8_checkpoint)):
        config = json.loads((model / "config.json").read_text()) if name == "int8" else {}
        quantization = {**config.get("quantization_config", {}), "quant_method": "nonsense"}
        folder = _with_quantization(model, tmp_path / name, quantization)
        message = _refused(folder, "quant_method 'nonsense'")
        assert "config.json" in message and "torchao" in message  # the known methods are listed


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is not None, reason="bitsandbytes is installed")
def test_a_bitsandbytes_checkpoint_without_bitsandbytes_says_what_to_install(tiny_llava_path, tmp_path):
    folder = _with_quantization(
        tiny_llava_path, tmp_path, {"quant_method": "bitsandbytes", "load_in_8bit": True}
    )
    _refused(folder, "bitsandbytes.*pip install")


def _truncated(model, tmp_path):
    folder = _copy(model, tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return folder


BAD_MODELS = {
    "truncated weights": (_truncated, "not a readable safetensors file"),
    "unknown quant_method": (
        lambda model, tmp_path: _with_quantization(model, tmp_path, {"quant_method": "nonsense"}),
        "quant_method 'nonsense'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_MODELS))
def test_a_build_on_a_bad_checkpoint_is_one_error_line_and_charges_nothing(tiny_llava_path, tmp_path, case):
    from tests.conftest import write_records

    make, words = BAD_MODELS[case]
    model = make(tiny_llava_path, tmp_path)
    ledger = Ledger(tmp_path / "budget.sqlite")
    ledger.init_dataset("ds", epsilon=3.0, delta=1e-5)
    data = write_records(tmp_path / "data", 8, seed=1)
    args = _build_args(
        model, data, tmp_path / "v.safetensors", "--dataset", "ds", "--ledger", str(ledger.path)
    )
    result = CliRunner().invoke(main, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert words in lines[0] and not ledger.status("ds").charges
