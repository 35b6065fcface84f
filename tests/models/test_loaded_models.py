"""Models users already have: a model object they loaded themselves, a torchao-quantised
checkpoint, a PEFT LoRA adapter, a hub revision and an attention implementation — each on the
tiny random-weight LLaVA, through the real transformers, torchao, peft and huggingface_hub."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from click.testing import CliRunner

from dpmtv.cli import main
from dpmtv.errors import ModelError
from dpmtv.models.fingerprint import IDENTITY_FIELDS_CHECKED, model_identity
from dpmtv.models.loading import load_model
from tests.cli.test_cli import _build_args


def _identity(loaded) -> dict:
    return model_identity(loaded.adapter, loaded.name_or_path)


def _answer(model, vector, image, *extra):
    args = ["answer", "--model", str(model), "--vector", str(vector), "--image", str(image)]
    return CliRunner().invoke(main, [*args, "--question", "What is shown?", "--max-new-tokens", "2", *extra])


@pytest.fixture(scope="module")
def int8_checkpoint(tiny_llava_path, tmp_path_factory):
    """The tiny LLaVA quantised to int8 weight-only by torchao and saved as a checkpoint."""
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import AutoModelForImageTextToText, AutoProcessor, TorchAoConfig

    folder = tmp_path_factory.mktemp("tiny-llava-int8")
    config = TorchAoConfig(Int8WeightOnlyConfig())
    model = AutoModelForImageTextToText.from_pretrained(tiny_llava_path, quantization_config=config)
    model.save_pretrained(folder)
    AutoProcessor.from_pretrained(tiny_llava_path).save_pretrained(folder)
    return folder


def _lora_adapter(base_path, folder, *, seed: int):
    """A PEFT LoRA adapter on q_proj/v_proj with random (non-zero) B, as a trained one has."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_pretrained(base_path)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(folder)
    return folder


# ---- a model the user constructed --------------------------------------------------------------
def test_load_model_takes_a_model_and_processor_the_user_loaded(tiny_llava_path, tiny_llava):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(tiny_llava_path, attn_implementation="eager")
    loaded = load_model(model, processor=AutoProcessor.from_pretrained(tiny_llava_path))
    assert loaded.model is model and not model.training
    assert loaded.name_or_path == str(tiny_llava_path)
    ours, theirs = _identity(tiny_llava), _identity(loaded)
    assert {f: ours[f] for f in IDENTITY_FIELDS_CHECKED} == {f: theirs[f] for f in IDENTITY_FIELDS_CHECKED}


def test_a_user_model_without_its_processor_or_with_loading_options_is_refused(tiny_llava):
    with pytest.raises(ModelError, match="needs processor="):
        load_model(tiny_llava.model)
    with pytest.raises(ModelError, match="uses the model as it was loaded"):
        load_model(tiny_llava.model, processor=tiny_llava.processor, dtype="bfloat16")
    with pytest.raises(ModelError, match="not a transformers model"):
        load_model(torch.nn.Linear(2, 2), processor=tiny_llava.processor)


# ---- quantised checkpoints (torchao int8 weight-only, on the CPU) -----------------------------
def test_a_quantised_checkpoint_builds_and_answers_and_is_fingerprinted(
    int8_checkpoint, tiny_llava_path, records_file, tmp_path
):
    out = tmp_path / "int8.safetensors"
    built = CliRunner().invoke(main, _build_args(int8_checkpoint, records_file, out))
    assert built.exit_code == 0, built.output
    model = json.loads(CliRunner().invoke(main, ["inspect", str(out), "--json"]).stdout)["model"]
    assert model["quantization"] == "torchao Int8WeightOnlyConfig"

    image = records_file.parent / "img" / "0.png"
    assert _answer(int8_checkpoint, out, image).exit_code == 0
    refused = _answer(tiny_llava_path, out, image)  # the unquantised weights are another model
    assert refused.exit_code == 1 and "differs" in refused.output and "Traceback" not in refused.output


def test_the_fingerprint_covers_the_quantised_integers(int8_checkpoint):
    loaded = load_model(int8_checkpoint)
    before = _identity(loaded)["attention_weights_sha256"]
    weight = loaded.adapter.o_projs[1].weight
    assert type(weight).__name__ == "Int8Tensor"
    with torch.no_grad():
        weight.qdata[0, 0] += 1  # one stored integer of one layer
    assert _identity(loaded)["attention_weights_sha256"] != before


# ---- PEFT LoRA adapters --------------------------------------------------------------------
def test_a_lora_adapter_is_merged_and_fingerprinted_as_part_of_the_model(
    tiny_llava_path, tiny_llava, records_file, tmp_path
):
    adapter = _lora_adapter(tiny_llava_path, tmp_path / "lora-a", seed=1)
    other = _lora_adapter(tiny_llava_path, tmp_path / "lora-b", seed=2)
    merged = load_model(tiny_llava_path, adapter_weights=adapter)
    base_q = tiny_llava.model.model.language_model.layers[0].self_attn.q_proj.weight
    merged_q = merged.model.model.language_model.layers[0].self_attn.q_proj.weight
    assert not torch.equal(base_q, merged_q)  # the adapter's update is in the weights
    assert _identity(merged)["config_sha256"] != _identity(tiny_llava)["config_sha256"]

    out = tmp_path / "lora.safetensors"
    built = CliRunner().invoke(
        main, _build_args(tiny_llava_path, records_file, out, "--adapter-weights", str(adapter))
    )
    assert built.exit_code == 0, built.output
    image = records_file.parent / "img" / "0.png"
    assert _answer(tiny_llava_path, out, image, "--adapter-weights", str(adapter)).exit_code == 0
    for wrong in ([], ["--adapter-weights", str(other)]):  # the base model, another adapter
        refused = _answer(tiny_llava_path, out, image, *wrong)
        assert refused.exit_code == 1 and "config_sha256" in refused.output, refused.output


def test_a_folder_that_is_not_a_lora_adapter_is_named(tiny_llava_path, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="not a PEFT adapter folder"):
        load_model(tiny_llava_path, adapter_weights=tmp_path / "empty")


# ---- hub revisions and attention implementations ------------------------------------------
def _fake_hub_cache(cache, repo, snapshots: dict[str, object], refs: dict[str, str]):
    """A local hub cache (huggingface_hub's layout) holding ``repo`` at several commits."""
    root = cache / f"models--{repo.replace('/', '--')}"
    for commit, folder in snapshots.items():
        shutil.copytree(folder, root / "snapshots" / commit)
    (root / "refs").mkdir(parents=True)
    for ref, commit in refs.items():
        (root / "refs" / ref).write_text(commit)


def test_revision_selects_the_hub_snapshot(tiny_llava_path, int8_checkpoint, tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    old, new = "a" * 40, "b" * 40
    _fake_hub_cache(
        tmp_path / "hub",
        "someone/tiny",
        {old: tiny_llava_path, new: int8_checkpoint},
        {"main": new, "v1": old},
    )
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    at_v1 = _identity(load_model("someone/tiny", revision="v1"))
    at_main = _identity(load_model("someone/tiny", revision="main"))
    assert at_v1["name_or_path"] == "someone/tiny" and at_v1["quantization"] is None
    assert at_v1["hub_id"] == "someone/tiny"  # loaded by hub id: the card's base_model
    assert at_main["quantization"] == "torchao Int8WeightOnlyConfig"
    assert (
        at_v1["attention_weights_sha256"]
        == _identity(load_model(tiny_llava_path))["attention_weights_sha256"]
    )
    with pytest.raises(ModelError, match="cannot find revision 'v9'"):
        load_model("someone/tiny", revision="v9")
    with pytest.raises(ModelError, match="is a local folder"):
        load_model(tiny_llava_path, revision="v1")


def test_attn_implementation_reaches_the_model(tiny_llava_path, records_file, tmp_path):
    assert (
        load_model(tiny_llava_path, attn_implementation="eager").model.config._attn_implementation == "eager"
    )
    out = tmp_path / "eager.safetensors"
    built = CliRunner().invoke(
        main, _build_args(tiny_llava_path, records_file, out, "--attn-implementation", "sdpa")
    )
    assert built.exit_code == 0, built.output
    refused = CliRunner().invoke(
        main,
        _build_args(
            tiny_llava_path, records_file, tmp_path / "nope.safetensors", "--attn-implementation", "nope"
        ),
    )
    assert refused.exit_code == 1 and "--attn-implementation nope" in refused.output
