#!/usr/bin/env bash
# docs/TOOL.md is what scripts/gen_tool_doc.sh writes from the built tool's help (ctest
# tool_doc_current, no GPU needed). Skips (exit 77) when the page was generated with another
# CLI11 than this build's: the help's formatting differs between CLI11 versions.
# Usage: tests/cli/tool_doc_check.sh path/to/tilelink [path/to/docs/TOOL.md]
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tl=${1:?usage: tool_doc_check.sh path/to/tilelink [path/to/docs/TOOL.md]}
doc=${2:-$root/docs/TOOL.md}

fresh=$(mktemp)
trap 'rm -f "$fresh"' EXIT
if ! bash "$root/scripts/gen_tool_doc.sh" "$tl" "$fresh" 2>"$fresh.log"; then
  cat "$fresh.log"
  rm -f "$fresh.log"
  echo "FAIL: scripts/gen_tool_doc.sh could not run $tl"
  exit 1
fi
rm -f "$fresh.log"

cli11_of() { sed -n 's/.*CLI11 \([^ ]*\) formats it.*/\1/p' "$1" | head -1; }
if [[ -f $doc && $(cli11_of "$doc") != "$(cli11_of "$fresh")" ]]; then
  echo "SKIPPED: docs/TOOL.md was generated with CLI11 $(cli11_of "$doc"), this build uses CLI11 $(cli11_of "$fresh")"
  exit 77
fi
if ! changes=$(diff -u --label docs/TOOL.md --label "generated from $tl" "$doc" "$fresh" 2>&1); then
  echo "docs/TOOL.md is out of date: run scripts/gen_tool_doc.sh"
  echo "$changes"
  exit 1
fi
echo "docs/TOOL.md is current"
