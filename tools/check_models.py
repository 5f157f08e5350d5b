"""Run thunder_overlay.check_traces on the traces of real model shapes, inference and with gradients.

    python tools/check_models.py [--only GPT2 T5 ...]

Models are built from configs with random weights, 2 layers, small widths: HF GPT2, Llama, Mistral, Gemma,
Qwen2, BERT, BART, T5 (transformers), litgpt configs (thunder's test copy of litgpt) and torchvision's
resnet18 where torchvision is installed. A row says OK with the check's counts, FAIL with the checker's
message, or that thunder itself could not jit the model (not the checker's concern). Exit status 1 when
a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time


def hf_models():
    import transformers as t

    small = dict(vocab_size=128, num_hidden_layers=2, num_attention_heads=4, use_cache=False)
    decoder = dict(hidden_size=64, intermediate_size=128, num_key_value_heads=2, head_dim=16,
                   max_position_embeddings=64, **small)
    yield "GPT2", t.GPT2LMHeadModel, t.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                                  use_cache=False)
    for kind in ("Llama", "Mistral", "Gemma", "Qwen2"):
        yield kind, getattr(t, f"{kind}ForCausalLM"), getattr(t, f"{kind}Config")(**decoder)
    yield "BERT", t.BertModel, t.BertConfig(hidden_size=64, intermediate_size=128, max_position_embeddings=64, **small)
    yield "BART", t.BartModel, t.BartConfig(vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2,
                                            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                            decoder_ffn_dim=128, max_position_embeddings=64, use_cache=False)
    yield "T5", t.T5Model, t.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                      use_cache=False)


def litgpt_config(name: str):
    """A litgpt config (thunder's test copy of litgpt) at 2 layers and small widths."""
    from thunder.tests import litgpt_model

    groups = 2 if name in ("Llama-3-8B", "gemma-2b") else 4
    return litgpt_model.Config.from_name(name, n_layer=2, n_embd=64, n_head=4, n_query_groups=groups, head_size=16,
                                         intermediate_size=128, padded_vocab_size=128, vocab_size=128, block_size=64)


LITGPT = ("llama2-like", "gpt-neox-like", "pythia-14m", "falcon-7b", "phi-2", "gemma-2b", "Llama-3-8B")


def check(name: str, build, grad: bool) -> bool:
    import thunder
    from thunder_overlay import check_traces

    start = time.perf_counter()
    model, args, kwargs = build()
    model.train(grad).requires_grad_(grad)
    try:
        jfn = thunder.jit(model)
        out = jfn(*args, **kwargs)
        if grad:
            for field in ("logits", "last_hidden_state"):  # HF model outputs
                out = getattr(out, field, out)
            out.float().square().mean().backward()
    except Exception as e:
        print(f"{name:30s} thunder cannot jit it: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
        return True
    try:
        report = check_traces(jfn)
    except Exception as e:
        print(f"{name:30s} FAIL {str(e).splitlines()[0][:300]}")
        return False
    print(f"{name:30s} OK   {report.traces} traces, {report.rerun} symbols re-run ({time.perf_counter() - start:.0f} s)")
    return True


def builders():
    import torch

    ids = torch.randint(0, 128, (1, 8))
    for name, cls, config in hf_models():
        extra = {"decoder_input_ids": ids} if name in ("BART", "T5") else {}
        yield name, lambda cls=cls, config=config, extra=extra: (cls(config), (ids,), extra)
    from thunder.tests import litgpt_model

    for config_name in LITGPT:
        config = litgpt_config(config_name)
        yield f"litgpt {config_name}", lambda config=config: (litgpt_model.GPT(config), (ids,), {})
    try:
        import torchvision
    except ImportError:
        print("(torchvision is not installed: resnet18 not checked)")
        return
    yield "resnet18", lambda: (torchvision.models.resnet18(num_classes=10), (torch.randn(2, 3, 32, 32),), {})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="model names (as printed) to check")
    args = parser.parse_args()
    import torch
    import thunder_overlay

    print(f"thunder-overlay: {thunder_overlay.status()['state']}")
    ok = True
    for name, build in builders():
        if args.only and name not in args.only:
            continue
        for grad in (False, True):
            torch.manual_seed(0)
            ok &= check(f"{name}{' grad' if grad else ''}", build, grad)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
