#!/usr/bin/env bash
# The benchmark suite on a GPU machine: real-size SmolVLM-256M and Qwen2-VL-2B geometries (random
# weights, built in code, no download) at their published image sizes in bfloat16, the input
# pipeline and the Ray worker scaling on the GPU, and the GPU's device check.
#   bash benchmarks/gpu_suite.sh            (from the repository root; ~10 minutes on one H200)
# Results: benchmarks/results/suite_gpu.json and suite_gpu.md (commit them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no GPU visible to torch'"
"$PY" -c "import ray" 2>/dev/null || "$PY" -m pip install -q "ray>=2.30"
"$PY" benchmarks/suite.py --tag gpu --device cuda --dtype bfloat16 \
    --only realsize,pipeline,latency,sigma \
    --realsize smolvlm-256m,qwen2-vl-2b --realsize-px smolvlm-256m=512,qwen2-vl-2b=448 \
    --realsize-shots 8 --realsize-chunks 16 --realsize-repeats 5 --pipeline-chunks 64
# Ray workers sharing the one GPU (fractional GPUs): throughput of 1 vs 2 workers
"$PY" benchmarks/suite.py --tag gpu --device cuda --dtype bfloat16 --only workers --worker-chunks 128
# Issue 25 on the GPU host (results beside the CPU ones, *_gpu.json):
# prepare workers feeding the real forward pass (waiting share) and 2-over-1 prepare throughput
"$PY" benchmarks/prepare_workers.py --device cuda --forward-ms 0 --chunks 64 --repeats 3 \
    --out benchmarks/results/prepare_workers_gpu.json
"$PY" benchmarks/prepare_workers.py --device cuda --forward-ms 5 --forward-ms-sweep 2,10,20 --chunks 64 --repeats 3 \
    --out benchmarks/results/prepare_workers_gpu_stub5ms.json
# peak RSS of a datasets folder, N = 4096 over N = 256 (images decoded when a chunk is prepared)
"$PY" benchmarks/datasets_memory.py --src after="$PWD/src" --out benchmarks/results/datasets_memory_gpu.json
# start-up of the commands that run no model (median of 10)
WORK=$(mktemp -d)
"$PY" -c "import sys; sys.path.insert(0, 'benchmarks'); from suite import write_photo_records; \
from pathlib import Path; write_photo_records(Path('$WORK'), 16, px=64)"
"$PY" -m dpmtv.cli build --model embedded --data "$WORK/records.jsonl" --heads layers:0 --epsilon 1 \
    --l2-clip-norm 1 --shots-per-chunk 4 --out "$WORK/v.safetensors" --quiet
"$PY" benchmarks/bench_startup.py --src after="$PWD/src" --artifact "$WORK/v.safetensors" \
    --out benchmarks/results/startup_gpu.json
# private pass throughput, fixed public shapes over one chunk per pass (deterministic CUDA kernels)
"$PY" benchmarks/private_batches.py --device cuda --dtype bfloat16 --smolvlm-px 512 --smolvlm-chunks 32 \
    --smolvlm-shots 8 --chunks 128 --repeats 3 --out benchmarks/results/private_batches_gpu.json
# the bitwise chunk-independence tests (one chunk per pass and fixed shapes) and the prepare-worker
# tests on the device
DPMTV_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:randomly tests/forward/test_chunk_independence.py \
    tests/forward/test_fixed_shapes.py tests/forward/test_prepare_workers.py tests/forward/test_prefetch.py
