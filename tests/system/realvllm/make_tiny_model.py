"""Build a tiny, seeded, randomly initialised Llama with an offline-trained tokenizer.

Runs inside the vLLM venv (needs torch, transformers, tokenizers).  No hub access:
the tokenizer is a BPE trained on text that is on every Debian/CPython machine
(the first 200 stdlib *.py files and /usr/share/common-licenses/*).

The tokenizer uses a Metaspace pre-tokenizer/decoder rather than byte-level BPE:
every token decodes to whole Unicode text, so whatever a random model emits
streams at once (byte-level BPE makes vLLM's incremental detokenizer hold back
text on dangling partial UTF-8 bytes).

usage: python make_tiny_model.py OUT_DIR
"""

import glob
import json
import os
import sys
import sysconfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 20260510
VOCAB = 4096
HIDDEN = 256
LAYERS = 4
HEADS = 4


def corpus_files():
    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:200]
    files += sorted(glob.glob("/usr/share/common-licenses/*"))
    return [f for f in files if os.path.isfile(f)]


def build_tokenizer(out):
    files = corpus_files()
    if len(files) < 20:
        raise SystemExit(f"too little local text to train a tokenizer ({len(files)} files)")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    alphabet = [chr(c) for c in range(33, 127)] + ["\u2581", "\n", "\t"]
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=alphabet,
        limit_alphabet=200,
        show_progress=False,
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=2048,
    )
    fast.chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    fast.save_pretrained(out)
    return fast, len(files)


def build_model(out, fast):
    torch.manual_seed(SEED)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN * 4,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        c = json.load(f)
    c.setdefault("torch_dtype", "bfloat16")
    c.setdefault("dtype", "bfloat16")
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
    return sum(p.numel() for p in model.parameters())


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    fast, nfiles = build_tokenizer(out)
    params = build_model(out, fast)
    print(f"tokenizer: BPE vocab {VOCAB} trained on {nfiles} local files")
    print(f"tiny llama: {params} params, {LAYERS} layers, hidden {HIDDEN}, bf16, seed {SEED}")


if __name__ == "__main__":
    main()
