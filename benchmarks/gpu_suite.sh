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
