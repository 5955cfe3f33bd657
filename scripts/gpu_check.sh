#!/usr/bin/env bash
# The GPU checks, as one run on a machine with CUDA (see docs/engine.rst, "GPU check"):
# the engine and worker-loop tests with mstar on CUDA against the CPU transformers oracle,
# then a bf16 throughput smoke test on a random model of the built-in model's shape.
# Expects a python3 with torch+transformers; extra wheels (pydantic, structlog, ...) may be
# given as a folder in $1 and are installed without network.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then python3 -m pip install -q --no-index --no-deps "$1"/*.whl; fi
export PYTHONPATH=. HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -m pytest -q -p no:cacheprovider --device cuda test/test_parity_models.py \
    test/test_engine_scheduler.py test/test_engine_sampling.py test/test_worker_loop.py
python3 - <<'PY'
import tempfile, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers
from mstar.engine.llm_engine import LLMEngine
from mstar.engine.sampling_params import SamplingParams
from mstar.settings import WorkerSettings

# A random model with SmolLM2-135M's shape; the tokenizer only has to exist.
config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                     tie_word_embeddings=True, architectures=["LlamaForCausalLM"])
path = tempfile.mkdtemp()
LlamaForCausalLM(config).save_pretrained(path)
tok = Tokenizer(models.WordLevel({"<unk>": 0, "<eos>": 1}, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>").save_pretrained(path)
for device, dtype, batch in (("cuda", "bfloat16", 32), ("cuda", "bfloat16", 256),
                             ("cuda", "float32", 32), ("cpu", "float32", 32)):
    engine = LLMEngine(WorkerSettings(model=path, device=device, dtype=dtype, num_kv_blocks=4096))
    params = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    for warm in (True, False):
        n = 4 if warm else batch
        for i in range(n):
            engine.add_request(f"{warm}-{i}", [2 + (i * 7 + j) % 40000 for j in range(32)], params)
        start, tokens = time.perf_counter(), 0
        while engine.has_unfinished_requests():
            tokens += sum(len(o.new_token_ids) for o in engine.step())
        if not warm:
            print(f"{device} {dtype} batch={batch}: {tokens / (time.perf_counter() - start):.0f} tok/s")
PY
