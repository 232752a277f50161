#!/usr/bin/env bash
# include/jvm/build.sh OUT.jar: the stage job's JVM extension (eobatch.jvm.*), compiled with the
# JDK's javac against the Spark jars of the project's pyspark (the Spark it runs on), into OUT.jar.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: include/jvm/build.sh OUT.jar}"
command -v javac >/dev/null && command -v jar >/dev/null || {
  echo "error: javac and jar not found: the stage job's JVM extension needs a JDK 17 (Debian: openjdk-17-jdk-headless)" >&2
  exit 2; }
spark_jars="$("${VENV:-$here/../../.venv}/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
javac -nowarn --release 17 -encoding UTF-8 -cp "$spark_jars/*" -d "$tmp/classes" $(find "$here/eobatch" -name '*.java' | sort)
jar --create --file "$tmp/out.jar" --date 2020-01-01T00:00:00Z -C "$tmp/classes" .
mv "$tmp/out.jar" "$out"
