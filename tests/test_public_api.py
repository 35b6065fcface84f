import dpmtv

PINNED = [
    "BuildResult",
    "BuildSettings",
    "Example",
    "HeadSet",
    "LoadedModel",
    "PatchMode",
    "Prompt",
    "Record",
    "TaskVector",
    "__version__",
    "answer_queries",
    "apply",
    "build_task_vector",
    "capture_last_token",
    "errors",
    "load_model",
    "load_records",
    "load_task_vector",
    "overwrite_heads",
    "parse_head_spec",
    "save_task_vector",
    "supported_families",
]


def test_public_api_is_pinned():
    assert sorted(dpmtv.__all__) == sorted(PINNED)


def test_every_public_name_resolves():
    for name in dpmtv.__all__:
        assert getattr(dpmtv, name) is not None
