"""`dpmtv serve --ray`: two Ray Serve replicas of the app on a real local Ray cluster, behind
Serve's real HTTP proxy on a free loopback port."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from dpmtv.errors import DistributedError, ParameterError
from dpmtv.serve import ServeSettings, create_app
from dpmtv.serve.ray_replicas import APP_NAME, REPLICA_HEADER, ReplicaSpec, deploy_replicas
from tests.serve._live import free_port, live_server
from tests.serve.conftest import chat_body

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
KEY = "replica-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
REQUEST_TIMEOUT_S = 60.0  # per request: a hung request fails the test instead of hanging it


@pytest.fixture(scope="module")
def replicas(tiny_llava_path, served_vectors):
    """Two replicas with an API key; Serve (and Ray, when started here) torn down after."""
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve")
    started_ray = not ray.is_initialized()
    if started_ray:  # replicas import this checkout's dpmtv
        paths = [str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]
        runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}}
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", runtime_env=runtime_env)
    vectors = tuple(sorted(served_vectors.items()))
    settings = ServeSettings(api_key=KEY)
    port = free_port()
    try:
        deploy_replicas(
            ReplicaSpec(str(tiny_llava_path), vectors, settings, threads=1),
            replicas=2,
            host="127.0.0.1",
            port=port,
            log_level="warning",  # no access-log line per request in the test's output
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        if started_ray:
            ray.shutdown()


def _ask(base: str, body: dict, headers=AUTH) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", json=body, headers=headers, timeout=REQUEST_TIMEOUT_S)


def _body(index: int, bare: str = "colour") -> dict:
    model = ("colour", "shape", bare)[index % 3]
    return chat_body(model, image_seed=index % 5, max_tokens=4, temperature=0)


def test_requests_reach_both_replicas_and_answer_as_one_process(replicas, served):
    bodies = [_body(index, served.name) for index in range(24)]
    with ThreadPoolExecutor(8) as pool:
        through_ray = list(pool.map(lambda body: _ask(replicas, body), bodies))
    assert [r.status_code for r in through_ray] == [200] * len(bodies), through_ray[0].text
    assert len({r.headers[REPLICA_HEADER] for r in through_ray}) == 2
    with live_server(create_app(served, ServeSettings(api_key=KEY))) as single:
        alone = [_ask(single, body) for body in bodies]
    answers = [[c["message"]["content"] for c in r.json()["choices"]] for r in through_ray]
    assert answers == [[c["message"]["content"] for c in r.json()["choices"]] for r in alone]


def test_auth_and_host_checks_hold_through_the_proxy(replicas):
    refused = _ask(replicas, _body(0), headers={})
    assert refused.status_code == 401
    assert refused.json()["error"]["message"]
    foreign = _ask(replicas, _body(0), headers={"Host": "evil.example"})
    assert foreign.status_code in (401, 403), foreign.text
    assert httpx.get(f"{replicas}/healthz", timeout=REQUEST_TIMEOUT_S).json()["auth_required"] is True


def _replica_actor_names(ray) -> list[str]:
    """The live replicas' actor names (Serve names them ``SERVE_REPLICA::app#deployment#id``)."""
    named = ray.util.list_named_actors(all_namespaces=True)
    prefix = f"SERVE_REPLICA::{APP_NAME}#"
    return sorted(actor["name"] for actor in named if actor["name"].startswith(prefix))


def test_a_replica_killed_under_load_is_replaced_and_no_request_hangs(replicas):
    import ray
    from ray import serve

    before = _replica_actor_names(ray)
    assert len(before) == 2, before
    answered = threading.Semaphore(0)

    def one(index: int) -> httpx.Response | Exception:
        try:
            return _ask(replicas, _body(index))
        except httpx.HTTPError as exc:  # a timeout lands here: counted as a hang below
            return exc
        finally:
            answered.release()

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(one, index) for index in range(64)]
        for _ in range(8):  # under load: the first answers are back, most requests are not
            answered.acquire()
        ray.kill(ray.get_actor(before[0], namespace="serve"), no_restart=True)
        results = [future.result() for future in futures]
    hung = [r for r in results if isinstance(r, httpx.TimeoutException)]
    assert not hung
    for result in results:
        assert isinstance(result, httpx.Response), repr(result)
        assert result.status_code == 200 or result.status_code >= 500, result.text
        assert result.content  # an error says what happened
    assert any(isinstance(r, httpx.Response) and r.status_code == 200 for r in results)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = serve.status().applications[APP_NAME].deployments["DpmtvReplica"].replica_states
        names = _replica_actor_names(ray)
        if running.get("RUNNING", 0) == 2 and before[0] not in names and len(names) == 2:
            break
        time.sleep(0.5)
    assert before[0] not in _replica_actor_names(ray)
    assert len(_replica_actor_names(ray)) == 2
    assert _ask(replicas, _body(1)).status_code == 200


def test_a_serve_already_running_elsewhere_is_refused_not_ignored(replicas):
    from dpmtv.serve.ray_replicas import _start_proxy, serve_logging_config

    with pytest.raises(ParameterError, match=r"already runs on this cluster .* not --host 127.0.0.1"):
        _start_proxy("127.0.0.1", free_port(), 30.0, serve_logging_config("warning"))


def test_a_replica_whose_vector_fails_its_check_does_not_start(
    replicas, tiny_llava_path, served_vectors, tmp_path
):
    from ray import serve

    bad = tmp_path / "bad.safetensors"
    shutil.copy(served_vectors["colour"], bad)
    data = bytearray(bad.read_bytes())
    data[-1] ^= 0x01  # the tensor's last byte: its hash no longer matches
    bad.write_bytes(bytes(data))
    spec = ReplicaSpec(str(tiny_llava_path), (("bad", bad),), ServeSettings(api_key=KEY), threads=1)
    port = int(replicas.rsplit(":", 1)[1])
    try:
        with pytest.raises(DistributedError, match=r"did not start: .*vector 'bad' refused"):
            deploy_replicas(
                spec, replicas=1, host="127.0.0.1", port=port, cpus_per_replica=0, app_name="refused"
            )
    finally:
        serve.delete("refused")
    assert _ask(replicas, _body(0)).status_code == 200  # the running app is untouched


def test_replicas_no_node_has_room_for_fail_within_the_bound_instead_of_waiting(
    replicas, tiny_llava_path, served_vectors
):
    """Serve's own run waits for ever for a replica it cannot place; the deployment gives up after
    ready_timeout_s, says so, deletes what it started and leaves the running app untouched."""
    from ray import serve

    vectors = tuple(sorted(served_vectors.items()))
    spec = ReplicaSpec(str(tiny_llava_path), vectors, ServeSettings(api_key=KEY), threads=1)
    port = int(replicas.rsplit(":", 1)[1])
    with pytest.raises(DistributedError, match=r"did not start: .*fewer than 1 replicas running after 20 s"):
        deploy_replicas(
            spec,
            replicas=1,
            host="127.0.0.1",
            port=port,
            cpus_per_replica=64,  # the test cluster has 2
            app_name="unplaceable",
            ready_timeout_s=20,
        )
    assert "unplaceable" not in serve.status().applications
    assert _ask(replicas, _body(0)).status_code == 200


def test_a_stream_passes_through_the_proxy_with_the_same_answer(replicas):
    body = _body(1)
    whole = _ask(replicas, body).json()["choices"][0]["message"]["content"]
    with httpx.stream(
        "POST",
        f"{replicas}/v1/chat/completions",
        json={**body, "stream": True},
        headers=AUTH,
        timeout=REQUEST_TIMEOUT_S,
    ) as response:
        assert response.status_code == 200 and response.headers[REPLICA_HEADER]
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event)["choices"] for event in events[:-1]]
    assert "".join(c[0]["delta"].get("content") or "" for c in chunks if c) == whole
