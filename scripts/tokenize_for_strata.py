#!/usr/bin/env python3
"""Tokenizes text or JSON Lines into a token file strata reads (docs/data.md).

strata reads token ids made beforehand. A model with its own tokenizer (any Hugging Face folder:
strata.model.from_pretrained or strata.model.config) needs its ids made by that tokenizer; this
script makes them and writes llm.c's .bin, the format strata reads without a "dtype":

  header  256 x int32: magic 20240520, version 1, token count (uint16 ids), or magic 20240801,
          version 7, token count (uint32 ids, for vocabularies past 65,536), the rest 0
  ids     the tokens, little-endian

Inputs are documents: a .jsonl (or .ndjson) file gives one document per line, its "text" field
(--field to take another); any other file is one document, whole. Each document is encoded as
the model's tokenizer encodes it by default (with the special tokens it adds itself, such as
Llama's BOS) and followed by the tokenizer's EOS token, so documents are separated as the model
was trained to see them (llm.c's dev/data scripts and Megatron's --append-eod do the same).

  python3 scripts/tokenize_for_strata.py --tokenizer DIR --output train.bin data/*.jsonl
  python3 scripts/tokenize_for_strata.py --tokenizer bytes --output train.bin notes.jsonl

DIR is a folder with the model's tokenizer as save_pretrained writes it (tokenizer.json, read
with the `tokenizers` package; a folder with only a SentencePiece tokenizer.model is read with
`transformers`), or a tokenizer.json itself. `--tokenizer bytes` is strata's byte tokenizer (the
built-in GPT's: id = byte, models/data/byte_tokenizer.h); it has no EOS, so each document ends
with a newline instead. Then point strata at the file:

  "strata": {"data": {"path": "train.bin"}}
"""

import argparse
import json
import os
import sys
from array import array
from pathlib import Path

LLMC_U16 = (20240520, 1)  # llm.c's GPT-2 files: uint16 ids
LLMC_U32 = (20240801, 7)  # llm.c's Llama 3 files: uint32 ids
HEADER_INTS = 256
BATCH_DOCUMENTS = 1000  # documents encoded per call


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Tokenize text or JSON Lines into an llm.c .bin token file for strata.")
    parser.add_argument("inputs", nargs="+", type=Path,
                        help="text files (one document each) or .jsonl/.ndjson files (one "
                             "document per line)")
    parser.add_argument("--tokenizer", required=True,
                        help="the model's tokenizer folder (or its tokenizer.json), or 'bytes'")
    parser.add_argument("--output", required=True, type=Path,
                        help="the .bin to write (llm.c's format)")
    parser.add_argument("--field", default="text",
                        help="the JSON Lines field holding each document (default: text)")
    parser.add_argument("--eos-id", type=int, default=None,
                        help="the id that ends each document, where the tokenizer names no EOS")
    args = parser.parse_args(argv)
    if args.output.suffix != ".bin":
        parser.error(f"--output {args.output}: strata reads llm.c's format from a .bin file")
    for path in args.inputs:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    return args


def documents(paths, field):
    """Yields each document's text: a JSON Lines file's `field` per line, any other file whole."""
    for path in paths:
        if path.suffix not in (".jsonl", ".ndjson"):
            yield path.read_text(encoding="utf-8")
            continue
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    sys.exit(f"{path}:{number}: not JSON ({error})")
                if not isinstance(record, dict) or not isinstance(record.get(field), str):
                    sys.exit(f"{path}:{number}: no string field \"{field}\" (choose it with "
                             "--field)")
                yield record[field]


def needed(package, name):
    """`name` from `package`, or an exit naming the package to install."""
    try:
        return getattr(__import__(package), name)
    except ImportError:
        sys.exit(f"this tokenizer needs the Python package '{package}' (pip install {package})")


class ByteTokenizer:
    """strata's byte tokenizer: id = byte of the UTF-8 text; a newline ends each document."""
    vocab_size = 256
    eos_id = None

    def encode(self, texts):
        return [list(t.encode("utf-8")) + ([] if t.endswith("\n") else [10]) for t in texts]


class FastTokenizer:
    """A tokenizer.json, read with the `tokenizers` package."""

    def __init__(self, path, eos_id):
        Tokenizer = needed("tokenizers", "Tokenizer")
        self.tokenizer = Tokenizer.from_file(str(path))
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.eos_id = eos_id if eos_id is not None else self._eos_from_config(path.parent)

    def _eos_from_config(self, folder):
        config = folder / "tokenizer_config.json"
        if not config.is_file():
            return None
        eos = json.loads(config.read_text()).get("eos_token")
        if isinstance(eos, dict):
            eos = eos.get("content")
        return self.tokenizer.token_to_id(eos) if isinstance(eos, str) else None

    def encode(self, texts):
        return [encoding.ids for encoding in self.tokenizer.encode_batch(list(texts))]


class AutoTokenizer:
    """A folder transformers reads (a SentencePiece tokenizer.model without tokenizer.json)."""

    def __init__(self, folder, eos_id):
        Auto = needed("transformers", "AutoTokenizer")
        self.tokenizer = Auto.from_pretrained(str(folder))
        self.vocab_size = len(self.tokenizer)
        self.eos_id = eos_id if eos_id is not None else self.tokenizer.eos_token_id

    def encode(self, texts):
        return self.tokenizer(list(texts))["input_ids"]


def open_tokenizer(name, eos_id):
    if name == "bytes":
        return ByteTokenizer()
    path = Path(name)
    if path.is_file():
        tokenizer = FastTokenizer(path, eos_id)
    elif (path / "tokenizer.json").is_file():
        tokenizer = FastTokenizer(path / "tokenizer.json", eos_id)
    elif path.is_dir():
        tokenizer = AutoTokenizer(path, eos_id)
    else:
        sys.exit(f"--tokenizer {name}: no such folder or file (give the model's folder, as "
                 "save_pretrained writes it, or 'bytes')")
    if tokenizer.eos_id is None:
        sys.exit(f"--tokenizer {name}: names no EOS token to end each document; give its id "
                 "with --eos-id")
    return tokenizer


def batches(items, size):
    batch = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_llmc(output, tokenizer, texts):
    """Writes OUTPUT.partial, the header and then the ids batch by batch, the count going into the
    header last, and renames it OUTPUT once whole: a failed run leaves no file strata would read.
    """
    partial = output.with_name(output.name + ".partial")
    try:
        result = write_llmc_to(partial, tokenizer, texts)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, output)
    return result


def write_llmc_to(output, tokenizer, texts):
    wide = tokenizer.vocab_size > 1 << 16
    magic, version = LLMC_U32 if wide else LLMC_U16
    ids = array("I" if wide else "H")
    assert ids.itemsize == (4 if wide else 2)
    count, document_count = 0, 0
    with output.open("wb") as out:
        array("i", [0] * HEADER_INTS).tofile(out)
        for batch in batches(texts, BATCH_DOCUMENTS):
            del ids[:]
            for encoded in tokenizer.encode(batch):
                ids.extend(encoded)
                if tokenizer.eos_id is not None:
                    ids.append(tokenizer.eos_id)
            document_count += len(batch)
            count += len(ids)
            if sys.byteorder == "big":
                ids.byteswap()
            ids.tofile(out)
        if count >= 1 << 31:
            sys.exit(f"{output}: {count} tokens do not fit llm.c's int32 count; write the "
                     "inputs to several files")
        header = array("i", [magic, version, count] + [0] * (HEADER_INTS - 3))
        if sys.byteorder == "big":
            header.byteswap()
        out.seek(0)
        header.tofile(out)
    return count, document_count, "uint32" if wide else "uint16"


def main(argv):
    args = parse_args(argv)
    tokenizer = open_tokenizer(args.tokenizer, args.eos_id)
    count, document_count, width = write_llmc(args.output, tokenizer,
                                              documents(args.inputs, args.field))
    print(f"wrote {count} tokens of {document_count} documents to {args.output} (llm.c .bin, "
          f"{width} ids, vocabulary {tokenizer.vocab_size}); train on it with "
          f"\"strata\": {{\"data\": {{\"path\": \"{args.output}\"}}}}")


if __name__ == "__main__":
    main(sys.argv[1:])
