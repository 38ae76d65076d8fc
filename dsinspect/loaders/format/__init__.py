"""The stored format: version manifests, the canonical encoding and 128-bit row hashes, Arrow types as
JSON, field roles, .npy array values, and the rules for every name that becomes part of a path.

Pure: values and bytes in, values out; no storage I/O (the one file it reads is the bpe-openai package's
encoding data, in `tokenizer_docs`). May import only the base modules (`dsinspect.errors`, `extras`).

Internal: use it through `dsinspect.loaders` (or `dsinspect`); its modules may change without notice.
"""
