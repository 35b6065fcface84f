"""Remote-code checkpoints through declarative adapter specs: a Qwen-VL-style model (fused
``c_attn``, ``c_proj``, ``transformer.h``) and a VILA-style LLaVA variant
(``llm.model.layers[i].self_attn.o_proj``), each saved with ``auto_map`` and its modeling file in
the folder and loaded offline with ``trust_remote_code=True``, pass the adapter contract."""

from __future__ import annotations

import pytest

from dpmtv.errors import ModelError
from dpmtv.models.loading import load_model
from tests.conftest import TEST_DEVICE
from tests.models.contract import AdapterContract
from tests.models.remote_code.build import (
    QWEN_SPEC,
    VILA_SPEC,
    build_qwen_style,
    build_vila_style,
    write_spec,
)


class RemoteCodeContract(AdapterContract):
    builder = staticmethod(build_qwen_style)
    spec: dict

    @pytest.fixture(scope="class")
    @classmethod
    def checkpoint(cls, tmp_path_factory):
        folder = tmp_path_factory.mktemp(cls.family)
        path = cls.builder(folder / "model")
        return path, write_spec(cls.spec, folder / "spec.json")

    @pytest.fixture(scope="class")
    @classmethod
    def loaded(cls, checkpoint):
        path, spec = checkpoint
        return load_model(path, device=TEST_DEVICE, adapter_spec=spec, trust_remote_code=True)

    def test_family_is_registered_for_its_model_type(self, loaded):
        assert loaded.adapter.family == self.spec["name"]

    def test_refused_without_trust_remote_code(self, checkpoint):
        path, spec = checkpoint
        with pytest.raises(ModelError, match="--trust-remote-code"):
            load_model(path, adapter_spec=spec)

    def test_refused_without_a_spec(self, checkpoint):
        with pytest.raises(ModelError, match="--model-spec spec.json"):
            load_model(checkpoint[0])


class TestQwenVLStyleSpec(RemoteCodeContract):
    family = "qwen_style"
    spec = QWEN_SPEC

    def test_renders_numbered_pictures_with_pad_tokens(self, loaded, prompts):
        text = loaded.adapter.render_text(prompts[1])
        assert text.endswith(
            "<|im_start|>user\nPicture 1: <img>" + "<imgpad>" * 4 + "</img>\n"
            "Which colour is the big shape here?<|im_end|>\n<|im_start|>assistant\n"
        )


class TestVilaStyleSpec(RemoteCodeContract):
    family = "vila_style"
    builder = staticmethod(build_vila_style)
    spec = VILA_SPEC


def test_cli_model_spec_and_trust_remote_code_options(tmp_path):
    """``--model-spec`` + ``--trust-remote-code`` reach the model loading of a command (here
    ``dpmtv select``); without the flag the command stops with one clear line, exit code 2."""
    from click.testing import CliRunner

    from dpmtv.cli import main
    from tests.selection.planted import write_public_records

    model = build_qwen_style(tmp_path / "model")
    spec = write_spec(QWEN_SPEC, tmp_path / "spec.json")
    public = write_public_records(tmp_path / "public", 8)
    args = [
        "select",
        "--model",
        str(model),
        "--model-spec",
        str(spec),
        "--public-data",
        str(public),
        "--out",
        str(tmp_path / "heads.json"),
        "--shots",
        "2",
        "--method",
        "scored",
        "--k",
        "2",
        "--quiet",
    ]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 1 and "--trust-remote-code" in refused.output
    result = CliRunner().invoke(main, [*args, "--trust-remote-code"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "heads.json").is_file()
    # the old name, kept one release: it warns and reaches the loading as --model-spec does
    old_name = [arg if arg != "--model-spec" else "--adapter" for arg in args]
    (tmp_path / "heads.json").unlink()
    deprecated = CliRunner().invoke(main, [*old_name, "--trust-remote-code"])
    assert deprecated.exit_code == 0, deprecated.output
    assert "warning: --adapter is deprecated" in deprecated.stderr and "use --model-spec" in deprecated.stderr
    assert (tmp_path / "heads.json").is_file()
    both = CliRunner().invoke(main, [*args, "--adapter", str(spec)])
    assert both.exit_code == 2 and "error: give --model-spec only" in both.stderr


@pytest.mark.parametrize("name", ["qwen-vl-chat.json", "vila.json"])
def test_shipped_example_specs_are_valid(name):
    from pathlib import Path

    from dpmtv.models.spec import load_spec

    spec = load_spec(Path(__file__).parents[2] / "docs" / "adapters" / name)
    assert "{i}" in spec.layer_path and "not yet run on real weights" in spec.note


def test_a_bad_spec_names_the_file_and_field(tmp_path):
    from dpmtv.errors import InputError
    from dpmtv.models.spec import load_spec

    bad = write_spec({**QWEN_SPEC, "images": {"kind": "video"}}, tmp_path / "bad.json")
    with pytest.raises(InputError, match="bad.json.*images.kind 'video' is not one of"):
        load_spec(bad)
    typo = write_spec({**QWEN_SPEC, "layer_pth": "x"}, tmp_path / "typo.json")
    with pytest.raises(InputError, match="typo.json.*layer_pth"):
        load_spec(typo)
