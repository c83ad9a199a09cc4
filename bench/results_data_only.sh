#!/usr/bin/env bash
# bench/results/ holds data only (issue 28): an experiment's code lives in a folder that builds,
# or goes. Fails naming any file there that is not data.
# usage: results_data_only.sh BENCH_RESULTS_DIR
set -u
bad=$(find "$1" -type f ! \( -name '*.txt' -o -name '*.md' -o -name '*.csv' -o -name '*.png' -o -name '*.diff' \
  -o -name '*.json' \) | sort)
if [ -n "$bad" ]; then
  echo "not data, under $1:"
  echo "$bad"
  exit 1
fi
echo "$1: data only"
