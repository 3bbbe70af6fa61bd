"""Capture mutations for robustness testing: bit flips, overwritten lengths, cuts and splices."""
from __future__ import annotations

import random


def mutate(data: bytes, rng: random.Random, max_ops: int = 4) -> bytes:
    """Return a mutated copy of a capture file's bytes (deterministic for a seeded rng)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, max_ops)):
        if not b:
            break
        op = rng.randrange(7)
        i = rng.randrange(len(b))
        if op == 0:            # flip one bit
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:          # random byte
            b[i] = rng.randrange(256)
        elif op == 2:          # an interesting 16/32-bit value (lengths, counts)
            v = rng.choice([0, 1, 2, 3, 4, 7, 8, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x8000])
            width = rng.choice([2, 4])
            b[i:i + width] = v.to_bytes(4, rng.choice(["little", "big"]))[:width]
        elif op == 3:          # cut the file
            del b[i:]
        elif op == 4:          # delete a run
            del b[i:i + rng.randint(1, 64)]
        elif op == 5:          # duplicate a run (splices records)
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 256)]
        else:                  # zero a run
            n = rng.randint(1, 32)
            b[i:i + n] = bytes(min(n, len(b) - i))
    return bytes(b)
