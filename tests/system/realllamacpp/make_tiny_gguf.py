"""Write a seeded tiny Llama target and its draft as GGUF files, offline.

    python make_tiny_gguf.py OUT_DIR

Runs in the llama.cpp tools venv (numpy) with the sdist's own gguf-py on the path, so the files
are written by the writer of the server's version. The draft is the target with seeded noise
on every weight: it agrees with the target often but not always, so the acceptance rate and the
per-position rates lie strictly between 0 and 1. Both share one SentencePiece-style vocabulary
(control tokens, the 256 byte tokens, a few hundred words and letters) so any text tokenizes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gguf
import numpy as np

SEED = 20261202
N_EMBD, N_HEAD, N_LAYER, N_FF, N_CTX = 64, 4, 2, 128, 4096
DRAFT_NOISE = 0.1  # draft weight = target weight + this * its std * N(0, 1)
LOGIT_SCALE = 4.0  # sharpens the output so greedy choices are stable, not ties
WORDS = (  # the pieces beyond letters and bytes, one token each
    "the a an of to in and is it that for on with as was at by be this from or have not are but "
    "one all we can her has there been if more when will would who so no out up into do than "
    "time only new some could these two may first then any like my now over such our man me "
    "even most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know "
    "while last might us great old year off come since against go came right used take three "
    "speculative decoding draft token model batch accept reject verify kernel memory cache"
)


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += [f"\u2581{w}" for w in dict.fromkeys(WORDS.split())]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    # SentencePiece merges the highest-scoring piece first: whole words win over letters.
    scores = [0.0] * (3 + 256) + [float(len(p)) for p in pieces]
    return tokens, scores, [int(t) for t in types]


def target_weights(n_vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    w = {
        "token_embd.weight": mat(n_vocab, N_EMBD) * np.float32(np.sqrt(N_EMBD)),
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": mat(n_vocab, N_EMBD) * np.float32(LOGIT_SCALE),
    }
    for i in range(N_LAYER):
        w |= {
            f"blk.{i}.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.attn_q.weight": mat(N_EMBD, N_EMBD),
            f"blk.{i}.attn_k.weight": mat(N_EMBD, N_EMBD),
            f"blk.{i}.attn_v.weight": mat(N_EMBD, N_EMBD),
            f"blk.{i}.attn_output.weight": mat(N_EMBD, N_EMBD),
            f"blk.{i}.ffn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": mat(N_FF, N_EMBD),
            f"blk.{i}.ffn_up.weight": mat(N_FF, N_EMBD),
            f"blk.{i}.ffn_down.weight": mat(N_EMBD, N_FF),
        }
    return w


def with_noise(weights: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, t in weights.items():
        if t.ndim == 1:  # norms stay 1
            out[name] = t.copy()
        else:
            out[name] = (t + DRAFT_NOISE * t.std() * rng.standard_normal(t.shape)).astype(np.float32)
    return out


def write(path: Path, name: str, weights: dict[str, np.ndarray], vocab: tuple) -> None:
    tokens, scores, types = vocab
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(len(tokens))
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    for tname, t in weights.items():
        w.add_tensor(tname, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    vocab = vocabulary()
    target = target_weights(len(vocab[0]), rng)
    write(out / "target.gguf", "specwatch-tiny-target", target, vocab)
    write(out / "draft.gguf", "specwatch-tiny-draft", with_noise(target, rng), vocab)
    print(json.dumps({"vocab": len(vocab[0]), "n_embd": N_EMBD, "n_layer": N_LAYER, "draft_noise": DRAFT_NOISE}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
