"""`make wheel`: beside dist/eobatch-<version>-py3-none-any.whl, the file that installs it with the
runtime lock, every distribution checked against its SHA-256 (the lock's, and the wheel's own):

    cd dist && pip install -r eobatch-<version>-requirements.txt

pip refuses a hashed lock given as constraints (``-c requirements.txt``) for a wheel given by path
(hash-checking mode needs a hash for the wheel too), hence this file. ``uv pip install
dist/eobatch-*.whl -c requirements.txt`` checks the same hashes.
"""

import hashlib
import sys
from pathlib import Path


def main(wheel: str, lock: str) -> Path:
    w = Path(wheel)
    digest = hashlib.sha256(w.read_bytes()).hexdigest()
    out = w.with_name(w.name.removesuffix("-py3-none-any.whl") + "-requirements.txt")
    body = Path(lock).read_text()
    out.write_text(f"# eobatch {w.name} and its runtime lock: `pip install -r {out.name}` from {w.parent}/\n"
                   f"./{w.name} --hash=sha256:{digest}\n" + body)
    return out


if __name__ == "__main__":
    print(main(sys.argv[1], sys.argv[2]))
