#!/bin/sh
# Re-record the kit's goldens with real Mastra 1.71 (tests never do this: the goldens are committed).
#
#   tests/vendor_kit/record.sh <vendor> [case,case,...]     vendor = responses | chat | anthropic | google
#   tests/vendor_kit/record.sh pending/<vendor>.json [case,...]   a cases file (e.g. cases waiting to land)
#
# Replays fixtures/ through server.py on loopback and runs mastra_run.mjs over cases/<vendor>.json, writing
# golden/<case>.jsonl (Mastra's chunks) and golden/<case>.requests.json (the bodies Mastra sent).
# Needs node and the conformance runner's installed node_modules: MASTRA_RUNNER_DIR (default
# /work/tools/mastra-runner, where `npm ci` was run).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
vendor=${1:?usage: record.sh <vendor> [case,case,...]}
only=${2:-}
case "$vendor" in
  *.json) cases="$here/$vendor" ;;
  *) cases="$here/cases/$vendor.json" ;;
esac
[ -f "$cases" ] || { echo "no cases file $cases" >&2; exit 2; }
portfile=$(mktemp)
VENDOR_FIXTURES="$here/fixtures" python3 -u "$here/server.py" 0 > "$portfile" &
server=$!
trap 'kill "$server" 2>/dev/null; rm -f "$portfile"' EXIT INT TERM
while [ ! -s "$portfile" ]; do sleep 0.1; done
node "$here/mastra_run.mjs" "$(cat "$portfile")" "$cases" "$here/golden" $only
