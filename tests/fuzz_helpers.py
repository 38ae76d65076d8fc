"""Cheap deterministic input mutators for the fuzz tests: hypothesis draws a seed and a few knobs,
these turn a small real input into many hostile variants (each one is counted as an input tried)."""

import copy
import json
import math
import random
from typing import Any, Callable, Iterator

HOSTILE_VALUES = [None, True, -1, 0, 2 ** 63, -2 ** 63, 10 ** 30, 1e308, math.nan, math.inf, -math.inf, "", "..",
                  "../../etc", "/abs", "C:\\x", "s3://x", "%2e%2e", "a\0b", "é" * 300, [], {}, [[[]]],
                  {"a": {"b": {}}}, [1] * 64, "x" * 5000]


def mutate_bytes(data: bytes, rng: random.Random, rounds: int = 3) -> bytes:
    """`data` with a few random edits: bit flips, byte sets, cuts, inserts, duplications, truncation."""
    out = bytearray(data)
    for _ in range(rng.randint(1, rounds)):
        op = rng.randrange(7)
        i = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(i, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[min(i, len(out) - 1)] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2:
            del out[i:i + rng.randint(1, 64)]
        elif op == 3:
            out[i:i] = rng.randbytes(rng.randint(1, 32))
        elif op == 4 and out:
            j = rng.randrange(len(out))
            out[i:i] = out[j:j + rng.randint(1, 256)]
        elif op == 5:
            del out[rng.randrange(len(out) + 1):]
        else:  # overwrite a 4-byte run with an extreme size (headers declaring huge lengths)
            out[i:i + 4] = rng.choice((b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff",
                                       b"\x00\x00\x00\x00", b"\x00\x01\x00\x00"))
    return bytes(out)


def mutate_json(value: Any, rng: random.Random, rounds: int = 2) -> Any:
    """A deep copy of `value` with random nodes replaced, deleted or duplicated."""
    value = json.loads(json.dumps(value))
    for _ in range(rng.randint(1, rounds)):
        value = _mutate_node(value, rng, depth=0)
    return value


def _mutate_node(node: Any, rng: random.Random, depth: int) -> Any:
    children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) else []
    if not children or rng.random() < 0.25 or depth > 12:
        return copy.deepcopy(rng.choice(HOSTILE_VALUES + [_tweak(node, rng)]))
    key, child = rng.choice(children)
    action = rng.random()
    if action < 0.1:
        node.pop(key) if isinstance(node, dict) else node.pop(key)
    elif action < 0.15 and isinstance(node, dict):
        node[rng.choice(["extra", "", "format", "shards", "num_rows", "meta", "order"])] = copy.deepcopy(
            rng.choice(HOSTILE_VALUES))
    else:
        node[key] = _mutate_node(child, rng, depth + 1)
    return node


def _tweak(node: Any, rng: random.Random) -> Any:
    if isinstance(node, bool):
        return not node
    if isinstance(node, int):
        return node + rng.choice((-1, 1, -node - 1, 2 ** 40))
    if isinstance(node, float):
        return rng.choice((-node, node * 1e300, 0.0))
    if isinstance(node, str):
        return node[: rng.randrange(len(node) + 1)] + rng.choice(("", "x", "\0", "/..", "é"))
    return node


def run_inputs(inputs: Iterator[Any], call: Callable[[Any], Any], allowed: tuple[type[BaseException], ...]) -> int:
    """Feed every input to `call`; anything raised outside `allowed` fails with the input shown."""
    n = 0
    for item in inputs:
        n += 1
        try:
            call(item)
        except allowed:
            pass
        except Exception as e:  # noqa: BLE001 - the property under test
            raise AssertionError(f"{e.__class__.__name__}: {e} on input {item!r:.600}") from e
    return n
