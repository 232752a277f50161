#!/usr/bin/env bash
# make demo-chain: three pipelines chained by their tables (docs/site/sources.md "Read another
# pipeline's Delta table"): orders (landing files -> the orders table, bronze), orders_silver (the
# latest version of each order, from the orders table's versions) and orders_gold (totals per
# customer over silver's Change Data Feed). Each hop runs through the real DAG (`airflow dags
# test`); in a running Airflow the silver and gold DAGs start on the asset events of the table
# before them. The second round lands changed versions of some orders: gold follows them.
set -euo pipefail
cd "$(dirname "$0")/.."
source include/env.sh
export EOBATCH_DATA_DIR="${EOBATCH_DATA_DIR:-$REPO/.demo/data}"
landing="$EOBATCH_DATA_DIR/landing/orders"
mkdir -p "$landing"
airflow_init
stamp=$(date -u +%Y%m%dT%H%M%S)
for round in 1 2; do
  f="$landing/chain-$stamp-$round.jsonl"
  python - "$f" "$stamp" "$round" <<'PY'
import json, os, random, sys
path, stamp, rnd_no = sys.argv[1], sys.argv[2], int(sys.argv[3])
rnd = random.Random(f"{stamp}-{rnd_no}")
lines = []
for n in range(200):  # round 2: the same 200 orders again, later, half of them with a new amount
    amount = round(rnd.uniform(1, 500), 2) if rnd_no == 1 or n % 2 else round(rnd.uniform(1, 500), 2) + 1000
    lines.append(json.dumps({"order_id": f"chain-{stamp}-{n:04d}", "customer": ["ada", "bob", "cy", "dee"][n % 4],
                             "amount": amount, "ts": f"2026-11-21T0{rnd_no}:{n % 60:02d}:00Z"}))
with open(path + ".tmp", "w") as fh:
    fh.write("\n".join(lines) + "\n")
os.replace(path + ".tmp", path)
PY
  echo "round $round: landed $(basename "$f"): 200 orders" >&2
  for p in orders orders_silver orders_gold; do
    bash include/run_pipeline.sh "$p" 1
  done
done
echo
python -m eobatch.cli ledger orders_gold
echo
python - <<'PY'
import collections, os
from deltalake import DeltaTable
lake = os.path.join(os.environ["EOBATCH_DATA_DIR"], "lake")
silver = DeltaTable(os.path.join(lake, "orders_silver")).to_pyarrow_table().to_pylist()
gold = {r["customer"]: r for r in DeltaTable(os.path.join(lake, "orders_gold")).to_pyarrow_table().to_pylist()}
want = collections.defaultdict(lambda: [0, 0.0])
for r in silver:
    want[r["customer"]][0] += 1
    want[r["customer"]][1] += r["amount"]
print(f"{'customer':10} {'orders (gold)':>14} {'orders (silver)':>16} {'total (gold)':>14} {'total (silver)':>15}")
ok = True
for c in sorted(want):
    g = gold.get(c, {"rows": 0, "total": 0.0})
    ok &= g["rows"] == want[c][0] and abs(g["total"] - want[c][1]) < 1e-6
    print(f"{c:10} {g['rows']:>14} {want[c][0]:>16} {g['total']:>14.2f} {want[c][1]:>15.2f}")
print("gold equals the totals of silver's current orders" if ok else "MISMATCH between gold and silver")
raise SystemExit(0 if ok else 1)
PY
