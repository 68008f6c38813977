#!/usr/bin/python3
"""Writes the SentencePiece fixtures the tokenizer tests compare against, with Debian's
python3-sentencepiece (the library axonn links):

  sentencepiece.model       a small BPE model trained on sentencepiece_train.txt with Llama 2's
                            options (byte fallback, split digits, identity normalization)
  sentencepiece_cases.json  {"texts": [...], "ids": [[...], ...], "round_trip": [bool, ...],
                             "vocab_size": n, "eos": id}

and the seed corpus of tests/fuzz/fuzz_tokenizer_json: each published tokenizer.json trimmed
to its 256 byte tokens, its first 300 merges and its added tokens, ids renumbered densely.

The texts are bpe_cases.json's (make_fixtures.mjs writes them). Rerun from the repository root:
  /usr/bin/python3 tests/tokenizer_fixtures/make_fixtures.py
"""
import io
import json
import os

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))


def write_fuzz_seeds():
    corpus = os.path.join(HERE, "..", "fuzz", "corpus", "fuzz_tokenizer_json")
    os.makedirs(corpus, exist_ok=True)
    for name in ("gpt2", "llama3", "qwen2"):
        with open(os.path.join(HERE, f"{name}.tokenizer.json"), encoding="utf-8") as f:
            doc = json.load(f)
        model = doc["model"]
        by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
        vocab = {tok: i for i, (tok, _) in enumerate(by_id[:256])}
        merges = []
        for m in model["merges"]:
            left, right = m.split(" ") if isinstance(m, str) else m
            if left in vocab and right in vocab and left + right in model["vocab"]:
                vocab.setdefault(left + right, len(vocab))
                merges.append(m)
            if len(merges) == 300:
                break
        model["vocab"], model["merges"] = vocab, merges
        added = doc["added_tokens"][:8]
        for k, a in enumerate(added):
            a["id"] = len(vocab) + k
        doc["added_tokens"] = added
        with open(os.path.join(corpus, f"{name}-trimmed.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False)


def main():
    write_fuzz_seeds()
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        input=os.path.join(HERE, "sentencepiece_train.txt"), model_writer=model, model_type="bpe",
        vocab_size=1000, character_coverage=1.0, byte_fallback=True, split_digits=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        allow_whitespace_only_pieces=True, user_defined_symbols=["<|user|>"], num_threads=1,
        max_sentence_length=100000, minloglevel=2)
    with open(os.path.join(HERE, "sentencepiece.model"), "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    with open(os.path.join(HERE, "bpe_cases.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"] + ["<|user|>hello</s><s>"]
    ids = [sp.encode(t) for t in texts]
    out = {
        "texts": texts,
        "ids": ids,
        "round_trip": [sp.decode(i) == t for t, i in zip(texts, ids)],
        "vocab_size": sp.get_piece_size(),
        "eos": sp.eos_id(),
    }
    with open(os.path.join(HERE, "sentencepiece_cases.json"), "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write(f'  "texts": {json.dumps(texts, ensure_ascii=False)},\n')
        f.write('  "ids": [\n' + ",\n".join("    " + json.dumps(i) for i in ids) + "\n  ],\n")
        f.write(f'  "round_trip": {json.dumps(out["round_trip"])},\n')
        f.write(f'  "vocab_size": {out["vocab_size"]},\n  "eos": {out["eos"]}\n}}\n')
    print(f"{len(texts)} texts, vocab {out['vocab_size']}, eos {out['eos']}, "
          f"{sum(out['round_trip'])} round trips")


if __name__ == "__main__":
    main()
