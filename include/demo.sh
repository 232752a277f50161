#!/usr/bin/env bash
# make demo: three micro-batches of the example pipeline through the real DAG, on embedded
# defaults (JSON-lines landing folder, Delta tables on local disk, Spark local[*], Airflow on
# SQLite), everything under .demo/. Run it again: it continues from the committed offsets.
set -euo pipefail
cd "$(dirname "$0")/.."
source include/env.sh
export EOBATCH_DATA_DIR="${EOBATCH_DATA_DIR:-$REPO/.demo/data}"
landing="$EOBATCH_DATA_DIR/landing/orders"
mkdir -p "$landing"
airflow_init
stamp=$(date -u +%Y%m%dT%H%M%S)
for i in 1 2 3; do
  f="$landing/orders-$stamp-$i.jsonl"
  python - "$f" "$stamp" "$i" <<'PY'
import json, random, sys
path, stamp, i = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(f"{stamp}-{i}")
lines = []
for n in range(1000):
    lines.append(json.dumps({"order_id": f"{stamp}-{i}-{n:04d}", "customer": rnd.choice(["ada", "bob", "cy", "dee"]),
                             "amount": round(rnd.uniform(1, 500), 2), "ts": f"2026-11-21T{i:02d}:{n % 60:02d}:00Z"}))
lines += ['{"order_id": "bad-amount", "amount": "twelve"}', 'this is not json', '{"customer": "no id"}']
with open(path + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
import os; os.replace(path + ".tmp", path)  # land atomically: a .tmp name is never read
PY
  echo "landed $(basename "$f"): 1000 good records, 3 bad ones" >&2
  bash include/run_pipeline.sh orders 1
done
echo
python -m eobatch.cli ledger orders
echo
python -m eobatch.cli show orders --limit 3
