#!/usr/bin/env bash
# Lists every Rust function longer than 100 lines (`make lint` prints it), longest first, then
# the count. Usage: e2e/bed/long-functions.sh [--fail] [--max N] [DIR...] (default: src e2e/src).
# With --fail it exits 1 when the list is not empty.
#
# What counts: a function's lines from its `fn` line to its closing brace, as rustfmt lays them
# out (the closing brace at the indentation of the `fn` line), minus the lines of struct literals
# inside it (an expression `Name {` … `}`, e.g. a Pod or a status written field by field).
# Not listed: functions named `parse…` (parsers), `#[cfg(test)]` modules, `tests.rs` files and
# `tests/` directories.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
fail=0
max=100
dirs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fail) fail=1 ;;
    --max) max="$2"; shift ;;
    *) dirs+=("$1") ;;
  esac
  shift
done
[ ${#dirs[@]} -gt 0 ] || dirs=(src e2e/src)

list="$(find "${dirs[@]}" -name '*.rs' ! -name tests.rs ! -path '*/tests/*' | sort |
  xargs awk -v MAX="$max" '
FNR == 1 { open_n = 0; in_test = 0; pending_test = 0; lit_ind = -1 }
{
  line = $0
  match(line, /^ */); ind = RLENGTH
  # A #[cfg(test)] module: skipped to its closing brace.
  if (line ~ /^ *#\[cfg\(test\)\]/) { pending_test = 1; next }
  if (pending_test && line ~ /^ *(pub(\([a-z]+\))? )?mod [a-z_0-9]+ *\{ *$/) { test_ind = ind; in_test = 1; pending_test = 0; next }
  if (pending_test && line !~ /^ *#/) pending_test = 0
  if (in_test) { if (line ~ "^ {" test_ind "}\\}") in_test = 0; next }
  # Inside a struct literal: counted apart until its closing brace.
  if (lit_ind >= 0) {
    lit[open_n]++
    if (ind == lit_ind && line ~ /^ *\}/) lit_ind = -1
    next
  }
  if (line ~ /^ *(pub(\([a-z:_ ]+\))? )?(const )?(async )?(unsafe )?(extern "C" )?fn [A-Za-z_0-9]+/) {
    name = line; sub(/^ *.*fn /, "", name); sub(/[^A-Za-z_0-9].*/, "", name)
    open_n++; fn_name[open_n] = name; fn_ind[open_n] = ind; fn_start[open_n] = FNR; lit[open_n] = 0
    # A declaration without a body, or a function on one line.
    if (line ~ /;$/ || (line ~ /\{/ && line ~ /\}$/)) open_n--
    next
  }
  if (open_n > 0 && ind == fn_ind[open_n] && line ~ /^ *\}/) {
    n = FNR - fn_start[open_n] + 1
    counted = n - lit[open_n]
    if (counted > MAX && fn_name[open_n] !~ /^parse/)
      printf "%5d  %s:%d %s (%d lines, %d of them in struct literals)\n", counted, FILENAME, fn_start[open_n], fn_name[open_n], n, lit[open_n]
    if (open_n > 1) lit[open_n - 1] += lit[open_n]
    open_n--
    next
  }
  # `Name {` or `path::Name<..> {` ending a line that is no signature, item or control flow.
  if (open_n > 0 && line !~ /->|^ *\)|^ *where/ \
      && line ~ /[A-Z][a-z][A-Za-z0-9_]*(<[^{}]*>)? \{$/ \
      && line !~ /(^| )(if|while|for|match|loop|else|impl|struct|enum|trait|mod|unsafe) /) {
    lit_ind = ind; lit[open_n]++
  }
}' | sort -rn)"

count=0
[ -z "$list" ] || count=$(printf '%s\n' "$list" | wc -l)
echo "functions over $max lines (struct literals not counted; parsers and tests not listed): $count"
[ -z "$list" ] || printf '%s\n' "$list"
if [ "$fail" = 1 ] && [ "$count" -gt 0 ]; then
  exit 1
fi
