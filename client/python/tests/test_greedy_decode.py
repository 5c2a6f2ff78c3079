"""examples/greedy_decode.py against a real server: a small random Llama checkpoint
WITH embedding, final norm and LM head (tests/golden/models hold blocks only) is
written here, served, and decoded greedily by the example (embedding and head in
numpy, blocks through one KV-cache session per prompt, all advanced in one call per
step); each prompt's ids must equal those of the same model run in full by PyTorch
at every step (tests/golden/make_block_golden.py's Hugging Face Llama layer,
recomputing the whole sequence each step), for one prompt and for a batch of prompts
of different lengths."""
import json
import os
import subprocess
import sys

import numpy as np
import torch

from conftest import GOLDEN_DIR, SOURCE_DIR, ServerProcess, stop_cleanly

EXAMPLE = os.path.join(SOURCE_DIR, "client", "python", "examples", "greedy_decode.py")
NAME = "tiny-lm"
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_hidden_layers": 2, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "max_position_embeddings": 128, "vocab_size": 96,
    "tie_word_embeddings": False, "torch_dtype": "float32",
}
PROMPT = [3, 14, 15, 92, 65, 35]
# A batch: different lengths, so the prefill is ragged.
PROMPTS = [PROMPT, [27, 18], [81, 82, 84, 59, 4, 52, 35, 36, 2], [7]]
STEPS = 8


# make_block_golden.py's torch Llama layer, RoPE and safetensors writer; imported as
# the module it is (with golden_common.py beside it), which runs nothing.
sys.path.insert(0, GOLDEN_DIR)
import make_block_golden as HF  # noqa: E402


def write_checkpoint(directory):
    """config.json + model.safetensors (float32); returns the torch weights."""
    os.makedirs(directory)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    layers, _ = HF.llama_family_weights(CONFIG, with_embeddings=False)
    g = torch.Generator().manual_seed(11)
    V, D = CONFIG["vocab_size"], CONFIG["hidden_size"]
    extra = {"model.embed_tokens.weight": torch.randn(V, D, generator=g),
             "model.norm.weight": torch.randn(D, generator=g) * 0.3 + 1.0,
             "lm_head.weight": torch.randn(V, D, generator=g) / D ** 0.5}
    named = [(f"model.layers.{i}.{k}", v) for i, w in enumerate(layers) for k, v in w.items()]
    tensors = [(k, "F32", v.shape, HF.to_storage(v, "F32")[1])
               for k, v in named + list(extra.items())]
    HF.write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    return layers, extra


def torch_greedy(layers, extra, prompt):
    """The whole model over the whole sequence at every step, as transformers'
    LlamaForCausalLM without a cache; returns the ids and the smallest gap between
    the best and second-best logit (how clearly each choice was made)."""
    ids, gaps = list(prompt), []
    for _ in range(STEPS):
        T = len(ids)
        x = extra["model.embed_tokens.weight"][torch.tensor(ids)][None]
        x, _ = HF.reference(CONFIG, layers, x, [T], torch.arange(T)[None], True, 0,
                            CONFIG["num_hidden_layers"])
        x = HF.llama_rms_norm(x, extra["model.norm.weight"], CONFIG["rms_norm_eps"])
        logits = HF.linear(x[0, -1], extra["lm_head.weight"])
        top = torch.topk(logits, 2).values
        gaps.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], min(gaps)


def run_example(process, checkpoint, prompts):
    prompt_flags = [a for p in prompts for a in ("--prompt", ",".join(map(str, p)))]
    run = subprocess.run(
        [sys.executable, EXAMPLE, "--target", process.target, "--checkpoint",
         checkpoint, *prompt_flags, "--steps", str(STEPS)],
        capture_output=True, text=True, timeout=120, env=os.environ)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout.splitlines()


def session_metrics(process):
    return (process.metric_sum("layerserve_session_tokens_total", phase="prefill"),
            process.metric_sum("layerserve_session_tokens_total", phase="decode"),
            process.metric_sum("layerserve_requests_total", method="BlockForward"))


def test_greedy_decode_example_matches_pytorch(tmp_path):
    repository = tmp_path / "models"
    checkpoint = str(repository / NAME)
    layers, extra = write_checkpoint(checkpoint)
    wants = []
    for prompt in PROMPTS:
        want, gap = torch_greedy(layers, extra, prompt)
        # Clear choices, so float32 summation order cannot flip one.
        assert gap > 1e-3, (prompt, gap)
        wants.append(want)
    # A sequence that is not one token repeated.
    assert len(set(wants[0])) > 1, wants[0]

    process = ServerProcess(f"--model-repository={repository}", "--weight-dtype=float32")
    try:
        lines = run_example(process, checkpoint, [PROMPT])
        assert lines[-1] == "generated: " + " ".join(map(str, wants[0]))
        # Prefill of the prompt, then one call per generated token but the last.
        assert session_metrics(process) == (len(PROMPT), STEPS - 1, STEPS)

        lines = run_example(process, checkpoint, PROMPTS)
        assert lines[-len(PROMPTS):] == [
            "generated: " + " ".join(map(str, want)) for want in wants]
        # Still one call per step, for every prompt at once. The server counts a
        # session's one-token addition as decode: the prompt [7] too.
        assert session_metrics(process) == (
            len(PROMPT) + sum(len(p) for p in PROMPTS if len(p) > 1),
            STEPS - 1 + len(PROMPTS) * (STEPS - 1) + 1, 2 * STEPS)
        assert process.metric_value("layerserve_active_sessions") == 0  # Closed.
    finally:
        stop_cleanly(process)
