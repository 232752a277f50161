#!/usr/bin/env bash
# The jars mvn resolved into a folder must be exactly the ones of a committed SHA-256 list:
#   include/check-jars.sh <folder> <list>           check (make kafka-jars / s3-jars; make jars: eobatch/job/jars.py)
#   include/check-jars.sh --write <folder> <list>   write the list again after a pom change (make jar-lock)
# mvn itself runs with --strict-checksums (the repository's own checksums); the list pins the bytes,
# so a changed artifact, or a new or missing one, fails the set-up instead of reaching Spark.
set -euo pipefail
write=0
if [ "${1:-}" = "--write" ]; then write=1; shift; fi
# make jar-lock: the same rules write the lists instead of checking them
[ "${JAR_LOCK_WRITE:-}" = 1 ] && write=1
[ $# -eq 2 ] || { echo "usage: $0 [--write] <folder> <list>" >&2; exit 2; }
dir=$1
list=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
# the product's own class jar (include/jvm/) is built here, not resolved: never listed
jars() { (cd "$dir" && find . -maxdepth 1 -name '*.jar' ! -name 'eobatch-jvm.jar' -printf '%f\n' | LC_ALL=C sort); }
if [ "$write" = 1 ]; then
  (cd "$dir" && jars | xargs sha256sum) > "$list"
  echo "wrote $(wc -l < "$list") jar checksums to $2"
  exit 0
fi
[ -f "$list" ] || { echo "no jar list $2: run \`make jar-lock\` after reviewing the pom change" >&2; exit 1; }
if ! diff <(awk '{print $2}' "$list" | LC_ALL=C sort) <(jars) >/dev/null; then
  echo "the jars resolved into $dir are not the ones $2 lists (< listed, > resolved):" >&2
  diff <(awk '{print $2}' "$list" | LC_ALL=C sort) <(jars) | grep '^[<>]' >&2 || true
  echo "if the pom changed on purpose, review the new artifacts and run \`make jar-lock\`" >&2
  exit 1
fi
(cd "$dir" && sha256sum --quiet --strict -c "$list") || {
  echo "a jar in $dir does not have the SHA-256 that $2 lists: refusing it" >&2; exit 1; }
