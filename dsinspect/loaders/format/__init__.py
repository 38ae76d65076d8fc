"""The stored format: version manifests, the canonical encoding and 128-bit row hashes, Arrow types as
JSON, field roles, and the rules for every name that becomes part of a path.

Pure: values and bytes in, values out; no storage I/O. May import only `dsinspect.errors`.
"""
